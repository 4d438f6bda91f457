"""The JSON schemas of tool definitions read as API doc parameters: an object schema's top-level properties as
(name, type, description), the type as the API doc writes one (``string | null``, ``array of string``, a ``$ref``'s
name) and the description with ``(optional)``, an enum's values and an object's fields. The reader of an agent's
tool definitions (``tasks.toolsets.tool_specs``) and of an OpenAPI description (``tasks.toolsets.openapi``) share it.
"""
from __future__ import annotations

import json
from typing import Any

from tasks.toolsets.doc_import import ToolSetFormatError, optional

MAX_LISTED = 8  # enum values or object fields named in a description
MAX_NESTING = 4  # a type read this many references or item levels down is "any" (a recursive schema ends here)


def _resolve(schema: Any, root: dict) -> Any:
    """A local ``$ref`` (``#/$defs/Address``, ``#/definitions/Address``) replaced by what it names, one level."""
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target if isinstance(target, dict) else schema


def merged_object(schema: Any, root: dict, depth: int = 0) -> Any:
    """``schema`` with the properties and ``required`` of its ``allOf`` members (local ``$ref``s followed, nested
    ``allOf`` too) merged in before its own: how OpenAPI writes an object that extends another (``allOf: [{$ref:
    Pet}, {properties: {...}}]``). Anything else comes back as it is."""
    schema = _resolve(schema, root)
    members = schema.get("allOf") if isinstance(schema, dict) else None
    if not isinstance(members, list) or depth > MAX_NESTING:
        return schema
    properties: dict[str, Any] = {}
    required: list[Any] = []
    for member in [*members, {k: v for k, v in schema.items() if k != "allOf"}]:
        member = merged_object(member, root, depth + 1)
        if isinstance(member, dict):
            properties.update(member.get("properties") if isinstance(member.get("properties"), dict) else {})
            required += member.get("required") if isinstance(member.get("required"), list) else []
    kinds = [_kind(r) for r in (_resolve(m, root) for m in members) if isinstance(r, dict) and _kind(r)]
    out = {k: v for k, v in schema.items() if k != "allOf"} | {"properties": properties, "required": required}
    if "type" not in out and properties:
        out["type"] = kinds[0] if kinds else "object"
    return out


def _kind(schema: dict) -> Any:
    """The schema's ``type``, lower case (Gemini writes OpenAPI's ``STRING``, ``OBJECT``)."""
    kind = schema.get("type")
    return kind.lower() if isinstance(kind, str) else kind


def type_name(schema: Any, root: dict, depth: int = 0) -> str:
    """A JSON schema's type as the API doc writes one (free text the parameter rule reads by its head word)."""
    if not isinstance(schema, dict) or not schema or depth > MAX_NESTING:
        return "any"  # true, {}, or a recursive schema's deep end
    ref = schema.get("$ref")
    resolved = _resolve(schema, root)
    if resolved is not schema:
        kind = type_name(resolved, root, depth + 1)
        named = kind in ("object", "any") or isinstance(resolved, dict) and "allOf" in resolved
        return str(ref).rsplit("/", 1)[-1] if named else kind
    kind = _kind(schema)
    if isinstance(kind, list):
        return " | ".join(str(k).lower() for k in kind) or "any"
    if kind == "array":
        items = schema.get("items")
        return f"array of {type_name(items, root, depth + 1)}" if isinstance(items, dict) and items else "array"
    if isinstance(kind, str) and kind:
        return kind
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            names = list(dict.fromkeys(type_name(s, root, depth + 1) for s in schema[key]))
            return " | ".join(names) or "any"
    if isinstance(schema.get("allOf"), list):  # an object that extends others: the ones it names
        names = [n for n in dict.fromkeys(type_name(s, root, depth + 1) for s in schema["allOf"])
                 if n not in ("object", "any")]
        return " & ".join(names) or "object"
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
    fields = merged_object(resolved, root).get("properties")
    if not isinstance(fields, dict) and _kind(resolved) == "array":
        items = merged_object(resolved.get("items"), root)
        fields = items.get("properties") if isinstance(items, dict) else None
    if isinstance(fields, dict) and fields:
        extras.append(f"fields: {_listed(list(fields))}")
    return "; ".join([text, *extras]) if text else "; ".join(extras)


def object_properties(schema: Any, where: str, what: str, optional_marked: bool,
                      root: dict | None = None) -> list[tuple[str, str, str]]:
    """(name, type, description) of the top-level properties of the object schema ``schema``; its local ``$ref``s
    resolve in ``root`` (default: the schema itself; an OpenAPI document for its ``#/components/...``)."""
    if schema is None:
        return []
    if not isinstance(schema, dict):
        raise ToolSetFormatError(f"{where}: {what} must be a JSON schema object, got {type(schema).__name__}")
    root = schema if root is None else root
    schema = merged_object(schema, root)
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
            text = optional(text)
        out.append((name, type_name(prop, root), text))
    return out
