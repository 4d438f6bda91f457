"""Importers on the real shared benchmark files and the documented tool set folder format."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from schemas.docs import schema_errors
from schemas.toolset import DependencyEdge, ParameterEdge, Query, Tool, ToolSet
from tasks.toolsets.readers import (
    ImportReport,
    ToolSetFormatError,
    load_benchmark,
    load_benchmark_with_report,
    make_doc,
    read_toolset_dir,
    resolve_edges,
    write_toolset_dir,
)

BENCHMARKS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"
needs_shared = pytest.mark.skipif(
    not BENCHMARKS.is_dir(), reason=f"shared benchmark data not found at {BENCHMARKS} (only beside the dev checkout)"
)


def _raw_lines(name: str, file: str) -> list[dict]:
    return [json.loads(line) for line in (BENCHMARKS / name / file).read_text().splitlines() if line.strip()]


@needs_shared
@pytest.mark.parametrize(
    "name, n_tools, n_queries, n_groups",
    [("apibank", 71, 311, 2), ("toolbench_stable", 2479, 765, 46), ("ultratool", 260, 3527, 18), ("tmdb", 46, 100, 1)],
)
def test_importer_counts_and_every_doc_validates(name, n_tools, n_queries, n_groups):
    toolset, report = load_benchmark_with_report(name, BENCHMARKS)
    assert len(toolset.tools) == n_tools
    assert len(toolset.queries) == n_queries
    assert len({t.group for t in toolset.tools}) == n_groups
    assert [t.tool_id for t in toolset.tools] == [r["name"] for r in _raw_lines(name, "tools.jsonl")]
    for tool in toolset.tools:
        assert schema_errors(tool.doc) == [], tool.tool_id
    ids = {t.tool_id for t in toolset.tools}
    assert all(set(q.gold_tools) <= ids for q in toolset.queries)


@needs_shared
def test_apibank_edges_direction_and_the_cross_group_edge_is_reported():
    toolset, report = load_benchmark_with_report("apibank", BENCHMARKS)
    raw = _raw_lines("apibank", "dependency_edges.jsonl")
    assert len(raw) == 27
    # 26 inside a group + 1 crossing level-1/2 -> level-3: reported, not silently lost
    assert len(toolset.edges) == 26
    assert len(report.rejected) == 1 and "crosses groups" in report.rejected[0]
    edge = next(e for e in toolset.edges if e.prerequisite == "GetUserToken" and e.dependent == "AddAgenda")
    assert edge.source == "manual"
    # grouping="dataset" puts all tools in one group and keeps all 27 edges
    whole = load_benchmark("apibank", BENCHMARKS, grouping="dataset")
    assert len(whole.edges) == 27 and {t.group for t in whole.tools} == {"apibank"}


@needs_shared
def test_apibank_doc_keeps_parameters():
    toolset = load_benchmark("apibank", BENCHMARKS)
    doc = next(t.doc for t in toolset.tools if t.tool_id == "AddAgenda")
    assert [p["name"] for p in doc["input_params"]] == ["token", "content", "time", "location"]
    assert doc["output_params"] == [{"name": "status", "type": "str", "description": "success or failed"}]


@needs_shared
def test_toolbench_groups_are_categories_and_outputs_come_from_template_response():
    toolset, report = load_benchmark_with_report("toolbench_stable", BENCHMARKS)
    tool = next(t for t in toolset.tools if t.tool_id == "suivi-colis::Latest")
    assert tool.group == "Logistics"
    assert [p["name"] for p in tool.doc["input_params"]] == ["colisId"]
    assert "country" in [p["name"] for p in tool.doc["output_params"]]
    # empty ToolBench descriptions are replaced and recorded
    assert any("empty description" in line for line in report.fixes)
    assert toolset.edges == []


@needs_shared
def test_tmdb_self_loop_and_tied_opposite_edges_are_reported():
    toolset, report = load_benchmark_with_report("tmdb", BENCHMARKS)
    assert len(_raw_lines("tmdb", "dependency_edges_from_gold_links.jsonl")) == 72
    assert len(toolset.edges) + len(report.rejected) == 72
    assert any("self loop" in line for line in report.rejected)
    edge = next(e for e in toolset.edges if e.prerequisite == "SearchMovie" and e.dependent == "GetMovieCredit")
    assert edge.group == "tmdb"


@needs_shared
def test_ultratool_every_edge_is_kept_or_reported():
    toolset, report = load_benchmark_with_report("ultratool", BENCHMARKS)
    assert len(toolset.edges) + len(report.rejected) == 603
    group = {t.tool_id: t.group for t in toolset.tools}
    assert all(group[e.dependent] == group[e.prerequisite] == e.group for e in toolset.edges)
    pairs = {(e.dependent, e.prerequisite) for e in toolset.edges}
    assert not any((b, a) in pairs for a, b in pairs), "one direction per pair"


def test_unknown_tool_edge_is_reported_not_dropped():
    report = ImportReport("toy")
    edges = resolve_edges([("A", "B", 1), ("A", "Z", 1), ("B", "A", 3)], {"A": "g", "B": "g"}, report)
    assert edges == [DependencyEdge("g", dependent="A", prerequisite="B", source="manual")]
    assert any("unknown tool" in line and "'Z'" in line for line in report.rejected)
    assert any("reverse direction seen 3 times" in line for line in report.rejected)


def test_make_doc_truncates_deterministically_and_records_it():
    report = ImportReport("toy")
    params = [(f"p{i}", "str", "x" * 500) for i in range(15)]
    doc = make_doc("n" * 130, "d" * 2000, params, [], report)
    assert schema_errors(doc) == []
    assert doc == make_doc("n" * 130, "d" * 2000, params, [], ImportReport("toy"))
    assert len(doc["input_params"]) == 12 and len(doc["name"]) == 120
    assert any("dropped ['p12', 'p13', 'p14']" in line for line in report.fixes)


def _toy_toolset() -> ToolSet:
    doc = lambda n: {"name": n, "description": f"{n} tool", "input_params": [], "output_params": []}  # noqa: E731
    return ToolSet(
        name="toy",
        tools=[Tool("login", "g", doc("login")), Tool("update", "g", doc("update")), Tool("other", "h", doc("other"))],
        edges=[DependencyEdge("g", "update", "login")],
        queries=[Query("q1", "change my email", ("login", "update"))],
    )


def test_write_then_read_toolset_dir_round_trips(tmp_path):
    toolset = _toy_toolset()
    back = read_toolset_dir(write_toolset_dir(toolset, tmp_path / "toy"))
    assert back == toolset
    # a tool the catalog says returns nothing keeps saying so
    quiet = replace(toolset, tools=[replace(toolset.tools[0], returns_nothing=True), *toolset.tools[1:]])
    folder = write_toolset_dir(quiet, tmp_path / "quiet" / "toy")
    assert read_toolset_dir(folder) == quiet and read_toolset_dir(folder).tools[0].returns_nothing
    assert '"returns_nothing": true' in (folder / "tools.jsonl").read_text().splitlines()[0]


@pytest.mark.parametrize(
    "file, line, message",
    [
        ("tools.jsonl", "{not json", "not valid JSON"),
        ("tools.jsonl", json.dumps({"tool_id": "x", "group": "g"}), "missing field 'doc'"),
        ("tools.jsonl", json.dumps({"tool_id": "x", "group": "g", "doc": {"name": "x"}}), "fails the API doc schema"),
        ("tools.jsonl", json.dumps({"tool_id": "login", "group": "g", "doc": {"name": "l", "description": "d",
                                    "input_params": [], "output_params": []}}), "duplicate tool_id"),
        ("tools.jsonl", json.dumps({"tool_id": "y", "group": "g", "returns_nothing": "yes", "doc": {
            "name": "y", "description": "d", "input_params": [], "output_params": []}}), "true or false, got 'yes'"),
        ("tools.jsonl", json.dumps({"tool_id": "y", "group": "g", "returns_nothing": True, "doc": {
            "name": "y", "description": "d", "input_params": [], "output_params": [
                {"name": "o", "type": "string", "description": ""}]}}), "returns nothing but its doc declares outputs"),
        ("edges.jsonl", json.dumps({"group": "g", "dependent": "ghost", "prerequisite": "login"}), "not a tool"),
        ("edges.jsonl", json.dumps({"group": "g", "dependent": "other", "prerequisite": "login"}), "in group 'h'"),
        ("queries.jsonl", json.dumps({"query_id": "q2", "text": "t", "gold_tools": ["ghost"]}), "gold tools not in"),
    ],
)
def test_bad_lines_give_clear_errors_with_file_and_line(tmp_path, file, line, message):
    folder = write_toolset_dir(_toy_toolset(), tmp_path / "toy")
    with (folder / file).open("a") as fh:
        fh.write(line + "\n")
    n_lines = len((folder / file).read_text().splitlines())
    with pytest.raises(ToolSetFormatError, match=message) as err:
        read_toolset_dir(folder)
    assert f"{file}:{n_lines}" in str(err.value)


def test_non_utf8_and_empty_tool_files_are_format_errors(tmp_path):
    folder = write_toolset_dir(_toy_toolset(), tmp_path / "toy")
    with (folder / "queries.jsonl").open("ab") as fh:
        fh.write('{"query_id": "q9", "text": "caf\xe9", "gold_tools": ["login"]}\n'.encode("latin-1"))
    n_lines = len((folder / "queries.jsonl").read_bytes().splitlines())
    with pytest.raises(ToolSetFormatError, match=f"queries.jsonl:{n_lines}: not UTF-8"):
        read_toolset_dir(folder)
    (folder / "tools.jsonl").write_text("\n")
    with pytest.raises(ToolSetFormatError, match="no tools"):
        read_toolset_dir(folder)


def test_missing_tools_file_is_an_error(tmp_path):
    with pytest.raises(ToolSetFormatError, match="tools.jsonl"):
        read_toolset_dir(tmp_path)


# ---------------------------------------------------------------------------------------------
# read_toolset_dir: mutual edges, integer ids, empty gold sets


@pytest.mark.parametrize(
    "file, line, message",
    [
        ("edges.jsonl", json.dumps({"group": "g", "dependent": "login", "prerequisite": "update"}), "mutual edges"),
        ("edges.jsonl", json.dumps({"group": "g", "dependent": "update", "prerequisite": "login"}), "duplicate edge"),
        ("edges.jsonl", json.dumps({"group": "g", "dependent": "login", "prerequisite": "login"}), "cannot depend on itself"),
        ("edges.jsonl", json.dumps({"group": "g", "dependent": 1.5, "prerequisite": "login"}), "string or an integer"),
        ("queries.jsonl", json.dumps({"query_id": "q2", "text": "t", "gold_tools": []}), "empty gold_tools"),
        ("queries.jsonl", json.dumps({"query_id": "q1", "text": "t", "gold_tools": ["login"]}), "duplicate query_id"),
        ("queries.jsonl", json.dumps({"query_id": "", "text": "t", "gold_tools": ["login"]}), "'query_id' is empty"),
        ("tools.jsonl", json.dumps({"tool_id": True, "group": "g", "doc": {}}), "string or an integer"),
        ("queries.jsonl", json.dumps({"query_id": "q3", "text": "t", "gold_tools": [["login"]]}), "string or an integer"),
    ],
)
def test_more_bad_lines_name_file_and_line(tmp_path, file, line, message):
    folder = write_toolset_dir(_toy_toolset(), tmp_path / "toy")
    with (folder / file).open("a") as fh:
        fh.write(line + "\n")
    n_lines = len((folder / file).read_text().splitlines())
    with pytest.raises(ToolSetFormatError, match=message) as err:
        read_toolset_dir(folder)
    assert f"{file}:{n_lines}" in str(err.value)
    if message == "mutual edges":
        assert "line 1 says" in str(err.value)


def test_integer_ids_are_read_as_strings(tmp_path):
    folder = tmp_path / "ints"
    folder.mkdir()
    doc = lambda n: {"name": n, "description": f"{n} tool", "input_params": [], "output_params": []}  # noqa: E731
    (folder / "tools.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"tool_id": 1, "group": "g", "doc": doc("one")}, {"tool_id": 2, "group": "g", "doc": doc("two")}]) + "\n")
    (folder / "edges.jsonl").write_text(json.dumps({"group": "g", "dependent": 2, "prerequisite": 1}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"query_id": 7, "text": "t", "gold_tools": [1, "2"]}) + "\n")
    ts = read_toolset_dir(folder)
    assert [t.tool_id for t in ts.tools] == ["1", "2"]
    assert ts.edges == [DependencyEdge("g", "2", "1", "manual")]
    assert ts.queries == [Query("7", "t", ("1", "2"))]


# ---------------------------------------------------------------------------------------------
# The generic importer (shared benchmark layout)


def _layout_folder(tmp_path, tools, edges=None, queries=None, edge_name="my_edges.jsonl"):
    folder = tmp_path / "mybench"
    folder.mkdir(exist_ok=True)
    write = lambda name, rows: (folder / name).write_text("".join(  # noqa: E731
        (r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    write("tools.jsonl", tools)
    if edges is not None:
        write(edge_name, edges)
    if queries is not None:
        write("queries.jsonl", queries)
    return folder


def test_generic_importer_reads_any_folder_in_the_shared_layout(tmp_path):
    folder = _layout_folder(
        tmp_path,
        [{"name": "Login", "description": "Log in.", "input_parameters": {"user": {"type": "str", "description": "u"}},
          "output_parameters": [{"name": "token", "type": "str"}], "category": "account"},
         {"name": "Update", "description": "Update the email.", "input_parameters": ["token", "email"],
          "category": "account"},
         {"name": 3, "description": "", "domain": ["misc", "account"]}],
        edges=[{"producer": "Login", "consumer": "Update", "count": 2}, {"producer": "Login", "consumer": 3}],
        queries=[{"qid": 1, "query": "change my email", "gold_tools": ["Update", "Login"]},
                 {"query_id": "q2", "text": "nothing", "gold_tools": ["Ghost"]}],
    )
    ts, report = load_benchmark_with_report(folder)
    assert ts.name == "mybench"
    assert [(t.tool_id, t.group) for t in ts.tools] == [("Login", "account"), ("Update", "account"), ("3", "account")]
    login = ts.tools[0].doc
    assert [p["name"] for p in login["input_params"]] == ["user"] and login["output_params"][0]["name"] == "token"
    assert [p["name"] for p in ts.tools[1].doc["input_params"]] == ["token", "email"]
    # tool "3" lists two domains and moves to the one of its dependency partner
    assert {(e.dependent, e.prerequisite) for e in ts.edges} == {("Update", "Login"), ("3", "Login")}
    assert ts.queries == [Query("1", "change my email", ("Update", "Login"))]
    assert any("no known gold tool" in r for r in report.rejected)
    assert any("empty description" in f for f in report.fixes)
    assert load_benchmark(folder).tools == ts.tools  # a path works for load_benchmark too


@pytest.mark.parametrize(
    "file, row, message",
    [
        ("tools.jsonl", {"description": "no name"}, "missing field 'name'"),
        ("tools.jsonl", {"name": "X", "input_parameters": 5}, "'input_parameters' must be an object or a list"),
        ("tools.jsonl", {"name": "X", "input_parameters": [{"type": "str"}]}, r"input_parameters\[0\]"),
        ("tools.jsonl", {"name": "X", "output_parameters": {"a": 5}}, r"output_parameters.a must be"),
        ("tools.jsonl", {"name": "X", "description": 5}, "'description' must be a string"),
        ("tools.jsonl", {"name": "X", "group": 5}, "group field must be"),
        ("tools.jsonl", "[1, 2]", "expected a JSON object"),
        ("tools.jsonl", "{oops", "not valid JSON"),
        ("my_edges.jsonl", {"consumer": "A"}, "missing field 'producer'"),
        ("my_edges.jsonl", {"producer": "A", "consumer": "B", "count": 0}, "'count' must be a positive integer"),
        ("queries.jsonl", {"query": "q", "gold_tools": ["A"]}, "missing field 'qid' or 'query_id'"),
        ("queries.jsonl", {"qid": 9, "gold_tools": ["A"]}, "missing field 'query' or 'text'"),
        ("queries.jsonl", {"qid": 9, "query": "q"}, "missing field 'gold_tools'"),
        ("queries.jsonl", {"qid": 9, "query": "q", "gold_tools": "A"}, "'gold_tools' must be a list"),
        ("queries.jsonl", {"qid": 1, "query": "again", "gold_tools": ["A"]}, "duplicate query id"),
    ],
)
def test_generic_importer_errors_name_file_and_line(tmp_path, file, row, message):
    tools = [{"name": "A", "description": "a"}, {"name": "B", "description": "b"}]
    edges = [{"producer": "A", "consumer": "B"}]
    queries = [{"qid": 1, "query": "q", "gold_tools": ["A"]}]
    files = {"tools.jsonl": tools, "my_edges.jsonl": edges, "queries.jsonl": queries}
    files[file] = files[file] + [row]
    folder = _layout_folder(tmp_path, files["tools.jsonl"], files["my_edges.jsonl"], files["queries.jsonl"])
    with pytest.raises(ToolSetFormatError, match=message) as err:
        load_benchmark_with_report(folder)
    assert f"{folder / file}:{len(files[file])}" in str(err.value)


def test_generic_importer_folder_level_errors(tmp_path):
    with pytest.raises(ValueError, match="neither a known name"):
        load_benchmark_with_report(tmp_path / "nowhere")
    folder = _layout_folder(tmp_path, [{"name": "A"}], edges=[{"producer": "A", "consumer": "A"}])
    (folder / "other_edges.jsonl").write_text("")
    with pytest.raises(ToolSetFormatError, match="several edge files"):
        load_benchmark_with_report(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "tools.jsonl").write_text("\n")
    with pytest.raises(ToolSetFormatError, match="no tools"):
        load_benchmark_with_report(empty)
    with pytest.raises(FileNotFoundError, match="tools.jsonl"):
        load_benchmark_with_report(tmp_path)


def test_load_toolset_spec_tells_the_two_folder_formats_apart(tmp_path):
    from tasks.toolsets.readers import is_toolset_dir, load_toolset_spec

    project = write_toolset_dir(_toy_toolset(), tmp_path / "toy")
    shared = _layout_folder(tmp_path, [{"name": "A", "description": "a"}])
    assert is_toolset_dir(project) and not is_toolset_dir(shared)
    assert load_toolset_spec(project) == _toy_toolset()
    assert [t.tool_id for t in load_toolset_spec(shared).tools] == ["A"]
    with pytest.raises(ValueError, match="neither a benchmark"):
        load_toolset_spec(tmp_path / "missing")


@needs_shared
def test_benchmark_folder_path_equals_the_name(tmp_path):
    by_name = load_benchmark("tmdb", BENCHMARKS)
    by_path = load_benchmark(BENCHMARKS / "tmdb")
    assert by_name == by_path


# ---------------------------------------------------------------------------------------------
# param_edges.jsonl: parameter-level gold edges (either folder format)


@needs_shared
def test_nestools_is_a_benchmark_with_parameter_edges():
    from tasks.toolsets.readers import BENCHMARKS as NAMES, load_toolset_spec

    assert "nestools" in NAMES
    toolset, report = load_benchmark_with_report("nestools", BENCHMARKS)
    assert (len(toolset.tools), len(toolset.edges), len(toolset.queries)) == (3034, 1638, 1000)
    assert len({t.group for t in toolset.tools}) == 146
    assert report.rejected == [] and len(toolset.parameter_edges) == 1746  # every line of param_edges.jsonl kept
    raw = _raw_lines("nestools", "param_edges.jsonl")[1]
    assert toolset.parameter_edges[1] == ParameterEdge(raw["consumer"], raw["producer"], raw["consumer_param"],
                                                       raw["producer_field"], "manual")
    assert toolset.parameter_edges[1].producer_output != toolset.parameter_edges[1].consumer_param  # certificate_num
    tools = {t.tool_id: t for t in toolset.tools}
    for e in toolset.parameter_edges:
        consumer, producer = tools[e.dependent], tools[e.prerequisite]
        assert consumer.group == producer.group
        assert e.consumer_param in {p["name"] for p in consumer.doc["input_params"]}
        assert e.producer_output in {p["name"] for p in producer.doc["output_params"]}
    assert load_toolset_spec("nestools", BENCHMARKS) == toolset
    whole = load_benchmark("nestools", BENCHMARKS, grouping="dataset")
    assert {t.group for t in whole.tools} == {e.group for e in whole.edges} == {"nestools"}
    assert len(whole.edges) == 1638 and whole.parameter_edges == toolset.parameter_edges


def _param_doc(name, inputs=(), outputs=()):
    return {"name": name, "description": f"{name} tool", "input_params": [
        {"name": n, "type": "str", "description": ""} for n in inputs], "output_params": [
        {"name": n, "type": "str", "description": ""} for n in outputs]}


def _param_toolset() -> ToolSet:
    return ToolSet(
        name="params",
        tools=[Tool("login", "g", _param_doc("login", ["user"], ["token"])),
               Tool("update", "g", _param_doc("update", ["auth", "email"], ["status"])),
               Tool("other", "h", _param_doc("other", ["token"]))],
        edges=[DependencyEdge("g", "update", "login", kind="data")],  # as read back: a parameter edge makes it data
        parameter_edges=(ParameterEdge("update", "login", "auth", "token"), ParameterEdge("update", "login", "email")),
    )


def test_parameter_edges_round_trip_and_default_to_none(tmp_path):
    toolset = _param_toolset()
    folder = write_toolset_dir(toolset, tmp_path / "params")
    assert read_toolset_dir(folder) == toolset
    assert read_toolset_dir(write_toolset_dir(_toy_toolset(), tmp_path / "toy")).parameter_edges == ()
    assert not (tmp_path / "toy" / "param_edges.jsonl").exists()


def test_unusable_parameter_edge_lines_are_rejected_with_reasons(tmp_path, caplog):
    from tasks.toolsets.readers import read_toolset_dir_with_report

    folder = write_toolset_dir(_param_toolset(), tmp_path / "params")
    bad = [
        {"producer": "ghost", "consumer": "update", "consumer_param": "auth"},
        {"producer": "login", "consumer": "update", "consumer_param": "password", "producer_field": "token"},
        {"producer": "login", "consumer": "update", "consumer_param": "auth", "producer_field": "session"},
        {"producer": "login", "consumer": "other", "consumer_param": "token", "producer_field": "token"},
        {"producer": "login", "consumer": "login", "consumer_param": "user"},
        {"producer": "login", "consumer": "update", "consumer_param": "auth", "producer_field": "token", "group": "x"},
        {"producer": "login", "consumer": "update", "consumer_param": "auth", "producer_field": "token", "count": 3},
    ]
    with (folder / "param_edges.jsonl").open("a") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in bad)
    toolset, report = read_toolset_dir_with_report(folder)
    assert toolset.parameter_edges == _param_toolset().parameter_edges  # the two good lines, nothing else
    file = folder / "param_edges.jsonl"
    assert report.rejected == [
        f"{file}:3: parameter edge ghost.? -> update(auth): unknown tool(s) ['ghost']",
        f"{file}:4: parameter edge login.token -> update(password): 'update' has no input parameter 'password'",
        f"{file}:5: parameter edge login.session -> update(auth): 'login' declares no output 'session'",
        f"{file}:6: parameter edge login.token -> other(token): crosses groups 'g'/'h'",
        f"{file}:7: parameter edge login.? -> login(user): self loop",
        f"{file}:8: parameter edge login.token -> update(auth): group 'x', but both tools are in 'g'",
        f"{file}:9: parameter edge login.token -> update(auth): repeats line 1 (same consumer, parameter, producer "
        "and source)",
    ]
    with caplog.at_level("WARNING"):
        assert read_toolset_dir(folder).parameter_edges == toolset.parameter_edges
    assert "7 rejected records" in caplog.text
    # the same file in a folder of the shared benchmark layout: read, and not taken for a second edge file
    shared = _layout_folder(tmp_path, [{"name": "login", "input_parameters": ["user"], "output_parameters": ["token"]},
                                       {"name": "update", "input_parameters": ["auth", "email"]}],
                            edges=[{"producer": "login", "consumer": "update"}])
    (shared / "param_edges.jsonl").write_text(file.read_text())
    imported, shared_report = load_benchmark_with_report(shared)
    assert [(e.dependent, e.prerequisite) for e in imported.edges] == [("update", "login")]
    assert imported.parameter_edges == toolset.parameter_edges
    assert len(shared_report.rejected) == 7


@pytest.mark.parametrize("row, message", [
    ({"producer": "login", "consumer": "update"}, "missing field 'consumer_param'"),
    ({"producer": "login", "consumer": "update", "consumer_param": ""}, "'consumer_param' is empty"),
    ({"producer": "login", "consumer": "update", "consumer_param": "auth", "producer_field": 3}, "'producer_field' must"),
    ({"producer": [1], "consumer": "update", "consumer_param": "auth"}, "string or an integer"),
    ("{oops", "not valid JSON"),
])
def test_malformed_parameter_edge_lines_name_file_and_line(tmp_path, row, message):
    folder = write_toolset_dir(_param_toolset(), tmp_path / "params")
    with (folder / "param_edges.jsonl").open("a") as fh:
        fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    with pytest.raises(ToolSetFormatError, match=message) as err:
        read_toolset_dir(folder)
    assert "param_edges.jsonl:3" in str(err.value)


# ---------------------------------------------------------------------------------------------
# Dependency kinds: "data", "precondition", or not known (None)


def test_edge_kind_is_read_written_and_checked(tmp_path):
    toolset = _toy_toolset()
    toolset.edges = [DependencyEdge("g", "update", "login", kind="precondition")]
    folder = write_toolset_dir(toolset, tmp_path / "toy")
    assert json.loads((folder / "edges.jsonl").read_text())["kind"] == "precondition"
    assert read_toolset_dir(folder) == toolset
    # no kind: the line has none (files written before kinds read the same) and the edge reads back None
    plain = write_toolset_dir(_toy_toolset(), tmp_path / "plain")
    assert "kind" not in json.loads((plain / "edges.jsonl").read_text())
    assert read_toolset_dir(plain).edges[0].kind is None
    # an explicit null is "not known" too
    (plain / "edges.jsonl").write_text(json.dumps({"group": "g", "dependent": "update", "prerequisite": "login",
                                                   "kind": None}) + "\n")
    assert read_toolset_dir(plain).edges[0].kind is None
    with pytest.raises(ValueError, match="dependency kind 'order' is not one of data, precondition"):
        DependencyEdge("g", "update", "login", kind="order")


@pytest.mark.parametrize("kind", ["order", "Data", "", 1, ["data"]])
def test_a_bad_edge_kind_is_a_format_error_naming_file_and_line(tmp_path, kind):
    folder = write_toolset_dir(_toy_toolset(), tmp_path / "toy")
    (folder / "edges.jsonl").write_text("\n" + json.dumps({"group": "g", "dependent": "update", "prerequisite": "login",
                                                            "kind": kind}) + "\n")
    with pytest.raises(ToolSetFormatError, match="field 'kind': dependency kind .* is not one of data, precondition") as err:
        read_toolset_dir(folder)
    assert f"{folder / 'edges.jsonl'}:2:" in str(err.value)


def test_a_parameter_edge_makes_an_edge_of_unknown_kind_data(tmp_path):
    from tasks.toolsets.readers import read_toolset_dir_with_report

    toolset = _param_toolset()
    toolset.edges = [DependencyEdge("g", "update", "login")]  # no kind on the line
    folder = write_toolset_dir(toolset, tmp_path / "params")
    assert "kind" not in (folder / "edges.jsonl").read_text()
    back, report = read_toolset_dir_with_report(folder)
    assert [e.kind for e in back.edges] == ["data"] and report.fixes == []
    # without the parameter edges the kind stays unknown
    (folder / "param_edges.jsonl").unlink()
    assert [e.kind for e in read_toolset_dir(folder).edges] == [None]
    # a line that says precondition keeps its kind; the disagreement is noted, not hidden
    toolset.edges = [DependencyEdge("g", "update", "login", kind="precondition")]
    folder = write_toolset_dir(toolset, tmp_path / "said")
    back, report = read_toolset_dir_with_report(folder)
    assert [e.kind for e in back.edges] == ["precondition"]
    assert len(report.fixes) == 1 and "kind 'precondition' as its line says" in report.fixes[0]


def test_generic_importer_reads_edge_kinds_and_refuses_bad_or_contradicting_ones(tmp_path):
    tools = [{"name": n, "description": n} for n in "ABC"]
    folder = _layout_folder(tmp_path, tools, [{"producer": "A", "consumer": "B", "kind": "precondition"},
                                              {"producer": "A", "consumer": "B"}, {"producer": "B", "consumer": "C"}])
    kinds = {(e.prerequisite, e.dependent): e.kind for e in load_benchmark(folder).edges}
    assert kinds == {("A", "B"): "precondition", ("B", "C"): None}
    folder = _layout_folder(tmp_path, tools, [{"producer": "A", "consumer": "B", "kind": "value"}])
    with pytest.raises(ToolSetFormatError, match=r"my_edges.jsonl:1: field 'kind'"):
        load_benchmark(folder)
    folder = _layout_folder(tmp_path, tools, [{"producer": "A", "consumer": "B", "kind": "data"},
                                              {"producer": "B", "consumer": "C"},
                                              {"producer": "A", "consumer": "B", "kind": "precondition"}])
    with pytest.raises(ToolSetFormatError, match=r"my_edges.jsonl:3: edge A->B has kind 'precondition' here, "
                                                 r"'data' on line 1"):
        load_benchmark(folder)


@needs_shared
def test_gold_kinds_on_the_shared_benchmarks():
    """API-Bank's pairs are values reused (data), NesTools' tool edges all have parameter-level gold (data),
    UltraTool's and TMDB's follow call order (not known)."""
    assert {e["evidence"] for e in _raw_lines("apibank", "dependency_edges.jsonl")} == {
        "value of producer output reused as consumer input in gold dialogue"}
    apibank = load_benchmark("apibank", BENCHMARKS)
    assert len(apibank.edges) == 26 and {e.kind for e in apibank.edges} == {"data"}
    assert {e.kind for e in load_benchmark("apibank", BENCHMARKS, grouping="dataset").edges} == {"data"}
    nestools = load_benchmark("nestools", BENCHMARKS)
    assert "kind" not in (BENCHMARKS / "nestools" / "edges.jsonl").read_text()  # derived, not read
    fed = {(e.dependent, e.prerequisite) for e in nestools.parameter_edges}
    assert all((e.dependent, e.prerequisite) in fed for e in nestools.edges)
    assert len(nestools.edges) == 1638 and {e.kind for e in nestools.edges} == {"data"}
    assert {e.kind for e in load_benchmark("nestools", BENCHMARKS, grouping="dataset").edges} == {"data"}
    for name, n_edges in (("ultratool", 330), ("tmdb", 69)):
        edges = load_benchmark(name, BENCHMARKS).edges
        assert len(edges) == n_edges and {e.kind for e in edges} == {None}, name
