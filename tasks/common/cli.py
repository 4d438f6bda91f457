"""Command lines generated from a flow's typed config dataclass, so the dataclass is the one place
of every default and help text; a command line, the Makefile and prefect.yaml pass overrides only.

One flag per field, ``--field-name``, typed from the annotation:

* help: ``Annotated[T, Help("...")]`` (also the field's description in the Prefect UI) or
  ``field(metadata={"help": "..."})``; the flag's help ends with the dataclass default;
* ``bool``: ``--flag`` / ``--no-flag``; ``Literal[...]``: choices (or ``metadata={"choices": ...}``);
  ``tuple[str, ...]``: comma separated; ``X | None``: ``none`` (or an empty value) is None;
* ``metadata={"cli": Flag(...)}`` renames a flag, reads a negative number as None
  (``--limit -1``) or hides the field (``cli=False``);
* a nested config (``llm: LLMConfig``) is flattened: ``metadata={"cli": {"sub_field": Flag("flag")}}``
  names the sub-fields on the command line, flat, under today's flag names. Two fields may share one
  flag (``--seed`` sets ``balance.seed`` and ``shards.seed``) when their defaults agree.

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


@dataclass
class Option:
    """One command-line flag and the config field(s) it sets."""

    flag: str
    paths: list[tuple[str, ...]]  # (field,) or (nested field, sub-field)
    kind: type  # str, int, float, bool or tuple (of str)
    optional: bool
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    none_if_negative: bool = False

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    def convert(self, text: str) -> Any:
        if self.optional and text.strip().lower() in ("", "none"):
            return None
        if self.kind is tuple:
            return tuple(s for s in text.split(",") if s)
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {self.kind.__name__} value: {text!r}") from None
        if self.none_if_negative and value < 0:
            return None
        return value

    def render(self, value: Any) -> list[str]:
        """``value`` as command-line words (the inverse of :meth:`convert`)."""
        if self.kind is bool:
            return [f"--{self.flag}" if value else f"--no-{self.flag}"]
        if value is None:
            return [f"--{self.flag}=none"]
        text = ",".join(value) if self.kind is tuple else str(value)
        return [f"--{self.flag}={text}"]  # with =, a value may start with a dash


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


def _kind(hint: Any, where: str) -> tuple[type, bool, tuple[Any, ...] | None]:
    """``(kind, optional, choices)`` of a field's type."""
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
        return type(choices[0]), optional, choices
    if origin is tuple or hint is tuple:
        return tuple, optional, None
    if hint in (str, int, float, bool):
        return hint, optional, None
    if hint is Path:
        return str, optional, None
    raise TypeError(f"{where}: no command-line form for {hint}")


def _help_of(f: dataclasses.Field, hint: Any) -> str:
    _, description = _unwrap(hint)
    return description or f.metadata.get("help", "")


def options(cls: type) -> list[Option]:
    """The flags of ``cls``, defaults taken from ``cls()``: one per field and exposed sub-field."""
    defaults = cls()
    by_flag: dict[str, Option] = {}

    def add(flag: Flag, name: str, path: tuple[str, ...], hint: Any, default: Any, help_text: str, meta: Mapping) -> None:
        kind, optional, choices = _kind(_unwrap(hint)[0], ".".join(path))
        option = Option(flag.name or name.replace("_", "-"), [path], kind, optional, default, flag.help or help_text,
                        tuple(meta["choices"]) if "choices" in meta else choices, flag.none_if_negative)
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


def build_parser(cls: type, prog: str, description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for o in options(cls):
        help_text = f"{o.help} (default: {_show(o.default)})".lstrip()
        if o.kind is bool:
            parser.add_argument(f"--{o.flag}", dest=o.dest, action=argparse.BooleanOptionalAction, default=o.default, help=help_text)
        else:
            parser.add_argument(f"--{o.flag}", dest=o.dest, type=o.convert, default=o.default, choices=o.choices,
                                metavar=None if o.choices is None else "{" + ",".join(map(str, o.choices)) + "}", help=help_text)
    return parser


def config_from_namespace(cls: type[C], namespace: argparse.Namespace) -> C:
    """The config the parsed flags describe: the dataclass defaults with the flags' values over them."""
    defaults = cls()
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for o in options(cls):
        value = getattr(namespace, o.dest)
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


def to_argv(cfg: Any) -> list[str]:
    """``cfg`` as command-line flags (every option; parsing them gives ``cfg`` back where it is on the CLI)."""
    argv: list[str] = []
    for o in options(type(cfg)):
        value = cfg
        for name in o.paths[0]:
            value = getattr(value, name)
        argv += o.render(value)
    return argv
