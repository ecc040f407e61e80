"""The typer app: moetune's commands as typer builds them from the registry (cli/base.py),
for everything the fast path (cli/fast.py) leaves to it: the help, usage errors with their
did-you-mean, values typer coerces itself. ``register`` adds to ``app`` what the command
modules imported so far declared.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from moetune.cli.base import (
    PASS_THROUGH,
    REGISTRY,
    CommandContext,
    Flag,
    State,
    error_document,
    fail,
    say_error,
    version_line,
)
from moetune.cli.coercion import plain_coercion
from moetune.cli.helpfmt import whole_short_help, write_commands
from moetune.errors import BadValueError, ExitCode

T = TypeVar("T")


class Group(TyperGroup):
    """moetune's command group: its options (--debug, --version, --help) coerced plainly."""

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_coercion(super().get_params(ctx))

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        write_commands(self, ctx, formatter)


app = typer.Typer(
    cls=Group,
    name="moetune",
    help="Tune llama.cpp Mixture-of-Experts expert offload for your GPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and usage errors, the value names of cli/options.py
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(version_line())
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    State.debug = debug


# click's ClickException, of whichever click typer carries (its own copy in recent typers)
ClickError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class BadValueParameter(typer.BadParameter):
    """A malformed option value: one line and BAD_VALUE, like any moetune error."""

    exit_code = int(ExitCode.BAD_VALUE)

    def __init__(self, error: BadValueError) -> None:
        super().__init__(error.message)
        self.error = error

    def format_message(self) -> str:
        name = self.param.opts[0] if self.param is not None and self.param.opts else None
        return f"{name}: {self.error.message}" if name else self.error.message

    def show(self, file: Any = None) -> None:
        say_error(self.format_message(), self.error.hint, ExitCode.BAD_VALUE)


def parser(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A typer parser: ``parse``, its BadValueError shown as moetune shows errors."""

    def wrapped(value: str) -> T:
        if not isinstance(value, str):  # a default given as the value itself, parsed already
            return value
        try:
            return parse(value)
        except BadValueError as exc:
            raise BadValueParameter(exc) from None

    wrapped.__name__ = parse.__name__
    return wrapped


# --- how commands parse and show their options ----------------------------------------------


def _value_name(param: Any) -> str:
    return str(param.metavar or param.name.upper())


class Command(TyperCommand):
    """A moetune command: llama-server's arguments only after ``--`` (anything unknown before
    it is an error, with a did-you-mean), and help that names each value (SIZE, N|max)."""

    takes_pass_through = False

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_coercion(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """The options, and the arguments after ``--``. A value refused here is reported as
        the command's own errors are: with ``--json``, its document on stdout too."""
        given = args[: args.index("--")] if "--" in args else args
        as_json = "--json" in given and any(p.name == "as_json" for p in self.params)
        try:
            return self._parse_args(ctx, args)
        except ClickError as exc:
            if as_json and not ctx.resilient_parsing:
                _usage_document(exc)
            raise  # click prints its line on stderr and exits with its code
        except typer.Exit:  # --help, --version
            raise
        except (Exception, KeyboardInterrupt) as exc:
            raise fail(exc, as_json) from None

    def _parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        rest: tuple[str, ...] = ()
        if "--" in args:
            index = args.index("--")
            args, rest = args[:index], tuple(args[index + 1 :])
            if not self.takes_pass_through:
                raise typer.BadParameter(
                    f"`moetune {self.name}` passes nothing to llama-server", param_hint="--"
                )
        ctx.meta[PASS_THROUGH] = rest
        return list(super().parse_args(ctx, args))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [str(self.options_metavar)] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _value_name(param)
                pieces.append(name if param.required else f"[{name}]")
        if self.takes_pass_through:
            pieces.append("[-- LLAMA-SERVER-ARGS...]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args: list[tuple[str, str]] = []
        opts: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                required = "  [required]" if param.required else ""
                args.append((_value_name(param), str(getattr(param, "help", "") or "") + required))
                continue
            if not getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = _METAVARS.get(getattr(param, "bare_type", str)(), "TEXT")
            if (record := param.get_help_record(ctx)) is not None:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _usage_document(exc: Any) -> None:
    """The JSON document of an option refused while parsing (USAGE, or BAD_VALUE)."""
    codes = {int(code) for code in ExitCode}
    code = ExitCode(exc.exit_code) if exc.exit_code in codes else ExitCode.USAGE
    hint = exc.error.hint if isinstance(exc, BadValueParameter) else None
    error_document(code, exc.format_message(), hint)


_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH", "Path": "PATH"}


class PassThroughCommand(Command):
    """A command that launches llama-server: what follows ``--`` is passed to it."""

    takes_pass_through = True


# --- the registry on the app -----------------------------------------------------------------

_groups: dict[str, typer.Typer] = {}
_registered = [0]  # how many of REGISTRY are on the app


def register() -> typer.Typer:
    """``app``, with every command and group declared so far."""
    for spec in REGISTRY[_registered[0] :]:
        if spec.func is None:
            sub = typer.Typer(cls=Group, help=spec.help, no_args_is_help=True)
            app.add_typer(sub, name=spec.name)
            _groups[spec.name] = sub
            continue
        target = _groups[spec.group] if spec.group else app
        cls = PassThroughCommand if spec.pass_through else Command
        target.command(spec.name, cls=cls)(typer_form(spec.func))
    _registered[0] = len(REGISTRY)
    return app


def typer_form(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` as typer reads a command: its Flags as typer's Option and Argument, its
    CommandContext as typer's Context."""
    hints = typing.get_type_hints(func, include_extras=True)
    signature = inspect.signature(func)
    annotations = {name: _typer_hint(hint) for name, hint in hints.items()}
    parameters = [p.replace(annotation=annotations[p.name]) for p in signature.parameters.values()]

    def command(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(command, name, getattr(func, name))
    command.__annotations__ = annotations
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return command


def _typer_hint(hint: Any) -> Any:
    if hint is CommandContext:
        return typer.Context
    if typing.get_origin(hint) is not Annotated:
        return hint
    meta = tuple(_typer_info(m) if isinstance(m, Flag) else m for m in hint.__metadata__)
    params = (hint.__origin__, *meta)
    return Annotated[params]


def _typer_info(flag: Flag) -> Any:
    settings = dict(flag.settings)
    if "parser" in settings:
        settings["parser"] = parser(settings["parser"])
    if "callback" in settings:
        settings["callback"] = _typer_callback(settings["callback"])
    make = typer.Option if flag.kind == "option" else typer.Argument
    return make(*flag.decls, **settings)


def _typer_callback(callback: Callable[[CommandContext, Any], Any]) -> Callable[..., Any]:
    """An option's callback as typer calls it (typer finds the context by its type)."""

    def called(context: typer.Context, value: Any) -> Any:
        return callback(context, value)

    return called
