"""An OpenAPI 3 description read as a tool set: each operation a tool, and the dependencies its authors declared
as response ``links`` its gold edges.

- A tool per operation under ``paths``: named by its ``operationId``, else ``METHOD /path``; described by its
  ``summary`` and ``description``.
- Inputs: its parameters (path, query, header, cookie; the path item's, overridden by the operation's own of the
  same name and place), then the properties of its JSON request body. An input not ``required`` is marked
  ``(optional)``, as in the other tool-definition files.
- Outputs: the properties of the first 2xx response's JSON body (of its items, for an array); any other body (a
  count, a list of strings, a file) is one output, ``result``. A 2xx response without a body (``204``) says the
  operation returns nothing (``Tool.returns_nothing``): build-graph makes no data edge from it.
- ``$ref`` into the document (``#/components/schemas/Pet``, ``#/components/parameters/limit``) is followed, and an
  object written as ``allOf`` its parts has their fields (``tasks.toolsets.json_schema.merged_object``).
- One group, named after the file: an API's operations depend on each other across its tags.
- ``links`` (``responses.201.links.GetUserById: {operationId: getUser, parameters: {userId: $response.body#/id}}``):
  the target operation depends on this one, a gold edge of kind ``data``, where the link passes a value of the
  response (``$response...``; a value copied from the request passes nothing); each parameter so bound is a gold
  parameter edge (``userId`` takes ``id``). A link to an operation the file does not have stops the read; one
  that names its target by ``operationRef`` is left out, in the report.

OpenAPI 2 (``swagger: "2.0"``) is refused with a pointer to a converter. The file is parsed by
``tasks.toolsets.tool_specs`` (``doc_import.json_file`` or ``yaml_file``: no YAML anchors or aliases, the hostile
forms refused as the JSON readers refuse them); the schemas' properties are read by ``tasks.toolsets.json_schema``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas.toolset import DependencyEdge, ParameterEdge, Tool, ToolSet
from tasks.toolsets.doc_import import ImportReport, ToolSetFormatError, make_doc
from tasks.toolsets.json_schema import merged_object, object_properties, type_name

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
JSON_MEDIA = ("application/json", "application/*+json", "*/*")


def is_openapi(data: Any) -> bool:
    """Whether a parsed file is an OpenAPI (or Swagger) description rather than a list of tool definitions."""
    return isinstance(data, dict) and ("openapi" in data or "swagger" in data) and "paths" in data


def _resolve(node: Any, root: dict, where: str, depth: int = 0) -> Any:
    """``node`` with its ``$ref`` into the document followed (a chain of them too, up to a bound)."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if not ref.startswith("#/") or depth > 8:
            raise ToolSetFormatError(f"{where}: $ref {ref!r} is not a reference into this document that ends")
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        if target is None:
            raise ToolSetFormatError(f"{where}: $ref {ref!r} names nothing in the document")
        node, depth = target, depth + 1
    return node


def _json_schema(content: Any, root: dict, where: str) -> Any:
    """The schema of a request body's or response's JSON media type, or None."""
    content = _resolve(content, root, where)
    if not isinstance(content, dict):
        return None
    media = next((content[m] for m in JSON_MEDIA if isinstance(content.get(m), dict)), None)
    if media is None:
        media = next((v for k, v in content.items() if isinstance(v, dict) and k.endswith("json")), None)
    return _resolve(media.get("schema"), root, where) if isinstance(media, dict) else None


def _operations(doc: dict, where: str) -> list[tuple[str, str, dict, list]]:
    """(method, path, operation, path-level parameters) of every operation, in the file's order."""
    paths = doc.get("paths")
    if not isinstance(paths, dict):
        raise ToolSetFormatError(f"{where}: 'paths' must be an object of path items")
    out = []
    for path, item in paths.items():
        item = _resolve(item, doc, f"{where}: paths.{path}")
        if not isinstance(item, dict):
            raise ToolSetFormatError(f"{where}: paths.{path} must be a path item object")
        shared = item.get("parameters") or []
        for method in HTTP_METHODS:
            if isinstance(item.get(method), dict):
                out.append((method, str(path), item[method], shared))
    return out


def _inputs(op: dict, shared: list, root: dict, where: str) -> list[tuple[str, str, str]]:
    """(name, type, description) of the operation's parameters and its JSON body's properties."""
    params: dict[tuple[str, str], dict] = {}
    for n, p in enumerate([*shared, *(op.get("parameters") or [])]):
        p = _resolve(p, root, f"{where}.parameters[{n}]")
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not isinstance(p.get("in"), str):
            raise ToolSetFormatError(f"{where}.parameters[{n}]: a parameter needs a string 'name' and 'in'")
        params[(p["name"], p["in"])] = p  # the operation's own overrides the path item's
    out = []
    for p in params.values():
        schema = _resolve(p.get("schema"), root, where) if p.get("schema") is not None else {}
        wrapped = {"type": "object", "properties": {p["name"]: dict(schema, description=p.get("description")
                                                                     or (schema or {}).get("description", ""))},
                   "required": [p["name"]] if p.get("required") or p["in"] == "path" else []}
        out += object_properties(wrapped, where, "parameter", True, root)
    body = _resolve(op.get("requestBody"), root, where)
    if isinstance(body, dict):
        schema = merged_object(_json_schema(body.get("content"), root, f"{where}.requestBody"), root)
        if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
            out += object_properties(schema, f"{where}.requestBody", "requestBody", True, root)
    return out


def _outputs(op: dict, root: dict, where: str) -> tuple[list[tuple[str, str, str]], bool]:
    """The outputs of the first 2xx response, and whether it declares no body (the operation returns nothing).
    Fields of a JSON object (of an array's items); any other body (a count, a list of strings, free-form JSON, a
    file) is one output, ``result``. No 2xx response declared: no outputs, and nothing said."""
    responses = op.get("responses") or {}
    for code, response in responses.items() if isinstance(responses, dict) else []:
        if not str(code).startswith("2"):
            continue
        response = _resolve(response, root, f"{where}.responses.{code}")
        content = _resolve(response.get("content"), root, where) if isinstance(response, dict) else None
        if not content or not isinstance(content, dict):
            return [], True
        schema = _json_schema(content, root, where)
        item = merged_object(_resolve(schema.get("items"), root, where) if isinstance(schema, dict) and
                             schema.get("type") == "array" else schema, root)
        if isinstance(item, dict) and isinstance(item.get("properties"), dict) and item["properties"]:
            return object_properties(item, f"{where}.responses.{code}", "response", False, root), False
        said = str(response.get("description") or "").strip()
        if schema is None:  # a body that is no JSON: a file, text, an image
            return [("result", next(iter(content)), said)], False
        return [("result", type_name(schema, root), said)], False
    return [], False


def _links(op: dict, root: dict) -> list[tuple[str, dict]]:
    """(name, link) of each link of the operation's responses."""
    out = []
    responses = op.get("responses") or {}
    for response in responses.values() if isinstance(responses, dict) else []:
        response = _resolve(response, root, "links")
        links = response.get("links") if isinstance(response, dict) else None
        for name, link in (links or {}).items() if isinstance(links, dict) else []:
            out.append((str(name), _resolve(link, root, f"links.{name}")))
    return out


def _body_field(expression: Any) -> str | None:
    """The first field of a ``$response.body#/field/...`` runtime expression, or None."""
    if isinstance(expression, str) and expression.startswith("$response.body#/"):
        field = expression[len("$response.body#/"):].split("/")[0]
        return field.replace("~1", "/").replace("~0", "~") or None
    return None


def read_openapi(doc: dict, path: Path, name: str) -> tuple[ToolSet, ImportReport]:
    """The tool set of an OpenAPI description (module doc)."""
    where = str(path)
    if "swagger" in doc and "openapi" not in doc:
        raise ToolSetFormatError(f"{where}: OpenAPI 2 (swagger {doc.get('swagger')!r}) is not read; convert it to "
                                 "OpenAPI 3 first (for instance with swagger2openapi)")
    if not str(doc.get("openapi", "")).startswith("3."):
        raise ToolSetFormatError(f"{where}: openapi {doc.get('openapi')!r}: only OpenAPI 3.x is read")
    report = ImportReport(dataset=name)
    tools, by_operation_id, links = [], {}, []
    for method, route, op, shared in _operations(doc, where):
        at = f"{where}: {method.upper()} {route}"
        tool_id = op.get("operationId") if isinstance(op.get("operationId"), str) and op["operationId"].strip() \
            else f"{method.upper()} {route}"
        if tool_id in by_operation_id:
            raise ToolSetFormatError(f"{at}: duplicate operation name {tool_id!r}; operationIds are unique")
        text = " ".join(str(op.get(k) or "").strip() for k in ("summary", "description")).strip()
        outputs, returns_nothing = _outputs(op, doc, at)
        doc_json = make_doc(tool_id, text or f"{method.upper()} {route}", _inputs(op, shared, doc, at), outputs,
                            report)
        by_operation_id[tool_id] = len(tools)
        tools.append(Tool(tool_id=tool_id, group=name, doc=doc_json, returns_nothing=returns_nothing))
        links += [(tool_id, at, link_name, link) for link_name, link in _links(op, doc)]
    if not tools:
        raise ToolSetFormatError(f"{where}: no operations under 'paths'")
    edges, param_edges = [], []
    for producer, at, link_name, link in links:
        target = link.get("operationId") if isinstance(link, dict) else None
        if not isinstance(target, str):
            report.rejected.append(f"{at}: link {link_name!r} names its target by operationRef (not read)"
                                   if isinstance(link, dict) and "operationRef" in link else
                                   f"{at}: link {link_name!r} has no operationId")
            continue
        if target not in by_operation_id:
            raise ToolSetFormatError(f"{at}: link {link_name!r} names operationId {target!r}, which the file does "
                                     "not have")
        if target == producer:
            continue  # an operation that leads to itself (paging) is no dependency
        bindings = link.get("parameters") if isinstance(link.get("parameters"), dict) else {}
        passed = {p: e for p, e in bindings.items() if isinstance(e, str) and e.startswith("$response.")}
        if not passed and not str(link.get("requestBody", "")).startswith("$response."):
            report.rejected.append(f"{at}: link {link_name!r} to {target!r} passes no value of the response "
                                   "(its parameters come from the request, or none are given): not a dependency")
            continue
        edges.append(DependencyEdge(name, target, producer, "manual", "data"))
        consumer_inputs = {p["name"] for p in tools[by_operation_id[target]].doc["input_params"]}
        for param, expression in passed.items():
            param = param.split(".", 1)[1] if "." in param else param  # "path.pid": a parameter named with its place
            if param in consumer_inputs:
                param_edges.append(ParameterEdge(target, producer, param, _body_field(expression), "manual"))
    return ToolSet(name=name, tools=tools, edges=list(dict.fromkeys(edges)), queries=[],
                   parameter_edges=tuple(dict.fromkeys(param_edges))), report
