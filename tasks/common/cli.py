"""Command lines generated from a flow's typed config dataclass, so the dataclass is the one place
of every default and help text; a command line, the Makefile and prefect.yaml pass overrides only.

One flag per field, ``--field-name``, typed from the annotation:

* help: ``Annotated[T, Help("...")]`` (also the field's description in the Prefect UI) or
  ``field(metadata={"help": "..."})``; the flag's help ends with the dataclass default;
* ``bool``: ``--flag`` / ``--no-flag``; ``Literal[...]``: choices (or ``metadata={"choices": ...}``);
  ``tuple[str, ...]`` (or of ``int`` / ``float``): comma separated; ``Path``: a path;
  ``X | None``: ``none`` (or an empty value) is None;
* ``metadata={"cli": Flag(...)}`` renames a flag, reads a negative number as None
  (``--limit -1``), lets a ``tuple[str, ...]`` flag repeat (``repeat=True``: ``--dataset a --dataset b``)
  or hides the field (``cli=False``); it can also make a flag required, add a ``--no-flag`` that gives
  None (``none_flag``: ``--discriminator X | --no-discriminator``) or negate a bool (``invert``:
  ``--single-order`` sets ``both_orders`` False);
* a nested config (``llm: LLMConfig``) is flattened: ``metadata={"cli": {"sub_field": Flag("flag")}}``
  names the sub-fields on the command line, flat, under today's flag names. Two fields may share one
  flag (``--seed`` sets ``balance.seed`` and ``shards.seed``) when their defaults agree.

Every command line also takes ``--verbose`` (not a config field: how a failure is shown, read by
``tasks/common/flow_cli.py``).

:func:`parse_config` parses and builds the config (a ``ValueError`` from its checks is one line of
usage error, exit status 2); :func:`to_argv` writes a config back as flags (tests round-trip it).
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

C = TypeVar("C")


def Help(text: str) -> Any:  # noqa: N802 - reads as a type annotation: Annotated[int, Help("...")]
    """A field's help text, for the command line and the Prefect UI (a pydantic ``Field`` description)."""
    return Field(description=text)


@dataclass(frozen=True)
class Flag:
    """How one field appears on the command line."""

    name: str | None = None  # without the leading --; default: the field name with dashes
    help: str | None = None  # default: the field's own help (Annotated Help or metadata)
    none_if_negative: bool = False  # a negative number means None (--limit -1: no limit)
    cli: bool = True  # False: not on the command line
    repeat: bool = False  # tuple[str, ...]: each use of the flag adds its values (--dataset a --dataset b)
    required: bool = False  # the command line must give it (or its none_flag)
    none_flag: str | None = None  # help of a --no-FLAG that gives None, exclusive with --FLAG VALUE
    invert: bool = False  # bool: the flag gives the field's negation (--single-order: both_orders False)
    split: bool = True  # tuple: comma separated values; False: one value per use (a file name may hold commas)
    none_if_zero: bool = False  # 0 means None too (--max-producers 0: no filter)
    metavar: str | None = None  # the value's name in the help


@dataclass
class Option:
    """One command-line flag and the config field(s) it sets."""

    flag: str
    paths: list[tuple[str, ...]]  # (field,) or (nested field, sub-field)
    kind: type  # str, int, float, bool, Path or tuple (of item)
    optional: bool
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    none_if_negative: bool = False
    repeat: bool = False
    item: type = str  # of a tuple: str, int or float
    required: bool = False
    none_flag: str | None = None
    invert: bool = False
    split: bool = True
    none_if_zero: bool = False
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def cli_default(self) -> Any:
        """The parser's default: the field's (negated for an ``invert`` flag)."""
        return not self.default if self.invert else self.default

    def field_value(self, parsed: Any) -> Any:
        """The field's value from the flag's parsed value."""
        return not parsed if self.invert else parsed

    def convert(self, text: str) -> Any:
        if self.optional and text.strip().lower() in ("", "none"):
            return None
        if self.kind is tuple:
            values = text.split(",") if self.split else [text]
            if self.repeat and self.split:
                values = [v.strip() for v in values]  # --toolset "apibank, tmdb"
            return tuple(_typed(self.item, v) for v in values if v or not self.split)  # one a use: kept even empty
        value = _typed(self.kind, text)
        if (self.none_if_negative and value < 0) or (self.none_if_zero and value == 0):
            return None
        return value

    def render(self, value: Any) -> list[str]:
        """``value`` as command-line words (the inverse of :meth:`convert`)."""
        if self.kind is bool:
            return [f"--{self.flag}" if value != self.invert else f"--no-{self.flag}"]
        if value is None and self.none_flag is not None:
            return [f"--no-{self.flag}"]
        if self.repeat and value is not None:
            return [f"--{self.flag}={v}" for v in value]
        if value is None:
            return [f"--{self.flag}=none"]
        text = ",".join(map(str, value)) if self.kind is tuple else str(value)
        return [f"--{self.flag}={text}"]  # with =, a value may start with a dash


def _typed(kind: type, text: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None


def _show(value: Any) -> str:
    if value is None or value == ():
        return "none"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _unwrap(hint: Any) -> tuple[Any, str | None]:
    """``(type without Annotated, description)``."""
    description = None
    if typing.get_origin(hint) is Annotated:
        hint, *extras = typing.get_args(hint)
        for extra in extras:
            description = getattr(extra, "description", None) or description
    return hint, description


def _kind(hint: Any, where: str) -> tuple[type, bool, tuple[Any, ...] | None, type]:
    """``(kind, optional, choices, item)`` of a field's type (item: a tuple's element type)."""
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        args = [a for a in args if a is not Path] or args  # str | Path: a path is given as text
        if len(args) != 1:
            raise TypeError(f"{where}: no command-line form for {hint}")
        hint, origin = args[0], typing.get_origin(args[0])
    if origin is Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), optional, choices, str
    if origin is tuple or hint is tuple:
        items = {a for a in typing.get_args(hint) if a is not Ellipsis} or {str}  # tuple[float, ...], tuple[float, float]
        if len(items) != 1 or not items <= {str, int, float}:
            raise TypeError(f"{where}: no command-line form for {hint}")
        return tuple, optional, None, items.pop()
    if hint in (str, int, float, bool, Path):
        return hint, optional, None, str
    raise TypeError(f"{where}: no command-line form for {hint}")


def _help_of(f: dataclasses.Field, hint: Any) -> str:
    _, description = _unwrap(hint)
    return description or f.metadata.get("help", "")


def options(cls: type) -> list[Option]:
    """The flags of ``cls``, defaults taken from ``cls()``: one per field and exposed sub-field."""
    defaults = cls()
    by_flag: dict[str, Option] = {}

    def add(flag: Flag, name: str, path: tuple[str, ...], hint: Any, default: Any, help_text: str, meta: Mapping) -> None:
        kind, optional, choices, item = _kind(_unwrap(hint)[0], ".".join(path))
        option = Option(flag.name or name.replace("_", "-"), [path], kind, optional, default, flag.help or help_text,
                        tuple(meta["choices"]) if "choices" in meta else choices, flag.none_if_negative, flag.repeat,
                        item=item, required=flag.required, none_flag=flag.none_flag, invert=flag.invert,
                        split=flag.split, none_if_zero=flag.none_if_zero, metavar=flag.metavar)
        if option.repeat and option.kind is not tuple:
            raise TypeError(f"{'.'.join(path)}: only a tuple[str, ...] flag may repeat")
        if option.invert and option.kind is not bool:
            raise TypeError(f"{'.'.join(path)}: only a bool flag may be inverted")
        if option.none_flag is not None and (option.kind is bool or not option.optional):
            raise TypeError(f"{'.'.join(path)}: a --no-{option.flag} that gives None needs an X | None field, not a bool")
        known = by_flag.get(option.flag)
        if known is None:
            by_flag[option.flag] = option
        elif (known.kind, known.default) == (option.kind, option.default):
            known.paths.append(path)  # one flag, several fields (--seed)
        else:
            raise TypeError(f"--{option.flag} names {known.paths[0]} and {path}, whose types or defaults differ")

    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("cli", Flag())
        value = getattr(defaults, f.name)
        if isinstance(spec, Mapping):  # a nested config: its named sub-fields, flat
            sub_hints = typing.get_type_hints(type(value), include_extras=True)
            sub_fields = {s.name: s for s in dataclasses.fields(value)}
            for sub, flag in spec.items():
                flag = Flag(flag) if isinstance(flag, str) else flag
                if flag.cli:
                    add(flag, sub, (f.name, sub), sub_hints[sub], getattr(value, sub),
                        _help_of(sub_fields[sub], sub_hints[sub]), sub_fields[sub].metadata)
        elif spec.cli:
            add(spec, f.name, (f.name,), hints[f.name], value, _help_of(f, hints[f.name]), f.metadata)
    return list(by_flag.values())


class _Repeated(argparse.Action):
    """A repeatable tuple flag: the first use replaces the default, each further use adds its values."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = getattr(namespace, self.dest)
        setattr(namespace, self.dest, (() if given is self.default else tuple(given)) + tuple(values))


def build_parser(cls: type, prog: str, description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for o in options(cls):
        if o.required:
            shown = "required" if o.none_flag is None else f"this or --no-{o.flag} is required"
        else:
            shown = f"default: {_show(o.cli_default)}"
        help_text = f"{o.help} ({shown})".lstrip()
        # --FLAG VALUE and --no-FLAG (None) exclude each other; a group is required as a whole
        target = parser if o.none_flag is None else parser.add_mutually_exclusive_group(required=o.required)
        required = o.required and o.none_flag is None
        if o.kind is bool:
            parser.add_argument(f"--{o.flag}", dest=o.dest, action=argparse.BooleanOptionalAction, default=o.cli_default,
                                required=required, help=help_text)
        elif o.repeat:
            target.add_argument(f"--{o.flag}", dest=o.dest, action=_Repeated, type=o.convert, default=o.default,
                                required=required, metavar=o.metavar, help=f"{o.help} (repeatable; {shown})".lstrip())
        else:
            choices = o.choices if o.choices is None or not o.optional else (*o.choices, None)  # none: None
            target.add_argument(f"--{o.flag}", dest=o.dest, type=o.convert, default=o.default, choices=choices,
                                required=required, help=help_text,
                                metavar=o.metavar if o.choices is None else "{" + ",".join(map(str, o.choices)) + "}")
        if o.none_flag is not None:
            target.add_argument(f"--no-{o.flag}", dest=o.dest, action="store_const", const=None, default=o.default,
                                help=o.none_flag)
    # not a config field: how a failure is shown (tasks/common/flow_cli.py reads it from the command line)
    parser.add_argument("--verbose", dest="_verbose", action="store_true",
                        help="on a failure, show Prefect's log lines and the traceback too, not only the one-line cause "
                             "(the run's log file under artifacts/logs always has them)")
    return parser


def config_from_namespace(cls: type[C], namespace: argparse.Namespace) -> C:
    """The config the parsed flags describe: the dataclass defaults with the flags' values over them."""
    defaults = cls()
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for o in options(cls):
        value = o.field_value(getattr(namespace, o.dest))
        for path in o.paths:
            if len(path) == 1:
                top[path[0]] = value
            else:
                nested.setdefault(path[0], {})[path[1]] = value
    for name, values in nested.items():
        top[name] = dataclasses.replace(getattr(defaults, name), **values)
    return cls(**top)


def parse_config(cls: type[C], argv: Sequence[str] | None, prog: str, description: str | None = None,
                 check: Callable[[C], None] | None = None) -> C:
    """Parse ``argv`` into a ``cls``; a ``ValueError`` from the config or ``check`` is one line of usage
    error (exit status 2; the usage text would bury the one line that matters)."""
    parser = build_parser(cls, prog, description)
    namespace = parser.parse_args(argv)
    try:
        cfg = config_from_namespace(cls, namespace)
        if check is not None:
            check(cfg)
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return cfg


def checking_inputs(parse: Callable[[Sequence[str] | None], C], prog: str) -> Callable[[Sequence[str] | None], C]:
    """``parse``, then the config's ``check_inputs()`` (the files and folders the run reads and writes are there
    and usable): a ``ValueError`` from it is one line of usage error too, exit status 2. What a flow's command
    line runs before Prefect starts; ``parse`` alone stays pure (no file system), and the flow calls
    ``check_inputs()`` itself first thing, so a Python call and a deployment are refused alike."""
    def parse_and_check(argv: Sequence[str] | None = None) -> C:
        import sys

        cfg = parse(argv)
        try:
            cfg.check_inputs()  # type: ignore[attr-defined]
        except ValueError as exc:
            sys.stderr.write(f"{prog}: error: {exc}\n")
            raise SystemExit(2) from None
        return cfg

    return parse_and_check


def to_argv(cfg: Any) -> list[str]:
    """``cfg`` as command-line flags (every option; parsing them gives ``cfg`` back where it is on the CLI)."""
    argv: list[str] = []
    for o in options(type(cfg)):
        value = cfg
        for name in o.paths[0]:
            value = getattr(value, name)
        argv += o.render(value)
    return argv
