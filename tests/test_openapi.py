"""OpenAPI 3 descriptions read as tool sets (tasks/toolsets/openapi.py, through tasks/toolsets/tool_specs.py):
operations as tools, response links as gold edges, and what is refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.toolsets.doc_import import ToolSetFormatError
from tasks.toolsets.tool_specs import read_tool_specs

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "code_review.yaml"


def inputs(tool):
    return [(p["name"], p["type"], p["description"]) for p in tool.doc["input_params"]]


def test_the_example_reads_operations_as_tools_and_links_as_gold_edges():
    ts, report = read_tool_specs(EXAMPLE)
    tools = {t.tool_id: t for t in ts.tools}
    assert ts.name == "code_review" and list(tools) == [
        "getUserByName", "getRepositoriesByOwner", "getRepository", "listPullRequests", "createPullRequest",
        "mergePullRequest"]
    assert {t.group for t in ts.tools} == {"code_review"}  # one provider: dependencies cross its tags
    # parameters through $ref, the path item's shared ones, an enum, a JSON body with its required fields
    assert inputs(tools["getRepositoriesByOwner"]) == [
        ("username", "string", "A user's login name."),
        ("sort", "string", "(optional) Order of the list.; one of: created, updated, name")]
    assert [p["name"] for p in tools["listPullRequests"].doc["input_params"]] == ["username", "slug"]
    assert inputs(tools["createPullRequest"])[-3:] == [
        ("title", "string", ""), ("source_branch", "string", "The branch with the changes."),
        ("destination_branch", "string", "(optional) The branch to merge into (the repository's main branch when "
                                         "left out).")]
    # outputs: the 2xx JSON body's fields, an array's items' fields; none for a 204
    assert [p["name"] for p in tools["getRepositoriesByOwner"].doc["output_params"]] == ["slug", "owner"]
    assert [p["type"] for p in tools["listPullRequests"].doc["output_params"]] == ["integer", "string", "Repository",
                                                                                  "User"]
    assert tools["mergePullRequest"].doc["output_params"] == []
    assert tools["mergePullRequest"].doc["description"] == "Merge a pull request once its checks pass."
    # links: the target depends on the operation whose response feeds it; values copied from the request do not
    assert [(e.dependent, e.prerequisite, e.kind) for e in ts.edges] == [
        ("getRepositoriesByOwner", "getUserByName", "data"), ("getRepository", "getRepositoriesByOwner", "data"),
        ("mergePullRequest", "listPullRequests", "data"), ("mergePullRequest", "createPullRequest", "data")]
    assert [(e.dependent, e.prerequisite, e.consumer_param, e.producer_output) for e in ts.parameter_edges] == [
        ("getRepositoriesByOwner", "getUserByName", "username", "username"),
        ("getRepository", "getRepositoriesByOwner", "username", "owner"),
        ("getRepository", "getRepositoriesByOwner", "slug", "slug"),
        ("mergePullRequest", "listPullRequests", "pid", "id"),
        ("mergePullRequest", "createPullRequest", "pid", "id")]
    assert report.rejected == []


def spec(paths, components=None, version="3.1.0"):
    return {"openapi": version, "info": {"title": "t", "version": "1"}, "paths": paths,
            "components": components or {}}


def write(tmp_path, data, name="api.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def op(operation_id, links=None, **extra):
    response = {"description": "ok", "content": {"application/json": {"schema": {
        "type": "object", "properties": {"id": {"type": "string"}}}}}}
    if links:
        response["links"] = links
    return {"operationId": operation_id, "responses": {"200": response}, **extra}


def test_a_json_description_and_operations_without_an_id(tmp_path):
    data = spec({"/items": {"get": op("listItems", {"one": {"operationId": "getItem",
                                                             "parameters": {"path.item_id": "$response.body#/id"}}}),
                            "delete": {"responses": {"204": {"description": "gone"}}}},
                 "/items/{item_id}": {"get": op("getItem", parameters=[
                     {"name": "item_id", "in": "path", "schema": {"type": "string"}}])}})
    ts, _ = read_tool_specs(write(tmp_path, data))
    assert [t.tool_id for t in ts.tools] == ["listItems", "DELETE /items", "getItem"]
    assert inputs(ts.tools[2]) == [("item_id", "string", "")]  # a path parameter is always required
    assert [(e.consumer_param, e.producer_output) for e in ts.parameter_edges] == [("item_id", "id")]


def test_a_body_without_fields_is_one_result_and_no_body_returns_nothing(tmp_path):
    def answering(content=None, code="200"):
        return {code: {"description": "what comes back"} | ({"content": content} if content else {})}

    data = spec({"/a": {"get": {"operationId": "count", "responses": answering(
                    {"application/json": {"schema": {"type": "integer"}}})},
                        "put": {"operationId": "names", "responses": answering(
                    {"application/json": {"schema": {"type": "array", "items": {"type": "string"}}}})},
                        "post": {"operationId": "download", "responses": answering({"text/csv": {}})},
                        "delete": {"operationId": "remove", "responses": answering(code="204")},
                        "patch": {"operationId": "untold", "responses": {"default": {"description": "error"}}}}})
    ts, _ = read_tool_specs(write(tmp_path, data))
    outputs = {t.tool_id: [(p["name"], p["type"], p["description"]) for p in t.doc["output_params"]]
               for t in ts.tools}
    assert outputs == {"count": [("result", "integer", "what comes back")],
                       "names": [("result", "array of string", "what comes back")],
                       "download": [("result", "text/csv", "what comes back")], "remove": [], "untold": []}
    # a success without a body says the operation returns nothing; no success response says nothing at all
    assert [t.tool_id for t in ts.tools if t.returns_nothing] == ["remove"]


def test_an_object_that_extends_another_reads_with_its_fields(tmp_path):
    new_pet = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "tag": {}}}
    pet = {"allOf": [{"$ref": "#/components/schemas/NewPet"},
                     {"required": ["id"], "properties": {"id": {"type": "integer", "description": "the pet's id"}}}]}
    body = {"allOf": [{"$ref": "#/components/schemas/NewPet"}, {"type": "object", "required": ["owner_id"],
                                                                "properties": {"owner_id": {"type": "string"}}}]}
    listing = {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}
    data = spec({"/pets": {
        "post": {"operationId": "addPet", "requestBody": {"content": {"application/json": {"schema": body}}},
                 "responses": {"201": {"description": "made", "content": {"application/json": {"schema": {
                     "$ref": "#/components/schemas/Pet"}}}}}},
        "get": {"operationId": "listPets", "responses": {"200": {"description": "all", "content": {
            "application/json": {"schema": listing}}}}}}},
        {"schemas": {"NewPet": new_pet, "Pet": pet, "Owner": {"type": "object", "properties": {
            "pets": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}}})
    ts, _ = read_tool_specs(write(tmp_path, data))
    tools = {t.tool_id: t for t in ts.tools}
    assert inputs(tools["addPet"]) == [("name", "string", ""), ("tag", "any", "(optional)"), ("owner_id", "string", "")]
    fields = [("name", "string", ""), ("tag", "any", ""), ("id", "integer", "the pet's id")]
    assert [(p["name"], p["type"], p["description"]) for p in tools["addPet"].doc["output_params"]] == fields
    assert [(p["name"], p["type"], p["description"]) for p in tools["listPets"].doc["output_params"]] == fields
    from tasks.toolsets.json_schema import type_name

    # a reference to an extended object is named by the reference; an array of them says so
    assert type_name({"$ref": "#/components/schemas/Pet"}, data) == "Pet"
    assert type_name(data["components"]["schemas"]["Owner"]["properties"]["pets"], data) == "array of Pet"


def test_links_that_pass_nothing_or_name_by_reference_are_reported(tmp_path):
    data = spec({"/a": {"get": op("a", {"same": {"operationId": "a", "parameters": {"x": "$response.body#/id"}},
                                        "copy": {"operationId": "b", "parameters": {"x": "$request.query.x"}},
                                        "ref": {"operationRef": "#/paths/~1b/get"}})},
                 "/b": {"get": op("b", parameters=[{"name": "x", "in": "query", "schema": {"type": "string"}}])}})
    ts, report = read_tool_specs(write(tmp_path, data))
    assert ts.edges == [] and ts.parameter_edges == ()  # a link to itself (paging) is no dependency either
    assert len(report.rejected) == 2
    assert "passes no value" in report.rejected[0] and "operationRef" in report.rejected[1]


@pytest.mark.parametrize("data, message", [
    ({"swagger": "2.0", "paths": {}}, "OpenAPI 2"),
    ({"openapi": "4.0", "paths": {}}, "only OpenAPI 3.x"),
    (spec({}), "no operations"),
    (spec({"/a": {"get": op("a", {"x": {"operationId": "missing"}})}}), "'missing', which the file does not have"),
    (spec({"/a": {"get": op("a")}, "/b": {"get": op("a")}}), "duplicate operation name 'a'"),
    (spec({"/a": {"get": op("a", parameters=[{"$ref": "#/components/parameters/nope"}])}}), "names nothing"),
    (spec({"/a": {"get": op("a", parameters=[{"in": "query"}])}}), "needs a string 'name' and 'in'"),
    (spec({"/a": {"get": op("a", parameters=[{"$ref": "#/components/parameters/p"}])}},
          {"parameters": {"p": {"$ref": "#/components/parameters/p"}}}), "that ends"),
    (spec("not paths"), "'paths' must be an object"),
])
def test_what_is_refused_names_the_file_and_the_place(tmp_path, data, message):
    with pytest.raises(ToolSetFormatError, match=message):
        read_tool_specs(write(tmp_path, data))


def test_yaml_anchors_and_bad_yaml_are_refused(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("openapi: 3.0.0\npaths:\n  /a: &x\n    get: {operationId: a, responses: {}}\n  /b: *x\n")
    with pytest.raises(ToolSetFormatError, match="line 3: YAML anchors and aliases are not read"):
        read_tool_specs(bomb)
    broken = tmp_path / "broken.yml"
    broken.write_text("openapi: [3.0\n")
    with pytest.raises(ToolSetFormatError, match="broken.yml: not YAML"):
        read_tool_specs(broken)
    for text, message in (("a: " + "[" * 50_000 + "]" * 50_000, "RecursionError"),
                          ("a: 1" + "0" * 5000, "ValueError: Exceeds the limit"),
                          ('a: "\\ud800"', "lone surrogate")):
        hostile = tmp_path / "hostile.yaml"
        hostile.write_text(text + "\n")
        with pytest.raises(ToolSetFormatError, match=message):
            read_tool_specs(hostile)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("openapi: 3.0.0\ninfo: {title: caf\xe9}\n".encode("latin-1"))
    with pytest.raises(ToolSetFormatError, match="not UTF-8"):
        read_tool_specs(latin)


def test_a_yaml_list_of_tool_definitions_reads_as_the_json_one(tmp_path):
    entry = {"name": "get_weather", "description": "Weather of a city.",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    (tmp_path / "a.json").write_text(json.dumps([entry]))
    (tmp_path / "a.yaml").write_text("- name: get_weather\n  description: Weather of a city.\n  parameters:\n"
                                     "    type: object\n    properties: {city: {type: string}}\n    required: [city]\n")
    assert read_tool_specs(tmp_path / "a.yaml")[0].tools == read_tool_specs(tmp_path / "a.json")[0].tools


def test_build_graph_takes_an_openapi_file_and_its_links_as_the_gold(tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from warehouse.build import connect

    target = tmp_path / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=[str(EXAMPLE)], warehouse=str(target), discriminator=None,
                                  progress=False, transitions=False))
    assert out["datasets"]["code_review"]["manual_edges"] == 4
    con = connect(target)
    manual = "SELECT count(*) FROM edges WHERE dataset = 'code_review' AND source = 'manual'"
    assert con.execute(manual).fetchone()[0] == 4
    # the merge answers 204: the warehouse says it returns nothing, and the rest return their outputs
    assert con.execute("SELECT tool_id FROM tools WHERE dataset = 'code_review' AND returns_nothing").fetchall() == [
        ("mergePullRequest",)]
    assert con.execute("SELECT producer FROM producers_of('code_review', 'mergePullRequest', 'pid') "
                       "WHERE source = 'manual' ORDER BY producer").fetchall() == [("createPullRequest",),
                                                                                    ("listPullRequests",)]
