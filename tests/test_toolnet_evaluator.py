"""ToolNet's LLM evaluator (tasks/toolnet/evaluator.py) against the local fake OpenAI server: canned answers
are exactly the scores of the dynamic update, an invalid answer is asked again and then the rule
scores the run (recorded), a rebuild sends no request, a 401 stops the build. No embedded model."""
from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import replace
from datetime import datetime

import numpy as np
import pytest

import tests.openai_server as openai_server
from schemas.docs import validation_errors
from schemas.toolset import Query, Tool, ToolSet
from tasks.toolnet.evaluator import SCHEMA_NAME, LLMEvaluator, distinct, evaluate_request, toolnet_evaluator
from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig
from tasks.llm.errors import LLMEndpointError, LLMStageFailed
from tasks.toolnet.prompts import EVALUATE
from tasks.toolsets.trajectories import Trajectories, Trajectory
from tasks.toolnet.transitions import (BY_FALLBACK, BY_LLM, BY_RULE, Evaluation, StreamRun, build_toolnet, rule_scores,
                               run_stream, stream_runs)
from tests.openai_server import FakeOpenAIServer
from warehouse.build import arrow_rows, check_rows, core_table

TOOLS = ["a", "b", "c", "d"]
TABLE = {"a": 3, "b": -1, "c": 2, "d": -3}  # the canned evaluator's score of each tool (the rule gives +-2)
DOCS = {t: {"name": f"Tool{t.upper()}", "description": f"Does {t} things.", "input_params": [], "output_params": []}
        for t in TOOLS}
CHAINS = [["a", "b", "c"], ["a", "b"], ["a", "c"], ["b", "c", "c"], ["d", "a"], ["a", "b", "c"], ["c", "d"]]
ALL_TEST = (0.0, 0.0, 1.0)  # every run updates the weights (Eq. 5 from nothing: each tool's row is itself / <end>)
_original_answer = openai_server.canned_answer


def valid(tools: list[str]) -> dict:
    return {"scores_of_tools": [{"tool_name": t, "score": TABLE[t], "reason": f"{t} helped"} for t in tools]}


BAD = {  # answers that break the schema of a run that called c then d
    "score 7": lambda tools: {"scores_of_tools": [{"tool_name": "c", "score": 7, "reason": "great"},
                                                  {"tool_name": "d", "score": 1, "reason": "ok"}]},
    "unknown tool": lambda tools: {"scores_of_tools": [{"tool_name": "c", "score": 1, "reason": "ok"},
                                                       {"tool_name": "zzz", "score": 1, "reason": "not called"}]},
    "duplicated tool": lambda tools: {"scores_of_tools": [{"tool_name": "c", "score": 1, "reason": "ok"},
                                                          {"tool_name": "c", "score": 2, "reason": "again"}]},
    "tool left out": lambda tools: {"scores_of_tools": [{"tool_name": "c", "score": 1, "reason": "ok"}]},
}


class Scripted:
    """The fake server's answer to the evaluator's requests, from the tools its prompt lists;
    other agents get the server's usual canned answers. Keeps every evaluator prompt."""

    def __init__(self, answer=None):
        self.answer = answer or (lambda tools, arrival: valid(tools))
        self.texts: list[str] = []
        self.arrivals: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, agent: str, user_text: str) -> dict:
        if agent != SCHEMA_NAME:
            return _original_answer(agent, user_text)
        tools = json.loads(re.search(r"in this order: (.*)$", user_text, re.M).group(1))
        with self.lock:
            self.texts.append(user_text)
            self.arrivals[user_text] += 1
            arrival = self.arrivals[user_text]
        return self.answer(tools, arrival)


@pytest.fixture()
def scripted(monkeypatch):
    def install(answer=None) -> Scripted:
        script = Scripted(answer)
        monkeypatch.setattr(openai_server, "canned_answer", script)
        return script

    return install


def _llm(server: FakeOpenAIServer, tmp_path, **overrides) -> StructuredLLM:
    return StructuredLLM(LLMConfig(**{"model": "fake", "base_url": server.base_url, "cache_dir": str(tmp_path / "cache"),
                                      "backoff_base_s": 0.01, "concurrency": 4, **overrides}))


def user_runs(chains=CHAINS, failed=("c", "a")) -> list[Trajectory]:
    runs = [Trajectory(f"r{n}", tuple(c), "runs.jsonl", n + 1, "user") for n, c in enumerate(chains)]
    return runs + [Trajectory("failed", tuple(failed), "runs.jsonl", len(chains) + 1, "user", success=False)]


def gold_runs(n: int = 30) -> list[Trajectory]:
    return [Trajectory(f"q{k}", tuple(CHAINS[k % len(CHAINS)]), "queries.jsonl", k + 1, "gold", True, f"q{k}")
            for k in range(n)]


def by_table(run: StreamRun, called) -> Evaluation:
    """The canned answers, scored by hand."""
    return Evaluation({t: TABLE[t] for t in distinct(called)}, BY_LLM)


# ---------------------------------------------------------------- the prompt and its schema
def test_the_request_carries_task_calls_docs_outcome_and_a_schema_for_exactly_the_called_tools():
    req = evaluate_request("q1", "Book a table for two", ["a", "c", "a"], DOCS, success=False)
    text = req.messages[1][1]
    assert "Book a table for two" in text and "the run failed" in text
    assert '1. "a" (ToolA): Does a things.\n2. "c" (ToolC): Does c things.\n3. "a" (ToolA)' in text
    assert 'in this order: ["a", "c"]' in text  # one score per tool, first-call order
    assert (req.prompt_version, req.schema_name) == (EVALUATE.version, SCHEMA_NAME)
    assert "(not recorded" in evaluate_request("r", None, ["a"], DOCS, True).messages[1][1]
    def answer(*entries):
        return {"scores_of_tools": [{"tool_name": t, "score": s, "reason": "r"} for t, s in entries]}

    assert validation_errors(answer(("a", -3), ("c", 3)), req.schema) == []
    for bad in [answer(("a", 7), ("c", 3)), answer(("a", -4), ("c", 3)), answer(("a", 1), ("d", 3)),  # out of range, not called
                answer(("a", 1), ("a", 2)), answer(("a", 1)), answer(("a", 1), ("c", 1), ("c", 1)),  # twice, left out
                answer(("c", 1), ("a", 1)), answer(("a", 1.5), ("c", 1))]:  # another order, not an integer
        assert validation_errors(bad, req.schema), bad


# ---------------------------------------------------------------- (a) canned answers are the scores
def test_canned_answers_are_exactly_the_scores_of_the_dynamic_update(tmp_path, scripted):
    scripted()
    runs = user_runs()
    with FakeOpenAIServer() as server:
        evaluator = LLMEvaluator(_llm(server, tmp_path), DOCS)
        built = build_toolnet(TOOLS, runs, {}, 0, (0.5, 0.0, 0.5), alpha=0.5, beta=0.5, evaluator=evaluator)
        sent = server.requests
    test = stream_runs(built.stream, {})
    assert len(test) >= 3 and sent == len({(r.called, r.chain is None) for r in test})  # sent first, once per distinct run
    # the same runs with the canned scores given by hand
    hand = run_stream(built.graph, [replace(r, scores=tuple((t, TABLE[t]) for t in distinct(r.called))) for r in test],
                      0.5, 0.5, record=True)
    assert built.result.scores == hand.scores and built.result.versions == hand.versions
    np.testing.assert_array_equal(built.result.final, hand.final)
    assert built.result.scores != run_stream(built.graph, test, 0.5, 0.5, record=True).scores  # not the rule's
    assert [by for *_, by, _ in built.result.evaluations] == [BY_LLM] * len(test)
    assert built.evaluator == f"llm:fake:{EVALUATE.version} (test stream: {len(test)} llm)"
    usage = built.evaluator_record["usage"]
    assert usage["requests_sent"] == sent and built.evaluator_record["test_fallbacks"] == []


def test_the_offline_agents_runs_are_scored_by_the_llm_in_the_sweep_and_the_test_stream(tmp_path, scripted):
    script = scripted()
    runs = gold_runs()
    tasks = {r.query_id: f"Task number {r.query_id}" for r in runs}
    with FakeOpenAIServer() as server:
        built = build_toolnet(TOOLS, runs, {}, 0, (0.6, 0.2, 0.2), evaluator=LLMEvaluator(_llm(server, tmp_path), DOCS, tasks))
    hand = build_toolnet(TOOLS, runs, {}, 0, (0.6, 0.2, 0.2), evaluator=by_table)
    assert built.chosen_on.startswith("validation") and built.sweep == hand.sweep
    assert (built.alpha, built.beta, built.result.scores) == (hand.alpha, hand.beta, hand.result.scores)
    np.testing.assert_array_equal(built.result.final, hand.result.final)
    asked = {re.search(r"Task number (q\d+)", t).group(1) for t in script.texts}
    assert asked == {r.query_id for r in runs if built.splits[r.key] in ("validation", "test")}


# ---------------------------------------------------------------- (b) invalid answers: asked again, then the rule
@pytest.mark.parametrize("bad", sorted(BAD))
def test_an_invalid_answer_is_asked_again_then_the_rule_scores_the_run_and_that_is_recorded(tmp_path, scripted, bad):
    from flows.build_graph import GraphConfig, lineage_rows, toolnet_rows

    scripted(lambda tools, arrival: BAD[bad](tools) if tools == ["c", "d"] else valid(tools))
    runs = user_runs()
    with FakeOpenAIServer() as server:
        evaluator = LLMEvaluator(_llm(server, tmp_path), DOCS)
        built = build_toolnet(TOOLS, runs, {}, 0, ALL_TEST, alpha=0.5, beta=0.5, evaluator=evaluator)
    ledger = [c.outcome for c in evaluator.llm.ledger if c.item_id == "r6"]  # r6 called c then d
    assert ledger == ["schema_invalid", "schema_invalid"]  # parse_attempts = 2
    [(n, by, detail)] = [(n, by, d) for n, run, by, d in built.result.evaluations if run == "r6"]
    assert by == BY_FALLBACK and detail.startswith("schema_invalid: scores_of_tools")
    assert [(t, d) for i, _, t, d, _ in built.result.scores if i == n] == list(rule_scores(["c", "d"], ["c", "d"]).items())
    others = [by for _, run, by, _ in built.result.evaluations if run != "r6"]
    assert others == [BY_LLM] * (len(runs) - 1)
    assert built.evaluator == f"llm:fake:{EVALUATE.version} (test stream: {len(runs) - 1} llm, 1 rule fallback)"
    record = built.evaluator_record
    assert record["test_stream"] == {BY_LLM: len(runs) - 1, BY_FALLBACK: 1}
    assert record["test_fallbacks"] == [{"iteration": n, "run_id": "r6", "reason": detail}]
    distinct_runs = len({(r.tools, r.success) for r in runs})  # r0 and r5 ask the same: one request
    assert record["requests"] == {BY_LLM: distinct_runs - 1, BY_FALLBACK: 1} and record["failures"] == {"schema_invalid": 1}
    # the warehouse rows say it: transition_builds.evaluator and the transition lineage's params
    toolset = ToolSet("tiny", [Tool(t, "g", DOCS[t]) for t in TOOLS])
    cfg = GraphConfig(split_fractions=ALL_TEST, evaluator="llm", evaluator_base_url="http://unused/v1")
    (tmp_path / "runs.jsonl").write_text("")
    trajectories = Trajectories(runs, [], [str(tmp_path / "runs.jsonl")])
    rows = toolnet_rows(toolset, trajectories, built, cfg)
    assert rows["transition_builds"][0]["evaluator"] == built.evaluator
    [lineage] = lineage_rows(toolset, None, {"transition"}, cfg, None, None, trajectories, built, datetime(2024, 1, 1))
    params = json.loads(lineage["params_json"])
    assert params["evaluator"]["test_fallbacks"][0]["run_id"] == "r6" and params["evaluator"]["model"] == "fake"
    for table, table_rows in (("transition_builds", rows["transition_builds"]), ("edge_lineage", [lineage])):
        check_rows(table, table_rows)  # the warehouse's columns, none added
        arrow_rows(core_table(table), table_rows)


def test_one_invalid_answer_then_a_valid_one_is_the_llms_score(tmp_path, scripted):
    scripted(lambda tools, arrival: BAD["score 7"](tools) if arrival == 1 and tools == ["c", "d"] else valid(tools))
    with FakeOpenAIServer() as server:
        evaluator = LLMEvaluator(_llm(server, tmp_path), DOCS)
        built = build_toolnet(TOOLS, user_runs(), {}, 0, ALL_TEST, alpha=0.5, beta=0.5, evaluator=evaluator)
    assert [c.outcome for c in evaluator.llm.ledger if c.item_id == "r6"] == ["schema_invalid", "ok"]
    assert {by for _, _, by, _ in built.result.evaluations} == {BY_LLM}
    assert [(t, d) for _, run, t, d, _ in built.result.scores if run == "r6"] == [("c", 2), ("d", -3)]


@pytest.mark.parametrize("runs", [user_runs, gold_runs], ids=["user runs, sent first", "benchmark tasks, one by one"])
def test_runs_in_a_row_without_a_valid_answer_stop_the_build(tmp_path, scripted, runs):
    scripted(lambda tools, arrival: {"scores_of_tools": []})
    with FakeOpenAIServer() as server:
        evaluator = LLMEvaluator(_llm(server, tmp_path, concurrency=1), DOCS, max_fallbacks_in_a_row=3)
        with pytest.raises(LLMStageFailed, match="3 runs in a row got no valid answer.*schema_invalid"):
            build_toolnet(TOOLS, runs(), {}, 0, ALL_TEST, alpha=0.5, beta=0.5, evaluator=evaluator)
        assert server.requests == 3 * 2  # three runs, each asked twice; then no more


# ---------------------------------------------------------------- through build-graph's config: cache and 401
def toolset() -> ToolSet:
    queries = [Query(f"q{k}", f"Task number q{k}", ()) for k in range(30)]
    return ToolSet("tiny", [Tool(t, "g", DOCS[t]) for t in TOOLS], [], queries)


def build(cfg, runs: list[Trajectory]):
    """build-graph's ``toolnet`` task (its evaluator call site) outside a flow run."""
    from prefect.logging import disable_run_logger

    from flows.build_graph import toolnet

    rng = np.random.default_rng(0)
    ts = toolset()
    with disable_run_logger():
        return toolnet.fn(ts, Trajectories(runs, [], ["x"]), rng.normal(size=(len(TOOLS), 8)),
                          rng.normal(size=(len(ts.queries), 8)), cfg)


def test_a_second_build_with_the_same_settings_sends_no_request(tmp_path, scripted):
    from flows.build_graph import GraphConfig

    scripted()
    runs = gold_runs() + user_runs()
    results = []
    for _ in range(2):
        with FakeOpenAIServer() as server:
            cfg = GraphConfig(split_fractions=(0.6, 0.2, 0.2), evaluator="llm", evaluator_base_url=server.base_url,
                              evaluator_model="fake", evaluator_cache_dir=str(tmp_path / "cache"))
            built = build(cfg, runs)
            results.append((server.requests, built))
    (first, a), (second, b) = results
    assert first > 0 and second == 0
    assert a.evaluator_record["usage"]["requests_sent"] == first and b.evaluator_record["usage"]["requests_sent"] == 0
    assert b.evaluator_record["usage"]["cache_hits"] == a.evaluator_record["usage"]["requests_sent"]
    assert (a.alpha, a.beta, a.result.scores, a.evaluator) == (b.alpha, b.beta, b.result.scores, b.evaluator)
    assert a.evaluator.startswith(f"llm:fake:{EVALUATE.version} (test stream: ") and BY_FALLBACK not in a.evaluator


@pytest.mark.parametrize("runs", [user_runs, gold_runs], ids=["user runs, sent first", "benchmark tasks, one by one"])
def test_a_401_stops_the_build_at_once_with_the_layers_error(tmp_path, scripted, monkeypatch, runs):
    from flows.build_graph import GraphConfig

    scripted()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-0123456789")
    with FakeOpenAIServer(api_key="sk-right-key-9876543210") as server:
        cfg = GraphConfig(split_fractions=(0.5, 0.0, 0.5), evaluator="llm", evaluator_base_url=server.base_url,
                          evaluator_model="fake", evaluator_concurrency=1, evaluator_cache_dir=str(tmp_path / "cache"))
        with pytest.raises(LLMEndpointError, match=r"HTTP 401 \(the API key was rejected\).*nothing was retried") as err:
            build(cfg, runs())
        assert server.requests == 0  # the preflight's GET /models is refused first: no chat request, no retry, no fallback
    assert "sk-wrong-key-0123456789" not in str(err.value)


# ---------------------------------------------------------------- the default and the settings
def test_the_rule_stays_the_default_and_is_recorded_as_before():
    built = build_toolnet(TOOLS, user_runs(), {}, 0, ALL_TEST, alpha=0.5, beta=0.5)
    assert built.evaluator == "rule" and built.evaluator_record["kind"] == "rule"
    assert {by for _, _, by, _ in built.result.evaluations} == {BY_RULE}
    with toolnet_evaluator("rule", DOCS) as evaluator:
        assert evaluator is None
    with pytest.raises(ValueError, match="rule, llm"), toolnet_evaluator("gpt", DOCS):
        pass


def test_graph_config_and_flags(monkeypatch, tmp_path):
    from flows.build_graph import GraphConfig, parse_args

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    base = ["--toolset", "x", "--no-discriminator"]
    assert parse_args(base).evaluator == "rule"
    cfg = parse_args([*base, "--evaluator", "llm", "--evaluator-base-url", "http://user:s3cret-key@gpu:8000/v1",
                      "--evaluator-model", "qwen", "--evaluator-concurrency", "4", "--evaluator-cache-dir", "c"])
    assert (cfg.evaluator, cfg.evaluator_model, cfg.evaluator_concurrency, cfg.evaluator_cache_dir) == ("llm", "qwen", 4, "c")
    assert cfg.evaluator_base_url == "http://gpu:8000/v1" and "s3cret" not in repr(cfg)  # the key is a SecretStr
    assert cfg.evaluator_base_url_credentials.get_secret_value() == "user:s3cret-key"
    assert parse_args([*base, "--evaluator", "llm", "--evaluator-base-url", "embedded"]).evaluator_base_url == "embedded"
    with pytest.raises(SystemExit):
        parse_args([*base, "--evaluator", "llm"])  # no endpoint anywhere
    with pytest.raises(ValueError, match="needs an endpoint"):
        GraphConfig(evaluator="llm")
    with pytest.raises(ValueError, match="rule, llm"):
        GraphConfig(evaluator="gpt")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env-endpoint/v1")
    assert parse_args([*base, "--evaluator", "llm"]).evaluator_base_url is None  # OPENAI_BASE_URL at build time
    # what is recorded names the endpoint without its credentials
    llm = StructuredLLM(LLMConfig(model="m", base_url="http://user:s3cret-key@gpu:8000/v1", cache_dir=str(tmp_path)))
    assert LLMEvaluator(llm, DOCS).info()["base_url"] == "http://gpu:8000/v1"
