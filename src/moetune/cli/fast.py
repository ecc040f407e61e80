"""A command run without typer, where its arguments parse plainly.

Importing typer and building a command's click parameters cost about 125 million
instructions of every start (a sixth of ``moetune plan``'s, more of inspect's); most
invocations need none of what typer adds (the help, usage errors with their suggestions,
its own coercion of the rarer types). ``parse`` reads the arguments against
the command's own declaration (the Flags of cli/base.py, the table typer reads too) and
takes them only where the result is certainly typer's: every option by one of the names
typer gives it (``--NAME``, ``--NAME/--no-NAME`` for a flag, or its declared names), each at
most once, a value as the next argument or after ``=`` (not one that starts with ``-``), a
value our parser takes or a string, flag, path or whole number within its bounds, every
required option and argument and no extra one (a last list argument takes the rest),
``--`` only where the command passes what follows to llama-server. Anything else is left to
typer (``None``), which then reports it as it does. tests/cli/test_fast.py holds the two
parsers to the same names and values on every command.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import itertools
import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from types import NoneType, TracebackType, UnionType
from typing import Annotated, Any, TypeVar

from moetune.cli.base import (
    COMMANDS,
    PASS_THROUGH,
    REGISTRY,
    CommandContext,
    Flag,
    Spec,
    State,
    fail,
    version_line,
)
from moetune.cli.coercion import NOT_PLAIN, plain_value
from moetune.errors import BadValueError

T = TypeVar("T")

_PLAIN_TYPES = (str, int, bool, Path)


class Param:
    """One parameter of a command as the fast path reads it."""

    __slots__ = ("argument", "base", "default", "flag", "many", "name", "names", "negative")

    def __init__(self, name: str, base: Any, flag: Flag, default: Any, *, many: bool) -> None:
        self.name, self.base, self.flag, self.default = name, base, flag, default
        self.many = many  # an argument that takes every value (a list)
        self.argument = flag.kind == "argument"
        self.negative: tuple[str, ...] = ()
        if self.argument:
            self.names: tuple[str, ...] = ()
        elif flag.decls:  # "--NAME" or "--NAME/--no-NAME"
            self.names = tuple(d.split("/")[0] for d in flag.decls)
            self.negative = tuple(d.split("/")[1] for d in flag.decls if "/" in d)
        else:
            option = f"--{name.replace('_', '-')}"
            self.names = (option,)
            if base is bool:
                self.negative = (f"--no-{name.replace('_', '-')}",)

    @property
    def is_flag(self) -> bool:
        return self.base is bool and not self.argument

    def value(self, text: str) -> Any:
        """The value of ``text``, as typer would make it; ``NOT_PLAIN`` where typer should
        say (a value our parser refuses included: typer's side reports it)."""
        if self.base is Path and "parser" not in self.flag.settings:
            return Path(text) if text and "\x00" not in text else NOT_PLAIN
        settings = self.flag.settings
        bounds = (settings.get("min"), settings.get("max"))
        return plain_value(
            text, self.base, settings.get("parser"), bounds, refused=(BadValueError,)
        )

    def default_value(self) -> Any:
        """The default as typer gives it: a text default through the parser, an empty tuple
        for a list argument given nothing."""
        if self.many:
            return ()
        parse = self.flag.settings.get("parser")
        if parse is not None and isinstance(self.default, str):
            return parse(self.default)
        return self.default


class Table:
    """A command's parameters, in their declared order, and its context's name if any."""

    def __init__(self, params: list[Param], context: str | None) -> None:
        self.params = params
        self.context = context
        self.options = {n: p for p in params for n in (*p.names, *p.negative)}
        self.arguments = [p for p in params if p.argument]


def table_of(func: Callable[..., Any]) -> Table | None:
    """The fast path's reading of ``func``'s declaration; None where it has a parameter the
    fast path leaves to typer (a type typer coerces itself, an option without a Flag, a list
    option, a list argument before another)."""
    hints = typing.get_type_hints(func, include_extras=True)
    params: list[Param] = []
    context = None
    for name, parameter in inspect.signature(func).parameters.items():
        hint = hints[name]
        if hint is CommandContext:
            context = name
            continue
        if typing.get_origin(hint) is not Annotated:
            return None
        flags = [m for m in hint.__metadata__ if isinstance(m, Flag)]
        base, many = _plain_type(hint.__origin__)
        if len(flags) != 1 or base is None:
            return None
        flag = flags[0]
        if many and flag.kind != "argument":
            return None
        if set(flag.settings) - {"help", "metavar", "parser", "min", "max", "callback"}:
            return None
        if base not in _PLAIN_TYPES and "parser" not in flag.settings:
            return None
        default = parameter.default
        if default is inspect.Parameter.empty:
            default = NOT_PLAIN  # required
        params.append(Param(name, base, flag, default, many=many))
    table = Table(params, context)
    if any(p.many for p in table.arguments[:-1]):
        return None  # only a last list argument, which takes what the others leave
    return table


def _plain_type(annotation: Any) -> tuple[Any, bool]:
    """``X`` of ``X``, ``X | None``, ``list[X]`` or ``list[X] | None``, and whether it is a
    list; None for a union of several types or another generic."""
    if isinstance(annotation, UnionType) or typing.get_origin(annotation) is typing.Union:
        others = [a for a in typing.get_args(annotation) if a is not NoneType]
        if len(others) != 1:
            return None, False
        annotation = others[0]
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return (item, True) if typing.get_origin(item) is None else (None, False)
    return (annotation, False) if typing.get_origin(annotation) is None else (None, False)


def parse(table: Table, args: Sequence[str]) -> dict[str, Any] | None:
    """Each parameter's value from ``args`` (before any ``--``), defaults not yet applied;
    None where typer should parse them."""
    values: dict[str, Any] = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if not token.startswith("-"):
            positional.append(token)
            continue
        name, equals, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        param = table.options.get(name)
        if param is None or param.name in values:
            return None
        if param.is_flag:
            if equals:
                return None
            values[param.name] = name not in param.negative
            continue
        if equals:
            text = inline
        elif index < len(args) and not args[index].startswith("-"):
            text, index = args[index], index + 1
        else:
            return None
        value = param.value(text)
        if value is NOT_PLAIN:
            return None
        values[param.name] = value
    last = table.arguments[-1] if table.arguments and table.arguments[-1].many else None
    singles = table.arguments[:-1] if last is not None else table.arguments
    if last is None and len(positional) > len(singles):
        return None
    for param, text in zip(singles, positional, strict=False):
        value = param.value(text)
        if value is NOT_PLAIN:
            return None
        values[param.name] = value
    if last is not None and len(positional) > len(singles):
        many = [last.value(text) for text in positional[len(singles) :]]
        if any(value is NOT_PLAIN for value in many):
            return None
        values[last.name] = many
    if any(p.default is NOT_PLAIN and p.name not in values for p in table.params):
        return None  # a required option or argument missing: typer says so
    return values


class FastContext:
    """The context a command and the options' callbacks get on the fast path: the arguments
    after ``--``, and the resources they hold until the command ends."""

    def __init__(self, rest: tuple[str, ...]) -> None:
        self.meta: dict[str, Any] = {PASS_THROUGH: rest}
        self._stack = contextlib.ExitStack()

    def with_resource(self, context_manager: contextlib.AbstractContextManager[T]) -> T:
        return self._stack.enter_context(context_manager)

    def __enter__(self) -> FastContext:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.close()


def planned(argv: Sequence[str]) -> tuple[Spec, Table, dict[str, Any], tuple[str, ...]] | None:
    """The command ``argv`` names, its table, its parsed values and the arguments after
    ``--``; None where typer should take ``argv``. Imports that command's module."""
    args = list(argv)
    while args and args[0] == "--debug":
        args.pop(0)
    if not args or args[0].startswith("-") or args[0] not in COMMANDS:
        return None
    name = args.pop(0)
    importlib.import_module(f"moetune.cli.{COMMANDS[name]}")
    spec = next((s for s in REGISTRY if s.name == name and s.group is None), None)
    if spec is not None and spec.func is None:  # a group: its command next
        sub = args.pop(0) if args else None
        spec = next((s for s in REGISTRY if s.group == name and s.name == sub), None)
    if spec is None or spec.func is None:
        return None
    rest: tuple[str, ...] = ()
    if "--" in args:
        if not spec.pass_through:
            return None
        at = args.index("--")
        args, rest = args[:at], tuple(args[at + 1 :])
    table = table_of(spec.func)
    if table is None:
        return None
    values = parse(table, args)
    if values is None:
        return None
    return spec, table, values, rest


def run_fast(argv: Sequence[str]) -> bool:
    """Run ``moetune ARGV`` without typer, where it parses plainly (False: it did not run);
    ``--version`` among the app's own options alone (``--debug``) is answered here too."""
    lead = list(itertools.takewhile(lambda arg: arg.startswith("-"), argv))
    if "--version" in lead and set(lead) <= {"--debug", "--version"}:
        sys.stdout.write(version_line())
        return True
    found = planned(argv)
    if found is None:
        return False
    spec, table, values, rest = found
    assert spec.func is not None
    State.debug = "--debug" in lead  # the app's own options before the command: --debug alone
    with FastContext(rest) as context:
        kwargs: dict[str, Any] = {}
        try:
            for param in table.params:
                value = values[param.name] if param.name in values else param.default_value()
                callback = param.flag.settings.get("callback")
                kwargs[param.name] = value if callback is None else callback(context, value)
        except (Exception, KeyboardInterrupt) as exc:
            raise fail(exc, bool(kwargs.get("as_json", values.get("as_json")))) from None
        if table.context is not None:
            kwargs[table.context] = context
        spec.func(**kwargs)
    return True
