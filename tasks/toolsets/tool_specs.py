"""An agent's tool definitions read as a tool set: the file a user already has for the tools their agent calls.

One file is one tool set, named after the file (``my_agent.json`` -> ``my_agent``). Accepted entries:
- OpenAI Chat Completions tools ``{"type": "function", "function": {"name", "description", "parameters"}}``;
- OpenAI Responses tools and legacy ``functions`` ``{"name", "description", "parameters"}``;
- Anthropic tools ``{"name", "description", "input_schema"}``;
- Gemini function declarations ``{"functionDeclarations": [{"name", "description", "parameters"}]}`` (its
  upper-case OpenAPI types, ``OBJECT``, read as JSON schema's);
- MCP tools (``tools/list``) ``{"name", "description", "inputSchema", "outputSchema"?}``: the one format that
  declares outputs, so its producers feed by their output fields; the others' outputs are read from the tool's
  name by the parameter rule (``GetUserToken`` -> ``user_token``), as for any doc without outputs.
A ``.json`` (or ``.yaml``) file holds a list of entries, or an object with them under ``tools`` (an MCP
``tools/list`` result, an OpenAI, Anthropic or Gemini request body), ``functions``, ``functionDeclarations``, or
``result.tools`` (the JSON-RPC reply); a ``.jsonl`` file one entry a line. An OpenAPI 3 description (JSON or YAML)
is read by ``tasks.toolsets.openapi``: each operation a tool, its response links the set's gold edges. An entry's
optional ``group`` (a string; not part of those formats) puts it in a group of its own; otherwise every tool is in
one group named after the set.

The parameters are the schema's top-level ``properties`` in their order: type from ``type`` (a list is joined:
``string | null``), ``anyOf``/``oneOf``, ``enum``/``const`` or a local ``$ref``; an array says its items' type
(``array of string``); the description gains ``(optional)`` for an input the schema does not require, the allowed
values of an enum, and the field names of an object. A file that breaks these rules stops the read with the file
and the entry (``ToolSetFormatError``); what is cut to fit the API doc schema is in the report's fixes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schemas.toolset import Tool, ToolSet
from tasks.toolsets.doc_import import ImportReport, ToolSetFormatError, json_file, make_doc, numbered_rows
from tasks.toolsets.openapi import is_openapi, read_openapi, yaml_file

SCHEMA_KEYS = ("parameters", "input_schema", "inputSchema")  # OpenAI, Anthropic, MCP
OUTPUT_SCHEMA_KEYS = ("outputSchema", "output_schema")  # MCP (2025-06-18 and later)
LIST_KEYS = ("tools", "functions")
DECLARATION_KEYS = ("functionDeclarations", "function_declarations")  # Gemini: a tool entry holding functions
MAX_LISTED = 8  # enum values or object fields named in a description
MAX_NESTING = 4  # a type read this many references or item levels down is "any" (a recursive schema ends here)


YAML_SUFFIXES = (".yaml", ".yml")


def _document(path: Path) -> Any:
    """The parsed value of a .json or .yaml file (a .jsonl file is read a line at a time instead: None)."""
    suffix = path.suffix.lower()
    return None if suffix == ".jsonl" else yaml_file(path) if suffix in YAML_SUFFIXES else json_file(path)


def _entries(path: Path, data: Any) -> list[tuple[str, Any]]:
    """(where, entry) for each tool definition of the file; a Gemini tool's declarations each an entry."""
    out = []
    for where, entry in _file_entries(path, data):
        key = next((k for k in DECLARATION_KEYS if isinstance(entry, dict) and isinstance(entry.get(k), list)), None)
        out += [(f"{where}.{key}[{n}]", e) for n, e in enumerate(entry[key])] if key else [(where, entry)]
    return out


def _file_entries(path: Path, data: Any) -> list[tuple[str, Any]]:
    if path.suffix.lower() == ".jsonl":
        return [(f"{path}:{lineno}", entry) for lineno, entry in numbered_rows(path)]
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        data = data["result"]  # a JSON-RPC reply to tools/list
    if isinstance(data, dict):
        key = next((k for k in LIST_KEYS + DECLARATION_KEYS if isinstance(data.get(k), list)), None)
        if key is None:
            raise ToolSetFormatError(f"{path}: expected a list of tool definitions, or an object with them under "
                                     f"{', '.join(repr(k) for k in LIST_KEYS + DECLARATION_KEYS)} "
                                     "(docs/toolsets.md)")
        return [(f"{path}: {key}[{n}]", e) for n, e in enumerate(data[key])]
    if isinstance(data, list):
        return [(f"{path}: [{n}]", e) for n, e in enumerate(data)]
    raise ToolSetFormatError(f"{path}: expected a list of tool definitions, got {type(data).__name__}")


def _resolve(schema: Any, root: dict) -> Any:
    """A local ``$ref`` (``#/$defs/Address``, ``#/definitions/Address``) replaced by what it names, one level."""
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target if isinstance(target, dict) else schema


def _kind(schema: dict) -> Any:
    """The schema's ``type``, lower case (Gemini writes OpenAPI's ``STRING``, ``OBJECT``)."""
    kind = schema.get("type")
    return kind.lower() if isinstance(kind, str) else kind


def _type_name(schema: Any, root: dict, depth: int = 0) -> str:
    """A JSON schema's type as the API doc writes one (free text the parameter rule reads by its head word)."""
    if not isinstance(schema, dict) or not schema or depth > MAX_NESTING:
        return "any"  # true, {}, or a recursive schema's deep end
    ref = schema.get("$ref")
    resolved = _resolve(schema, root)
    if resolved is not schema:
        kind = _type_name(resolved, root, depth + 1)
        return str(ref).rsplit("/", 1)[-1] if kind in ("object", "any") else kind
    kind = _kind(schema)
    if isinstance(kind, list):
        return " | ".join(str(k).lower() for k in kind) or "any"
    if kind == "array":
        items = schema.get("items")
        return f"array of {_type_name(items, root, depth + 1)}" if isinstance(items, dict) and items else "array"
    if isinstance(kind, str) and kind:
        return kind
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            names = list(dict.fromkeys(_type_name(s, root, depth + 1) for s in schema[key]))
            return " | ".join(names) or "any"
    values = schema.get("enum") if isinstance(schema.get("enum"), list) else (
        [schema["const"]] if "const" in schema else None)
    if values:
        names = list(dict.fromkeys({str: "string", bool: "boolean", int: "integer", float: "number"}.get(
            type(v), "any") for v in values))
        return " | ".join(names)
    return "object" if isinstance(schema.get("properties"), dict) else "any"


def _listed(values: list[Any]) -> str:
    shown = ", ".join(json.dumps(v) if not isinstance(v, str) else v for v in values[:MAX_LISTED])
    return shown + (f", ... ({len(values)} in all)" if len(values) > MAX_LISTED else "")


def _description(schema: Any, root: dict) -> str:
    if not isinstance(schema, dict):
        return ""
    resolved = _resolve(schema, root)
    text = str(schema.get("description") or resolved.get("description") or schema.get("title") or "").strip()
    extras = []
    enum = schema.get("enum", resolved.get("enum"))
    if isinstance(enum, list) and enum:
        extras.append(f"one of: {_listed(enum)}")
    fields = resolved.get("properties")
    if not isinstance(fields, dict) and _kind(resolved) == "array":
        items = _resolve(resolved.get("items"), root)
        fields = items.get("properties") if isinstance(items, dict) else None
    if isinstance(fields, dict) and fields:
        extras.append(f"fields: {_listed(list(fields))}")
    return "; ".join([text, *extras]) if text else "; ".join(extras)


def _params(schema: Any, where: str, what: str, optional_marked: bool) -> list[tuple[str, str, str]]:
    """(name, type, description) of the top-level properties of the object schema ``schema``."""
    if schema is None:
        return []
    if not isinstance(schema, dict):
        raise ToolSetFormatError(f"{where}: {what} must be a JSON schema object, got {type(schema).__name__}")
    root = schema
    schema = _resolve(schema, root)
    if _kind(schema) not in (None, "object"):
        raise ToolSetFormatError(f"{where}: {what} must describe an object (type 'object'), got "
                                 f"{schema.get('type')!r}")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolSetFormatError(f"{where}: {what}.properties must be an object, got {type(properties).__name__}")
    required = schema.get("required", [])
    if not isinstance(required, list):
        raise ToolSetFormatError(f"{where}: {what}.required must be a list, got {type(required).__name__}")
    out = []
    for name, prop in properties.items():
        if not isinstance(prop, (dict, bool)):
            raise ToolSetFormatError(f"{where}: {what}.properties.{name} must be a schema, got {type(prop).__name__}")
        text = _description(prop, root)
        if optional_marked and name not in required:
            text = f"(optional) {text}".strip()
        out.append((name, _type_name(prop, root), text))
    return out


def _definition(entry: Any, where: str) -> dict:
    """The function's own object of an entry (Chat Completions nests it under ``function``)."""
    if not isinstance(entry, dict):
        raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    if isinstance(entry.get("function"), dict):
        return entry["function"] | ({"group": entry["group"]} if "group" in entry else {})
    if entry.get("type") not in (None, "function", "custom") and not any(k in entry for k in SCHEMA_KEYS):
        raise ToolSetFormatError(f"{where}: a {entry.get('type')!r} tool declares no function (a built-in tool "
                                 "of the provider, not one of the agent's own): remove it from the file")
    return entry


def read_tool_specs(path: str | Path, name: str | None = None) -> tuple[ToolSet, ImportReport]:
    """The tool set of one file of tool definitions (module doc), and what its docs needed to fit."""
    path = Path(path)
    name = name or path.stem
    data = _document(path)
    if is_openapi(data):
        return read_openapi(data, path, name, _params)
    report = ImportReport(dataset=name)
    tools: list[Tool] = []
    seen: dict[str, str] = {}
    for where, entry in _entries(path, data):
        spec = _definition(entry, where)
        tool_id = spec.get("name")
        if not isinstance(tool_id, str) or not tool_id.strip():
            raise ToolSetFormatError(f"{where}: a tool needs a non-empty string 'name'")
        if tool_id in seen:
            raise ToolSetFormatError(f"{where}: duplicate tool name {tool_id!r} (first at {seen[tool_id]}); an agent "
                                     "calls a tool by its name, so names are unique")
        seen[tool_id] = where
        description = spec.get("description")
        if description is not None and not isinstance(description, str):
            raise ToolSetFormatError(f"{where}: 'description' must be a string, got {type(description).__name__}")
        group = spec.get("group", name)
        if not isinstance(group, str) or not group.strip():
            raise ToolSetFormatError(f"{where}: 'group' must be a non-empty string")
        schema = next((spec[k] for k in SCHEMA_KEYS if k in spec), None)
        outputs = next((spec[k] for k in OUTPUT_SCHEMA_KEYS if k in spec), None)
        doc = make_doc(tool_id, description or spec.get("title"),
                       _params(schema, where, "parameters", optional_marked=True),
                       _params(outputs, where, "outputSchema", optional_marked=False), report)
        tools.append(Tool(tool_id=tool_id, group=group, doc=doc))
    if not tools:
        raise ToolSetFormatError(f"{path}: no tool definitions")
    return ToolSet(name=name, tools=tools, edges=[], queries=[]), report
