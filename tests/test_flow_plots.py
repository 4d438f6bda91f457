"""build-graph's candidate_recall.png, eval-retrieval's retrieval.png and its progress, and the Prefect artifact
every flow plot is shown with (tasks/common/plots.py show_plot)."""
from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest

from schemas.toolset import Query, ToolSet
from tasks.common.plots import markdown_table, plot_markdown, show_plot
from tasks.graph.candidates import retrieval_recall, retrieval_texts
from tasks.graph.plots import (candidate_recall_figure, curve_settings, curve_strategies, operating_point,
                               plot_candidate_recall, table_rows)
from tasks.graph.pruning import prune_candidates
from tasks.retrieval.plots import PLOT_METRICS, plot_retrieval, plot_rows, retrieval_figure
from tests.test_graph_flow import EDGES, TOOLS, TOYSET
from tests.test_plots import assert_png


def hashed_encode(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in encoder: bag of hashed words (texts sharing words are close)."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z]+", t.lower()):
            out[i, sum(map(ord, w)) % 64] += 1.0
    return out + 1e-3


def metric_row(dataset: str, method: str, k: int, recall: float, ndcg: float, split: str = "all", n: int = 7) -> dict:
    return {"dataset": dataset, "method": method, "k": k, "recall": recall, "ndcg": ndcg, "pass_rate": 0.1,
            "n_queries": n, "query_split": split}


# -- eval-retrieval: retrieval.png ------------------------------------------------------------------
def test_retrieval_figure_draws_r5_and_ndcg5_of_every_method_one_panel_per_set(tmp_path):
    rows = []
    for d, methods in (("apibank", ("BM25", "embedding", "embedding+TGR-m")), ("tmdb", ("BM25", "embedding"))):
        for j, m in enumerate(methods):
            rows += [metric_row(d, m, 5, 0.2 + 0.1 * j, 0.15 + 0.1 * j), metric_row(d, m, 10, 0.9, 0.9)]
    rows += [metric_row("apibank", "embedding+TGR-t", 5, 0.61, 0.52, split="test", n=3),
             metric_row("apibank", "embedding+TGR-t", 10, 0.9, 0.9, split="test", n=3)]
    fig = retrieval_figure(rows)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["apibank: 7 queries", "tmdb: 7 queries", "apibank (test queries): 3 queries"]
    for ax in axes:
        name = ax.get_title().split(":")[0]
        want = [r for r in plot_rows(rows) if r["set"] == name]
        assert [t.get_text() for t in ax.get_yticklabels()] == [r["method"] for r in want]
        # two bars a method (R@5, NDCG@5), their lengths the k = 5 values, none of k = 10
        widths = [p.get_width() for p in ax.patches]
        assert len(widths) == 2 * len(want)
        assert widths == pytest.approx([r[label] for _, label in PLOT_METRICS for r in want])
    assert_png(plot_retrieval(rows, tmp_path / "retrieval.png"), least_bytes=20_000)
    empty = retrieval_figure([metric_row("x", "BM25", 10, 1.0, 1.0)])  # no k = 5 row: says so, draws no bar
    assert not empty.axes[0].patches and "no metric rows" in empty.axes[0].texts[0].get_text()


# -- build-graph: candidate_recall.png ---------------------------------------------------------------
def test_candidate_recall_curves_hold_the_builds_point_and_the_figure_draws_them(tmp_path):
    toyset = ToolSet("toy", TOOLS, EDGES)
    strategy, k = "params+text+neighbours+retrieval", 1
    base = hashed_encode([t.doc["description"] for t in TOOLS])
    texts = retrieval_texts(TOOLS)
    emb = hashed_encode(texts.producers + texts.queries)
    from tasks.graph.candidates import retrieve_producers

    build = prune_candidates(TOOLS, base, strategy, 1, EDGES,
                             retrieve_producers(TOOLS, emb[:len(TOOLS)], emb[len(TOOLS):], texts.consumer, k))
    settings, strategies = curve_settings(k, None), curve_strategies(strategy)
    assert [s for s, _ in settings] == [1, 3, 5, 10] and strategies == ["retrieval", "params+retrieval", strategy]
    assert curve_strategies("params+text") == ["retrieval", "params+retrieval"]  # no retrieval rule: no k to vary
    curve = retrieval_recall(toyset, hashed_encode, settings, strategies, base, 1)
    point = operating_point(build, k)
    # the build's point is its own strategy's row at its k: the star sits on that curve
    same = next(r for r in curve if r["strategy"] == strategy and r["k"] == k)
    assert (same["recall"], same["ordered_share"]) == (point["recall"], point["ordered_share"])
    fig = candidate_recall_figure({"toy": curve, "again": curve}, {"toy": point, "again": point})
    for ax in fig.axes:
        lines = ax.get_lines()
        assert [ln.get_label() for ln in lines] == strategies
        for ln, s in zip(lines, strategies):
            assert list(ln.get_xdata()) == [r["ordered_share"] for r in curve if r["strategy"] == s]
            assert list(ln.get_ydata()) == [r["recall"] for r in curve if r["strategy"] == s]
        (star,) = ax.collections
        assert star.get_offsets().tolist() == [[point["ordered_share"], point["recall"]]]
    table = table_rows({"toy": curve}, {"toy": point})
    assert len(table) == len(curve) + 1 and table[-1]["build"] == "this build"
    assert_png(plot_candidate_recall({"toy": curve}, {"toy": point}, tmp_path / "candidate_recall.png"))


# -- the artifact helper --------------------------------------------------------------------------------
def test_show_plot_does_nothing_outside_a_prefect_run(tmp_path):
    assert show_plot(tmp_path / "x.png", "a plot", [{"a": 1}]) is None
    text = plot_markdown(tmp_path / "x.png", "a plot", [{"set": "s|1", "R@5": 0.12345, "w": None}], note="why")
    assert f"`{tmp_path / 'x.png'}`" in text and "| s\\|1 | 0.123 |  |" in text and "why" in text
    assert markdown_table([]) == "(no rows)"


def test_show_plot_inside_a_flow_run_makes_a_markdown_artifact(tmp_path, prefect_harness):
    from prefect import flow
    from prefect.artifacts import Artifact

    @flow
    def draws() -> object:
        return show_plot(tmp_path / "p.png", "P", [{"set": "a", "R@5": 0.5}], key="test-show-plot")

    assert draws() is not None
    artifact = Artifact.get("test-show-plot")
    assert artifact.type == "markdown" and str(tmp_path / "p.png") in artifact.data and "| a | 0.500 |" in artifact.data


# -- the flows ------------------------------------------------------------------------------------------
def test_build_graph_draws_candidate_recall_from_the_texts_pruning_encoded(tmp_path, prefect_harness, monkeypatch):
    """No embedding cache: the curve still asks the encoder for no retrieval-rule text pruning encoded; the
    plot lies beside the warehouse, its rows in the summary and a Prefect artifact; a set without gold
    edges draws none."""
    import flows.build_graph as flow_module
    from flows.build_graph import GraphConfig, build_graph
    from prefect.artifacts import Artifact
    from tasks.toolsets.readers import write_toolset_dir

    asked: list[list[str]] = []
    monkeypatch.setattr(flow_module, "sentence_encoder", lambda *a: type("E", (), {
        "encode": staticmethod(lambda texts: (asked.append(list(texts)), hashed_encode(texts))[1])})())
    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "wh" / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=(str(folder),), warehouse=str(target), discriminator=None,
                                  embedding_cache=None, transitions=False, retrieval_k=1, neighbours=1))
    retrieval = retrieval_texts(TOOLS)
    rule_texts = retrieval.producers + retrieval.queries
    encoded = Counter(t for batch in asked for t in batch)
    assert {encoded[t] for t in rule_texts} == {1}  # once, for pruning; the curve reused them
    path = target.parent / "candidate_recall.png"
    assert out["plots"] == {"candidate_recall": str(path)}
    assert_png(path)
    curve, pruning = out["datasets"]["toy"]["candidate_recall"], out["datasets"]["toy"]["pruning"]
    assert {(r["strategy"], r["k"]) for r in curve} == {(s, k) for s in curve_strategies(pruning["strategy"])
                                                        for k, _ in curve_settings(1, None)}
    own = next(r for r in curve if r["strategy"] == pruning["strategy"] and r["k"] == 1)
    assert (own["recall"], own["ordered_share"]) == (pruning["known_edge_recall"], pruning["ordered_share_kept"])
    artifact = Artifact.get("build-graph-candidate-recall")
    assert str(path) in artifact.data and artifact.data.count("this build") == 1

    no_gold = write_toolset_dir(ToolSet("nogold", TOOLS, [], [Query("q", "weather", ("weather",))]), tmp_path / "nogold")
    out = build_graph(GraphConfig(toolsets=(str(no_gold),), warehouse=str(tmp_path / "ng.duckdb"), discriminator=None,
                                  embedding_cache=None, transitions=False))
    assert out["plots"] == {} and out["datasets"]["nogold"]["candidate_recall"] is None
    assert not (tmp_path / "candidate_recall.png").exists()


def test_eval_retrieval_plot_artifact_and_progress(tmp_path, prefect_harness, monkeypatch):
    import flows.build_graph as build_module
    from flows.build_graph import GraphConfig, build_graph
    from flows.eval_retrieval import EvalConfig, EvalProgress, eval_retrieval, rank_all
    from prefect.artifacts import Artifact
    from tasks.retrieval.inputs import load_inputs
    from tasks.toolsets.readers import write_toolset_dir

    monkeypatch.setattr(build_module, "sentence_encoder", lambda *a: type("E", (), {
        "encode": staticmethod(hashed_encode)})())
    target = tmp_path / "tgr.duckdb"
    build_graph(GraphConfig(toolsets=(str(write_toolset_dir(TOYSET, tmp_path / "toy")),), warehouse=str(target),
                            discriminator=None, embedding_cache=None, transitions=False))
    result = eval_retrieval(EvalConfig(warehouse=str(target), out_dir=str(tmp_path / "eval"), rerank=False,
                                       paper_encoder=None, sql_check=False))
    assert result["plot"] == str(tmp_path / "eval" / "retrieval.png")
    assert_png(tmp_path / "eval" / "retrieval.png")
    data = Artifact.get("eval-retrieval-plot").data
    for r in result["rows"]:
        if r["k"] == 5:  # every drawn number is in the artifact's table
            assert f"| toy | {r['method']} | 2 | {r['recall']:.3f} | {r['ndcg']:.3f} |" in data

    # per method and set: queries scored of the total, rate and time left; the rankings as without progress
    inputs = load_inputs.fn(str(target), "toy")
    lines: list[str] = []
    progress = EvalProgress(1, lines.append, artifact=False, every_s=1e-6)
    assert rank_all.fn(inputs, 3, progress) == rank_all.fn(inputs, 3)
    said = {m.group(1): m.group(2) for m in (re.match(r"eval-retrieval toy (.+?): (\d+/\d+) queries \(100%\), .*/(s|min), "
                                                      r"about \d+ s left", ln) for ln in lines) if m}
    assert said == {m: "2/2" for m in ("BM25", "TF-IDF", "embedding", "embedding+TGR-m", "embedding+TGR-s")}
    assert [(w, d, t) for w, d, t in progress.finished] == [(f"eval-retrieval toy {m}", 2, 2) for m in said]


def test_ranked_rows_in_chunks_equal_one_top_k(monkeypatch):
    import flows.eval_retrieval as flow_module
    from tasks.common.progress import CountProgress
    from tasks.retrieval.ranking import top_k_from_scores

    monkeypatch.setattr(flow_module, "QUERY_CHUNK", 4)
    scores = np.random.default_rng(0).random((11, 9))
    scores[3, 2] = scores[3, 5]  # a tie: the lower index first, in chunks too
    counted = CountProgress(11, "t", "queries")
    assert flow_module.ranked_rows(scores, 5, counted) == top_k_from_scores(scores, 5).tolist()
    assert counted.done == 11
    assert json.dumps(flow_module.ranked_rows(scores[:0], 5, CountProgress(0, "t"))) == "[]"


def test_the_published_datasets_mix_is_a_markdown_artifact_with_its_counts(tmp_path, prefect_harness):
    """The shared publish step (build-tdi, mine-tdi) shows mix.png beside the card: the path and its numbers."""
    from prefect.artifacts import Artifact

    from tests.test_dataset_gate import gate_then_publish

    manifest = gate_then_publish(str(tmp_path / "ds"))
    data = Artifact.get("test-gate-dataset-mix").data
    assert f"`{tmp_path / 'ds' / 'mix.png'}`" in data
    for split, per_label in manifest["counts"].items():  # the class table: one row per split, its counts
        assert f"| {split} | " + " | ".join(str(n) for n in per_label.values()) + " |" in data
