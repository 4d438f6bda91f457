"""What every importer of tool docs shares: the API doc built from a source's fields (overlong fields cut to the
schema's limits, an empty description or type replaced), every change written to an ``ImportReport``, and the
error a file that breaks its format raises, and JSON and YAML files parsed as hostile files write them. The benchmark
readers (``tasks.toolsets.readers``) and the reader of an agent's tool definitions (``tasks.toolsets.tool_specs``,
with ``tasks.toolsets.openapi``) all build their docs here.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from schemas.docs import load_schema, schema_errors
from schemas.parameters import OPTIONAL, is_optional

_SCHEMA = load_schema("api_doc")
MAX_NAME = _SCHEMA["properties"]["name"]["maxLength"]
MAX_DESCRIPTION = _SCHEMA["properties"]["description"]["maxLength"]
MAX_PARAMS = _SCHEMA["properties"]["input_params"]["maxItems"]
MAX_PARAM_NAME = _SCHEMA["$defs"]["param"]["properties"]["name"]["maxLength"]
MAX_PARAM_TYPE = _SCHEMA["$defs"]["param"]["properties"]["type"]["maxLength"]
MAX_PARAM_DESCRIPTION = _SCHEMA["$defs"]["param"]["properties"]["description"]["maxLength"]


class ToolSetFormatError(ValueError):
    """A tool set file breaks the documented format; the message names file and line."""


@dataclass
class ImportReport:
    """What an importer changed or left out, one readable line per event."""

    dataset: str
    fixes: list[str] = field(default_factory=list)  # truncations and fallbacks, the tool is kept
    rejected: list[str] = field(default_factory=list)  # edges / gold tools that could not be used

    def summary(self) -> str:
        return f"{self.dataset}: {len(self.fixes)} doc fixes, {len(self.rejected)} rejected records"


# ---------------------------------------------------------------------------------------------
# Doc building helpers (deterministic truncation, every change recorded)


def _clip(text: str, limit: int, what: str, report: ImportReport) -> str:
    if len(text) <= limit:
        return text
    report.fixes.append(f"{what}: truncated from {len(text)} to {limit} characters")
    return text[: limit - 3].rstrip() + "..."


def _param(name: Any, ptype: Any, description: Any, what: str, report: ImportReport) -> dict | None:
    name = str(name or "").strip()
    if not name:
        report.fixes.append(f"{what}: parameter without a name dropped")
        return None
    ptype = str(ptype or "").strip()
    if not ptype:
        report.fixes.append(f"{what}.{name}: empty type replaced by 'string'")
        ptype = "string"
    return {
        "name": _clip(name, MAX_PARAM_NAME, f"{what}.{name} name", report),
        "type": _clip(ptype, MAX_PARAM_TYPE, f"{what}.{name} type", report),
        "description": _clip(str(description or "").strip(), MAX_PARAM_DESCRIPTION, f"{what}.{name} description", report),
    }


def optional(description: str) -> str:
    """An input's description marked as not required: what every reader writes for one."""
    return f"{OPTIONAL} {description}".strip()


def _params(items: Iterable[tuple[Any, Any, Any]], what: str, report: ImportReport) -> list[dict]:
    """The parameters, at most ``MAX_PARAMS``: past the cap the required ones are kept first (a required input is
    the one a dependency feeds; catalogs declare optional ones anywhere), in their declared order."""
    params = [p for p in (_param(n, t, d, what, report) for n, t, d in items) if p is not None]
    if len(params) > MAX_PARAMS:
        ranked = sorted(range(len(params)), key=lambda n: (is_optional(params[n]), n))
        kept = sorted(ranked[:MAX_PARAMS])
        dropped = [params[n]["name"] for n in sorted(ranked[MAX_PARAMS:])]
        first = "the first " if kept == list(range(MAX_PARAMS)) else ""
        ahead = "" if first else " (the required first)"
        report.fixes.append(f"{what}: kept {first}{MAX_PARAMS} of {len(params)} parameters{ahead}, dropped {dropped}")
        params = [params[n] for n in kept]
    return params


def make_doc(
    name: str,
    description: str | None,
    input_params: Iterable[tuple[Any, Any, Any]],
    output_params: Iterable[tuple[Any, Any, Any]],
    report: ImportReport,
) -> dict[str, Any]:
    """A schema-valid API doc; overlong fields are cut, an empty description falls back to the name."""
    description = (description or "").strip()
    if not description:
        report.fixes.append(f"{name}: empty description replaced by the tool name")
        description = name
    doc = {
        "name": _clip(name, MAX_NAME, f"{name} name", report),
        "description": _clip(description, MAX_DESCRIPTION, f"{name} description", report),
        "input_params": _params(input_params, f"{name} input", report),
        "output_params": _params(output_params, f"{name} output", report),
    }
    errors = schema_errors(doc)
    if errors:  # the clipping above should make this unreachable; fail loudly if it is not
        raise ValueError(f"{name}: converted doc is still invalid: {errors}")
    return doc


# ---------------------------------------------------------------------------------------------
# JSON as hostile files write it: every failure a ToolSetFormatError naming the file (and line)

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # JSON escapes of UTF-16 surrogates


def json_value(text: str, where: str) -> Any:
    """The JSON value of ``text``, or a ``ToolSetFormatError`` naming ``where``: invalid JSON (with its line and
    column when ``text`` spans lines), an integer over 4300 digits, nesting too deep to parse, or a ``\\u`` escape
    that decodes to a lone surrogate (no warehouse could store it)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        at = f" at line {exc.lineno}, column {exc.colno}" if "\n" in text.strip() else ""
        raise ToolSetFormatError(f"{where}: not valid JSON ({exc.msg}{at})") from exc
    except (ValueError, RecursionError) as exc:  # an integer over 4300 digits; nesting too deep
        raise ToolSetFormatError(f"{where}: not valid JSON ({type(exc).__name__}: {exc})") from None
    if _SURROGATE_ESCAPE.search(text):  # \ud800-style escapes decode to lone surrogates
        _storable(value, where, "a \\u escape")
    return value


def _storable(value: Any, where: str, escape: str) -> None:
    """A ``ToolSetFormatError`` where ``value`` holds a lone surrogate (an ``escape`` decoded to one): no warehouse
    could store it."""
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolSetFormatError(f"{where}: {escape} decodes to a lone surrogate ({exc.object[exc.start:exc.end]!r}), "
                                 "not a character; text must be valid Unicode") from None


def _utf8_text(file: Path, kind: str) -> str:
    """``file``'s text; bytes that are not UTF-8 name their offset."""
    raw = Path(file).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolSetFormatError(f"{file}: not UTF-8 (byte {raw[exc.start:exc.start + 1]!r} at offset {exc.start}); "
                                 f"{kind} files must be UTF-8") from None


def numbered_rows(file: Path) -> Iterable[tuple[int, Any]]:
    """(line number, value) of each non-blank line of the JSON Lines file ``file`` (``json_value``'s errors, and
    a line that is not UTF-8, name the file and line)."""
    with Path(file).open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ToolSetFormatError(f"{file}:{lineno}: not UTF-8 (byte {raw[exc.start:exc.start + 1]!r} at "
                                         f"column {exc.start + 1}); JSON Lines files must be UTF-8") from None
            if line.strip():
                yield lineno, json_value(line, f"{file}:{lineno}")


def json_file(file: Path) -> Any:
    """The one JSON value of ``file``, with ``json_value``'s errors; bytes that are not UTF-8 name their offset."""
    return json_value(_utf8_text(file, "JSON"), str(file))


@functools.cache
def _yaml_loader() -> type:
    """PyYAML's safe loader, refusing anchors and aliases (a document that expands them can be made arbitrarily
    large). Made on first use: most runs read no YAML."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):  # noqa: ANN001  (yaml's own signature)
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ToolSetFormatError(f"{self.name}: line {event.start_mark.line + 1}: YAML anchors and aliases "
                                         "are not read (a document that expands them can be made arbitrarily large)")
            return super().compose_node(parent, index)

    return NoAliases


def yaml_file(file: Path) -> Any:
    """The one YAML document of ``file`` (safe types only; no anchors or aliases), with the JSON readers' errors for
    the same hostile forms: bytes that are not UTF-8, nesting too deep to parse, an integer over 4300 digits, a
    lone surrogate."""
    import yaml

    loader = _yaml_loader()(_utf8_text(file, "YAML"))
    loader.name = str(file)
    try:
        value = loader.get_single_data()
    except ToolSetFormatError:  # an anchor or alias (``_yaml_loader``): said as it is
        raise
    except yaml.YAMLError as exc:
        raise ToolSetFormatError(f"{file}: not YAML: {str(exc).splitlines()[0]}") from None
    except (ValueError, RecursionError) as exc:  # an integer over 4300 digits; nesting too deep
        raise ToolSetFormatError(f"{file}: not read as YAML ({type(exc).__name__}: {str(exc)[:200]})") from None
    finally:
        loader.dispose()
    _storable(value, str(file), "an escape")
    return value
