"""The benches' own machinery: the scale bench's synthetic catalog (replicas of ToolBench that prune like ToolBench
itself) and the scoring bench's section of bench/RESULTS.md."""
import json
from itertools import combinations

from bench.bench_graph_scale import synthetic_catalog, tag
from tasks.graph.pruning import groups_of, param_compatible, text_compatible
from tasks.toolsets.readers import load_benchmark


def _api(tool, api, category, description, required=(), response=None):
    return {"name": f"{tool}::{api}", "category_name": category, "tool_name": tool, "api_name": api,
            "api_description": description, "required_parameters": [dict(p, description="") for p in required],
            "optional_parameters": [], "method": "GET", "template_response": response or {}}


def test_replicas_keep_each_text_unique_and_the_pruning_rules_answers_of_the_catalog_they_copy(tmp_path):
    root = tmp_path / "benchmarks"
    (root / "toolbench_stable").mkdir(parents=True)
    apis = [
        _api("Parcel", "Latest", "Logistics", "The parcel's current state.", [{"name": "parcelId", "type": "string"}],
             {"state": "str"}),
        _api("Parcel", "Search", "Logistics", "Find a parcel by sender.", [{"name": "sender", "type": "string"}],
             {"parcelId": "str"}),
        _api("Weather", "Forecast", "Logistics", "Tomorrow's weather for a city.", [{"name": "city", "type": "string"}],
             {"temperature": "float"}),
        _api("Movies", "Detail", "Media", "A movie's details.", [{"name": "movie_id", "type": "string"}],
             {"title": "str"}),
        _api("Movies", "Popular", "Media", "Popular movies.", [], {"movie_id": "str"}),
    ]
    (root / "toolbench_stable" / "tools.jsonl").write_text("".join(json.dumps(a) + "\n" for a in apis))
    source = load_benchmark("toolbench_stable", root).tools

    catalog = load_benchmark(synthetic_catalog(12, tmp_path / "catalog", root), None).tools

    n = len(source)
    assert len(catalog) == 12                                         # two replicas and two tools of a third
    assert len({t.doc["name"] for t in catalog}) == len({t.doc["description"] for t in catalog}) == 12
    assert [t.tool_id for t in catalog[n:2 * n]] == [f"{t.tool_id}~r1" for t in source]
    assert catalog[n].doc["name"].endswith(" " + tag(catalog[n].tool_id))
    # a replica's groups are the source's, renamed: no tool meets a tool of another replica
    replica = catalog[n:2 * n]
    assert [[replica[i].tool_id for i in g] for g in groups_of(replica)] == \
           [[f"{source[i].tool_id}~r1" for i in g] for g in groups_of(source)]
    assert {t.group for t in catalog[:n]}.isdisjoint({t.group for t in catalog[n:]})
    # the word each text gains is its own, so pruning links exactly the pairs it links in the source catalog
    for r in (0, 1):
        for i, j in (p for g in groups_of(source) for p in combinations(g, 2)):
            a, b = catalog[r * n + i], catalog[r * n + j]
            assert text_compatible(a, b) == text_compatible(source[i], source[j]), (a.tool_id, b.tool_id)
            assert param_compatible(a, b) == param_compatible(source[i], source[j]), (a.tool_id, b.tool_id)
    assert any(text_compatible(source[i], source[j]) for g in groups_of(source) for i, j in combinations(g, 2))
    assert not all(text_compatible(source[i], source[j]) for g in groups_of(source) for i, j in combinations(g, 2))


def test_a_tag_is_one_lowercase_word_fixed_by_the_id():
    assert tag("Parcel::Latest~r0") == tag("Parcel::Latest~r0")
    assert tag("Parcel::Latest~r0") != tag("Parcel::Latest~r1")
    assert tag("x").isalpha() and tag("x").islower() and len(tag("x")) == 8


def test_the_scoring_bench_rewrites_its_own_lines_and_keeps_the_notes_and_subsections_after_them(tmp_path):
    from bench.bench_scoring import HAND_NOTES, SECTION, write_section

    results = tmp_path / "RESULTS.md"
    results.write_text(f"# Results\n\n{SECTION}\n\nold table\n\n{HAND_NOTES} (by hand):\n- a note\n\n"
                       "### A subsection\n\nkept\n\n## Next section\n\nkept too\n")
    write_section(f"{SECTION}\n\nnew table\n", results)
    assert results.read_text() == (f"# Results\n\n{SECTION}\n\nnew table\n\n{HAND_NOTES} (by hand):\n- a note\n\n"
                                   "### A subsection\n\nkept\n\n## Next section\n\nkept too\n")
    results.write_text(f"# Results\n\n{SECTION}\n\nold table\n\n### A subsection\n\nkept\n")
    write_section(f"{SECTION}\n\nnew table\n", results)
    assert results.read_text() == f"# Results\n\n{SECTION}\n\nnew table\n\n### A subsection\n\nkept\n"
    empty = tmp_path / "EMPTY.md"
    empty.write_text("# Results\n")
    write_section(f"{SECTION}\n\ntable\n", empty)
    assert empty.read_text() == f"# Results\n\n{SECTION}\n\ntable\n"
