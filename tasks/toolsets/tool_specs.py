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

from pathlib import Path
from typing import Any

from schemas.toolset import Tool, ToolSet
from tasks.toolsets.doc_import import ImportReport, ToolSetFormatError, json_file, make_doc, numbered_rows, yaml_file
from tasks.toolsets.json_schema import object_properties
from tasks.toolsets.openapi import is_openapi, read_openapi

SCHEMA_KEYS = ("parameters", "input_schema", "inputSchema")  # OpenAI, Anthropic, MCP
OUTPUT_SCHEMA_KEYS = ("outputSchema", "output_schema")  # MCP (2025-06-18 and later)
LIST_KEYS = ("tools", "functions")
DECLARATION_KEYS = ("functionDeclarations", "function_declarations")  # Gemini: a tool entry holding functions


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
        return read_openapi(data, path, name)
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
                       object_properties(schema, where, "parameters", optional_marked=True),
                       object_properties(outputs, where, "outputSchema", optional_marked=False), report)
        tools.append(Tool(tool_id=tool_id, group=group, doc=doc))
    if not tools:
        raise ToolSetFormatError(f"{path}: no tool definitions")
    return ToolSet(name=name, tools=tools, edges=[], queries=[]), report
