"""The typer app: moetune's commands and groups as the command modules declared them
(cli/base.py's registry), with the help and usage errors moetune shows. ``register`` adds to
``app`` what the command modules imported so far declared.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from moetune.cli.base import (
    PASS_THROUGH,
    REGISTRY,
    BadValueParameter,
    Exit,
    State,
    error_document,
    fail,
    say_error,
    version_line,
)
from moetune.cli.helpfmt import whole_short_help, write_commands
from moetune.errors import ExitCode

# click's ClickException and UsageError, of whichever click typer carries (its own copy in
# recent typers): found through typer's public BadParameter
ClickError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)
UsageError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


def usage_line(exc: Any) -> Exit:
    """A usage error (no such command or option, a missing argument, a value typer refuses)
    as every error a user can cause ends: one line with its code, its suggestion kept."""
    say_error(exc.format_message(), None, ExitCode.USAGE)
    return Exit(int(ExitCode.USAGE))


class Group(TyperGroup):
    """moetune's command group: each command's whole first paragraph in its help; a usage
    error (an unknown command or option) one line."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        write_commands(self, ctx, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return list(super().parse_args(ctx, args))
        except UsageError as exc:
            raise usage_line(exc) from None

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            raise usage_line(exc) from None


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


# --- how commands parse and show their options ----------------------------------------------


def _value_name(param: Any) -> str:
    return str(param.metavar or param.name.upper())


# the value name of an option declared without one, by its type
_METAVARS: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def declared_types(callback: Callable[..., Any] | None) -> dict[str, Any]:
    """Each parameter's type as the command's function declares it (``X`` of ``X | None``)."""
    if callback is None:
        return {}
    found: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(inspect.unwrap(callback)).items():
        found[name] = hint
        if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
            others = [a for a in typing.get_args(hint) if a is not NoneType]
            found[name] = others[0] if len(others) == 1 else hint
    return found


class Command(TyperCommand):
    """A moetune command: llama-server's arguments only after ``--`` (anything unknown before
    it is an error, with a did-you-mean), and help that names each value (SIZE, N|max)."""

    takes_pass_through = False

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """The options, and the arguments after ``--``. A value refused here is reported as
        the command's own errors are: with ``--json``, its document on stdout too; any other
        usage error (an unknown option, a missing argument, a value typer itself refuses) is
        one line and USAGE."""
        given = args[: args.index("--")] if "--" in args else args
        as_json = "--json" in given and any(p.name == "as_json" for p in self.params)
        try:
            return self.parse_options(ctx, args)
        except ClickError as exc:
            if as_json and not ctx.resilient_parsing:
                _usage_document(exc)
            if isinstance(exc, UsageError) and not isinstance(exc, BadValueParameter):
                raise usage_line(exc) from None
            raise  # BAD_VALUE: its own line (BadValueParameter.show)
        except typer.Exit:  # --help, --version
            raise
        except (Exception, KeyboardInterrupt) as exc:
            raise fail(exc, as_json) from None

    def parse_options(self, ctx: Any, args: list[str]) -> list[str]:
        """Click's parse of the arguments before ``--``; those after it in ``ctx.meta``."""
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
        types = declared_types(self.callback)
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                required = "  [required]" if param.required else ""
                args.append((_value_name(param), str(getattr(param, "help", "") or "") + required))
                continue
            if not getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = _METAVARS.get(types.get(str(param.name)), "TEXT")
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
        target.command(spec.name, cls=cls)(spec.func)
    _registered[0] = len(REGISTRY)
    return app
