"""Importers on the real shared benchmark files and the documented tool set folder format."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.docs import schema_errors
from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.toolsets import (
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


@pytest.mark.parametrize(
    "file, line, message",
    [
        ("tools.jsonl", "{not json", "not valid JSON"),
        ("tools.jsonl", json.dumps({"tool_id": "x", "group": "g"}), "missing field 'doc'"),
        ("tools.jsonl", json.dumps({"tool_id": "x", "group": "g", "doc": {"name": "x"}}), "fails the API doc schema"),
        ("tools.jsonl", json.dumps({"tool_id": "login", "group": "g", "doc": {"name": "l", "description": "d",
                                    "input_params": [], "output_params": []}}), "duplicate tool_id"),
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


def test_missing_tools_file_is_an_error(tmp_path):
    with pytest.raises(ToolSetFormatError, match="tools.jsonl"):
        read_toolset_dir(tmp_path)
