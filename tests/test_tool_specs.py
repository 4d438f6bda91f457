"""An agent's tool definitions (OpenAI, Anthropic, MCP) read as a tool set (tasks/toolsets/tool_specs.py)."""
from __future__ import annotations

import json

import pytest

from schemas.docs import schema_errors
from schemas.parameters import output_param_names
from tasks.toolsets.availability import check_dataset_names, check_toolsets
from tasks.toolsets.readers import ToolSetFormatError, load_toolset_spec
from tasks.toolsets.tool_specs import read_tool_specs

LOOKUP = {"name": "get_user_id", "description": "Look up a user's id by their email.",
          "parameters": {"type": "object", "properties": {"email": {"type": "string", "description": "the email"}},
                         "required": ["email"]}}
SEND = {"name": "send_message", "description": "Send a message to a user.",
        "parameters": {"type": "object", "required": ["user_id", "text"],
                       "properties": {"user_id": {"type": "string", "description": "whom to send it to"},
                                      "text": {"type": "string"},
                                      "priority": {"type": ["string", "null"], "enum": ["low", "high"]},
                                      "to": {"$ref": "#/$defs/Address"},
                                      "tags": {"type": "array", "items": {"type": "string"}},
                                      "when": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                       "$defs": {"Address": {"type": "object", "description": "a postal address",
                                             "properties": {"street": {}, "city": {}}}}}}


def write(path, data):
    path.write_text(json.dumps(data))
    return path


def chat_tools(*functions):
    return [{"type": "function", "function": f} for f in functions]


def test_openai_chat_tools_become_schema_valid_docs_with_types_and_optional_inputs(tmp_path):
    toolset, report = read_tool_specs(write(tmp_path / "my_agent.json", chat_tools(LOOKUP, SEND)))
    assert toolset.name == "my_agent" and [t.tool_id for t in toolset.tools] == ["get_user_id", "send_message"]
    assert {t.group for t in toolset.tools} == {"my_agent"} and not toolset.edges and not toolset.queries
    assert all(schema_errors(t.doc) == [] for t in toolset.tools) and report.fixes == []
    params = {p["name"]: (p["type"], p["description"]) for p in toolset.tools[1].doc["input_params"]}
    assert list(params) == ["user_id", "text", "priority", "to", "tags", "when"]  # the schema's order
    assert params["user_id"] == ("string", "whom to send it to")
    assert params["text"] == ("string", "")  # required: not marked optional
    assert params["priority"] == ("string | null", "(optional) one of: low, high")
    assert params["to"] == ("Address", "(optional) a postal address; fields: street, city")
    assert params["tags"] == ("array of string", "(optional)")
    assert params["when"] == ("string | integer", "(optional)")
    # no outputs declared: the parameter rule reads the producer's output from its name
    assert toolset.tools[0].doc["output_params"] == [] and output_param_names(toolset.tools[0].doc) == ["user_id"]


def test_mcp_tools_list_reply_keeps_declared_outputs_and_anthropic_tools_read_alike(tmp_path):
    mcp = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "create_issue", "description": "Open an issue.",
         "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
         "outputSchema": {"type": "object", "properties": {"issue_number": {"type": "integer",
                                                                             "description": "the new issue"}}}},
        {"name": "close_issue", "title": "Close an issue",
         "inputSchema": {"type": "object", "properties": {"issue_number": {"type": "integer"}},
                         "required": ["issue_number"]}}]}}
    toolset, report = read_tool_specs(write(tmp_path / "github.json", mcp))
    created, closed = toolset.tools
    assert created.doc["output_params"] == [{"name": "issue_number", "type": "integer", "description": "the new issue"}]
    assert closed.doc["description"] == "Close an issue" and report.fixes == []  # the title when no description
    anthropic = {"tools": [{"name": n, "description": d, "input_schema": s} for n, d, s in
                           [(LOOKUP["name"], LOOKUP["description"], LOOKUP["parameters"])]]}
    (tool,) = read_tool_specs(write(tmp_path / "claude.json", anthropic))[0].tools
    assert tool.doc["input_params"] == [{"name": "email", "type": "string", "description": "the email"}]


def test_the_shipped_example_reads_whole():
    from pathlib import Path

    toolset, report = read_tool_specs(Path(__file__).parents[1] / "docs" / "examples" / "github.json")
    assert toolset.name == "github" and len(toolset.tools) == 12 and report.fixes == []
    assert all(t.doc["output_params"] for t in toolset.tools)  # MCP: every tool says what it returns
    assert "(optional)" in {p["name"]: p["description"] for p in toolset.tools[2].doc["input_params"]}["from_branch"]


def test_gemini_function_declarations_with_openapi_types(tmp_path):
    declaration = {"name": "get_weather", "description": "Weather at a place.", "parameters": {
        "type": "OBJECT", "properties": {"city": {"type": "STRING"}, "days": {"type": "INTEGER"},
                                         "units": {"type": "ARRAY", "items": {"type": "STRING"}}},
        "required": ["city"]}}
    body = {"tools": [{"functionDeclarations": [declaration]}, {"function_declarations": [LOOKUP]}]}
    toolset, report = read_tool_specs(write(tmp_path / "gemini.json", body))
    assert [t.tool_id for t in toolset.tools] == ["get_weather", "get_user_id"] and report.fixes == []
    assert toolset.tools[0].doc["input_params"] == [
        {"name": "city", "type": "string", "description": ""},
        {"name": "days", "type": "integer", "description": "(optional)"},
        {"name": "units", "type": "array of string", "description": "(optional)"}]
    alone = read_tool_specs(write(tmp_path / "declarations.json", {"functionDeclarations": [declaration]}))[0]
    assert [t.doc for t in alone.tools] == [toolset.tools[0].doc]
    with pytest.raises(ToolSetFormatError, match=r"tools\[0\]\.functionDeclarations\[1\]: duplicate tool name"):
        read_tool_specs(write(tmp_path / "twice.json", {"tools": [{"functionDeclarations": [declaration] * 2}]}))


def test_recursive_schemas_are_read_to_a_fixed_depth(tmp_path):
    tree = {"name": "walk", "description": "Walk a tree.", "parameters": {
        "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}, "loop": {"$ref": "#/$defs/A"}},
        "$defs": {"Node": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                  "A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}}
    (tool,) = read_tool_specs(write(tmp_path / "tree.json", [tree]))[0].tools
    types = {p["name"]: p["type"] for p in tool.doc["input_params"]}
    assert types["root"] == "array of array of Node"  # followed MAX_NESTING levels, then named
    assert types["loop"] == "A"  # a reference that never reaches a type is named, not followed for ever


def test_jsonl_entries_and_groups_of_their_own(tmp_path):
    file = tmp_path / "catalog.jsonl"
    # a blank line between entries is allowed
    file.write_text(json.dumps(LOOKUP | {"group": "users"}) + "\n\n" + json.dumps(SEND | {"group": "chat"}) + "\n")
    toolset, _ = read_tool_specs(file)
    assert [(t.tool_id, t.group) for t in toolset.tools] == [("get_user_id", "users"), ("send_message", "chat")]
    nested = write(tmp_path / "nested.json", [{"type": "function", "group": "users", "function": LOOKUP}])
    assert read_tool_specs(nested)[0].tools[0].group == "users"


def test_every_parameter_is_kept_or_its_drop_reported(tmp_path):
    many = {"name": "wide", "description": "Takes many inputs.", "parameters": {
        "type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(15)}}}
    toolset, report = read_tool_specs(write(tmp_path / "wide.json", [many]))
    assert [p["name"] for p in toolset.tools[0].doc["input_params"]] == [f"p{n}" for n in range(12)]
    assert report.fixes == ["wide input: kept the first 12 of 15 parameters, dropped ['p12', 'p13', 'p14']"]
    # past the cap the required inputs stay, wherever the schema declares them; the order stays the schema's
    late = {"name": "late", "description": "Its key comes last.", "parameters": {
        "type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(15)}, "required": ["p14", "p1"]}}
    toolset, report = read_tool_specs(write(tmp_path / "late.json", [late]))
    inputs = toolset.tools[0].doc["input_params"]
    assert [p["name"] for p in inputs] == [f"p{n}" for n in range(11)] + ["p14"]
    assert [p["name"] for p in inputs if not p["description"].startswith("(optional)")] == ["p1", "p14"]
    assert report.fixes == ["late input: kept 12 of 15 parameters (the required first), dropped ['p11', 'p12', 'p13']"]
    bare = {"name": "ping", "parameters": {"type": "object", "properties": {}}}
    toolset, report = read_tool_specs(write(tmp_path / "bare.json", [bare]))
    assert toolset.tools[0].doc["description"] == "ping" and report.fixes == [
        "ping: empty description replaced by the tool name"]


@pytest.mark.parametrize("content, message", [
    (chat_tools(LOOKUP, LOOKUP), r"\[1\]: duplicate tool name 'get_user_id' \(first at .*\[0\]\)"),
    ([{"description": "no name"}], r"\[0\]: a tool needs a non-empty string 'name'"),
    ([{"name": "x", "parameters": {"type": "string"}}], r"\[0\]: parameters must describe an object"),
    ([{"name": "x", "parameters": {"type": "object", "properties": []}}], r"parameters.properties must be an object"),
    ([{"name": "x", "parameters": {"type": "object", "required": "a"}}], r"parameters.required must be a list"),
    ([{"name": "x", "inputSchema": {"properties": {"a": 3}}}], r"parameters.properties.a must be a schema"),
    ([{"type": "web_search"}], r"a 'web_search' tool declares no function"),
    ([{"name": "x", "group": ""}], r"'group' must be a non-empty string"),
    ({"servers": []}, r"expected a list of tool definitions, or an object with them under 'tools', 'functions', "),
    ([], r"no tool definitions"),
    ("not json", r"bad\.json: not valid JSON \(Expecting value\)"),
])
def test_bad_definitions_stop_the_read_naming_file_and_entry(tmp_path, content, message):
    file = tmp_path / "bad.json"
    file.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ToolSetFormatError, match=message) as read:
        read_tool_specs(file)
    # the flows' input check says the same before any work
    with pytest.raises(ValueError) as checked:
        check_toolsets([str(file)], tmp_path, "--toolset")
    assert str(checked.value) == f"--toolset {file}: {read.value}"


def test_a_file_of_another_kind_is_named_as_such(tmp_path):
    other = tmp_path / "tools.toml"
    other.write_text("[[tools]]\nname = 'x'\n")
    with pytest.raises(ValueError, match=r"a file, but neither a tool set folder nor a file of tool definitions"):
        check_toolsets([str(other)], tmp_path, "--toolset")
    with pytest.raises(ValueError, match=r"nor a file of tool definitions \(\.json, \.jsonl, \.yaml, \.yml\)"):
        load_toolset_spec(other)
    # where a set with gold edges is asked for (train-discriminator), tool definitions are no answer
    definitions = write(tmp_path / "my_agent.json", chat_tools(LOOKUP))
    with pytest.raises(ValueError, match=r"^--test .*my_agent\.json: a file, but neither a tool set folder \(docs"):
        check_toolsets([str(definitions)], tmp_path, "--test", fall_back_to_folder=False, tool_specs=False)
    # a folder layout's own tools.jsonl is not read as definitions: its folder is the tool set
    (tmp_path / "set").mkdir()
    layout = write(tmp_path / "set" / "tools.jsonl", {"tool_id": "a", "group": "g", "doc": {}})
    with pytest.raises(ValueError, match=r"a file, not a tool set folder; pass the folder that holds it \(.*set\)"):
        check_toolsets([str(layout)], tmp_path, "--toolset")


def test_two_tool_sets_of_one_name_are_refused_before_any_work(tmp_path):
    from flows.build_graph import parse_args

    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        write(tmp_path / side / "my_agent.json", chat_tools(LOOKUP))
    specs = [str(tmp_path / "a" / "my_agent.json"), str(tmp_path / "b" / "my_agent.json")]
    cfg = parse_args(["--toolset", ",".join(specs), "--no-discriminator", "--warehouse", str(tmp_path / "w.duckdb")])
    # the command line and the flow call this first (before Prefect starts; before any tool set is read)
    with pytest.raises(ValueError, match=r"^--toolset .*a/my_agent\.json, .*b/my_agent\.json: all would be dataset "
                                         r"'my_agent' .*; rename all but one$"):
        cfg.check_inputs()
    check_dataset_names([specs[0], str(tmp_path / "a")], tmp_path, "--toolset")  # 'my_agent' and 'a': no clash


@pytest.mark.slow
def test_build_graph_reads_an_agents_tool_file_and_links_its_tools(tmp_path, prefect_harness):
    from flows.build_graph import build_graph, parse_args
    from warehouse.build import connect, rows_of

    file = write(tmp_path / "my_agent.json", chat_tools(LOOKUP, SEND))
    check_toolsets([str(file)], tmp_path, "--toolset")  # readable: no problem said
    target = tmp_path / "wh" / "tgr.duckdb"
    out = build_graph(parse_args(["--toolset", str(file), "--warehouse", str(target), "--no-discriminator"]))
    assert out["datasets"]["my_agent"]["tools"] == 2
    con = connect(target)
    assert rows_of(con, "SELECT dependent, prerequisite FROM edges WHERE dataset = 'my_agent' AND source = 'schema'") \
        == [{"dependent": "send_message", "prerequisite": "get_user_id"}]
