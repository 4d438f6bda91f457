"""ToolNet's evaluator through the LLM layer: the paper's ``Evaluate`` function (Appendix A).

The rule evaluator (``tasks.toolnet.transitions.rule_scores``) is the default. With an endpoint configured
(``build-graph --evaluator llm``), :class:`LLMEvaluator` asks an OpenAI-compatible model, through
``tasks/llm/client.py`` (cached, retried, ledgered, secrets kept out of what is recorded), to score each
tool a run called with an integer in [-3, 3], given the task's text (a benchmark query; user runs
carry none), the calls in order with each tool's name and description, and whether the run
succeeded. The answer is ``{"scores_of_tools": [{"tool_name", "score", "reason"}]}``, validated
against a per-run schema (``tasks.agents.prompts.evaluate_schema``): one entry per tool the run called, in
call order, so a score for a tool the run did not call, a tool scored twice or left out, or a score
out of range is an invalid answer that the layer asks again (``LLMConfig.parse_attempts``).

A run whose answer still fails (invalid after every attempt, a request the server refuses, retries
exhausted) is scored by the rule evaluator, and that is recorded: ``Evaluation.by`` is
``"rule fallback"`` with the reason, so ``StreamResult.evaluations`` (and from there the
``transition_builds.evaluator`` text, the transition lineage's params and the build summary) say
which evaluator scored each run. What no rule should paper over stops the build instead: a wrong
endpoint, key or model (401/403/404: ``LLMEndpointError``, at the first answer), an endpoint that is
down (``LLMUnavailableError``), an embedded server that died, and ``max_fallbacks_in_a_row`` runs
in a row whose answers all failed (``LLMStageFailed``).

Which run is evaluated: a user run as it was recorded (its calls are known, so these are sent
first, ``concurrency`` at a time: :meth:`LLMEvaluator.prefetch`); a benchmark task as the offline
agent ran it on the current weights (``tasks.toolnet.transitions.agent_picks``), one request per iteration
since the calls depend on the weights. Identical requests are asked once per build (memo) and once
ever (the layer's cache): a rebuild with the same settings sends no request.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import SecretStr

from tasks.llm.client import StructuredLLM
from tasks.llm.config import EMBEDDED, EMBEDDED_CONCURRENCY, ENDPOINT_CONCURRENCY, LLMConfig
from tasks.llm.errors import LLMStageFailed
from tasks.llm.ledger import ledger_rows, usage_summary
from tasks.llm.preflight import preflight
from tasks.llm.structured import StructuredRequest, StructuredResult
from tasks.llm.prompt import schema_text
from tasks.toolnet.prompts import EVALUATE, SCORE_VALUES, evaluate_schema
from tasks.toolnet.transitions import BY_FALLBACK, BY_LLM, RULE_SCORE, Evaluation, StreamRun, rule_scores

EVALUATORS = ("rule", "llm")
AGENT = "toolnet_evaluate"  # the ledger's agent name
SCHEMA_NAME = "toolnet_evaluation"
NO_TASK = "(not recorded: judge from the tool calls and the outcome)"
MAX_DESCRIPTION_CHARS = 300  # of each tool's description in the prompt
MAX_TOKENS = 1024  # one short reason per tool
DEFAULT_MAX_FALLBACKS_IN_A_ROW = 10

log_ = logging.getLogger(__name__)


def distinct(called: Sequence[str]) -> list[str]:
    """The tools of a run, once each, in first-call order (one score per tool: notes, Gaps 3)."""
    return list(dict.fromkeys(called))


def run_succeeded(run: StreamRun, called: Sequence[str]) -> bool:
    """A user run: its ``success`` (a failed run has no chain). The offline agent's run of a
    benchmark task: every tool it picked was the gold call order's (teacher-forced) next tool."""
    if run.chain is None:
        return False
    return run.called is not None or tuple(called) == tuple(run.chain)


def describe_call(step: int, tool_id: str, doc: Mapping[str, Any] | None) -> str:
    doc = doc or {}
    name = str(doc.get("name") or "")
    description = " ".join(str(doc.get("description") or "").split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        description = description[: MAX_DESCRIPTION_CHARS - 3] + "..."
    label = json.dumps(tool_id, ensure_ascii=False)
    if name and name != tool_id:
        label += f" ({name})"
    return f"{step}. {label}" + (f": {description}" if description else "")


def evaluate_request(item_id: str, task: str | None, called: Sequence[str], docs: Mapping[str, Mapping[str, Any]],
                     success: bool) -> StructuredRequest:
    """ToolNet's ``Evaluate`` for one run: ``called`` in call order (repeats kept), ``docs`` tool id -> doc."""
    tools = distinct(called)
    schema = evaluate_schema(tools)
    outcome = ("the run succeeded: the agent reached a valid final answer" if success
               else "the run failed: the final answer is wrong or missing")
    return StructuredRequest(
        agent=AGENT,
        item_id=item_id,
        messages=EVALUATE.messages(
            task=" ".join((task or "").split()) or NO_TASK,
            calls="\n".join(describe_call(n, t, docs.get(t)) for n, t in enumerate(called, 1)),
            outcome=outcome,
            tools=json.dumps(tools, ensure_ascii=False),
            schema=schema_text(schema),
        ),
        schema_name=SCHEMA_NAME,
        schema=schema,
        prompt_version=EVALUATE.version,
    )


def scores_of(result: StructuredResult, tools: Sequence[str]) -> tuple[dict[str, int] | None, str]:
    """``(tool -> score, "")`` from a validated answer, or ``(None, why)``. The schema already
    demands one in-range score per tool of the run; this re-checks it (the cache holds answers
    validated against that schema, but a scored run must never carry another tool)."""
    if not result.ok or result.value is None:
        return None, f"{result.reason}: {result.detail}".strip(": ")
    entries = result.value.get("scores_of_tools") or []
    scores: dict[str, int] = {}
    for entry in entries:
        tool, score = entry.get("tool_name"), entry.get("score")
        if tool in scores or tool not in tools or isinstance(score, bool) or score not in SCORE_VALUES:
            return None, f"answer_mismatch: {entry!r}"[:300]
        scores[tool] = int(score)
    if set(scores) != set(tools):
        return None, f"answer_mismatch: scores for {sorted(scores)}, the run called {list(tools)}"[:300]
    return scores, ""


class LLMEvaluator:
    """An ``Evaluator`` for ``tasks.toolnet.transitions.run_stream`` / ``build_toolnet`` (module docstring).

    ``docs``: tool id -> API doc (name, description); ``tasks``: query id -> query text;
    ``magnitude``: the rule evaluator's score where it stands in; ``endpoint``: the base URL as
    recorded (no credentials); ``alive``: raises when the endpoint's process died (embedded server).
    """

    def __init__(self, llm: StructuredLLM, docs: Mapping[str, Mapping[str, Any]], tasks: Mapping[str, str] | None = None,
                 magnitude: int = RULE_SCORE, max_fallbacks_in_a_row: int = DEFAULT_MAX_FALLBACKS_IN_A_ROW,
                 endpoint: str | None = None, alive: Callable[[], None] = lambda: None,
                 log: Any = None):
        self.llm, self.docs, self.tasks = llm, docs, tasks or {}
        self.magnitude, self.max_fallbacks_in_a_row = magnitude, max_fallbacks_in_a_row
        self.endpoint = endpoint if endpoint is not None else llm.public_base_url()
        self.alive, self.log = alive, log or log_
        self._memo: dict[tuple, StructuredResult] = {}
        self.counts: Counter[str] = Counter()  # distinct requests by outcome: llm, rule fallback
        self.failures: Counter[str] = Counter()  # failed requests by reason
        self._in_a_row = 0

    def request(self, run: StreamRun, called: Sequence[str]) -> StructuredRequest:
        task = self.tasks.get(run.query_id) if run.query_id is not None else None
        return evaluate_request(run.run_id, task, called, self.docs, run_succeeded(run, called))

    # results ----------------------------------------------------------------------------------
    def _tally(self, req: StructuredRequest, result: StructuredResult) -> tuple[dict[str, int] | None, str]:
        """The scores of a new answer (or why there are none), counted and, when none, logged."""
        scores, why = scores_of(result, _tools_of(req))
        if scores is not None:
            self.counts[BY_LLM] += 1
        else:
            self.counts[BY_FALLBACK] += 1
            self.failures[why.split(":", 1)[0]] += 1
            self.log.warning("ToolNet evaluator: run %s: no valid answer (%s); the rule evaluator scores it",
                             req.item_id, why[:300])
        return scores, why

    def _guard(self, ok: bool, why: str) -> None:
        """After each new answer: raise when the embedded server died, or when
        ``max_fallbacks_in_a_row`` new answers in a row were no valid answer."""
        if ok:
            self._in_a_row = 0
            return
        self.alive()  # a dead embedded server is an error, not a rule fallback for every run
        self._in_a_row += 1
        if self.max_fallbacks_in_a_row and self._in_a_row >= self.max_fallbacks_in_a_row:
            raise LLMStageFailed(
                f"ToolNet LLM evaluator: {self._in_a_row} runs in a row got no valid answer from model "
                f"{self.llm.cfg.model!r} at {self.endpoint} (failures by reason {dict(self.failures) or why[:40]}; "
                f"last: {why[:300]}); stopping rather than scoring every run with the rule evaluator. Check the "
                "endpoint and the model, or build with --evaluator rule")

    def prefetch(self, runs: Sequence[StreamRun]) -> None:
        """Ask, ``concurrency`` at a time, for the runs whose calls are known (user runs without
        given scores); the streams then find their answers here."""
        todo: dict[tuple, StructuredRequest] = {}
        for run in runs:
            if run.called is not None and not run.scores:
                req = self.request(run, run.called)
                if req.messages not in self._memo:
                    todo.setdefault(req.messages, req)
        if not todo:
            return
        requests = list(todo.values())

        def done(result: StructuredResult) -> None:  # as answers arrive: stop early, not after every request
            self._guard(result.ok, f"{result.reason}: {result.detail}")

        results = self.llm.run(requests, on_done=done)  # LLMEndpointError / LLMUnavailableError end the build here
        for req, result in zip(requests, results):
            self._memo[req.messages] = result
            self._tally(req, result)

    def __call__(self, run: StreamRun, called: Sequence[str]) -> Evaluation:
        req = self.request(run, called)
        result = self._memo.get(req.messages)
        if result is None:
            [result] = self.llm.run([req])
            self._memo[req.messages] = result
            scores, why = self._tally(req, result)
            self._guard(scores is not None, why)
        else:
            scores, why = scores_of(result, _tools_of(req))
        if scores is not None:
            return Evaluation(scores, BY_LLM)
        return Evaluation(rule_scores(called, run.gold, self.magnitude), BY_FALLBACK, why[:300])

    def info(self) -> dict[str, Any]:
        """What ``transition_builds.evaluator``, the lineage and the summary record."""
        return {
            "kind": BY_LLM, "model": self.llm.cfg.model, "prompt_version": EVALUATE.version, "base_url": self.endpoint,
            "fallback": "rule", "rule_score": self.magnitude, "parse_attempts": self.llm.cfg.parse_attempts,
            "requests": dict(self.counts), "failures": dict(self.failures),
            "usage": usage_summary(ledger_rows(self.llm.ledger)),
        }


def _tools_of(req: StructuredRequest) -> list[str]:
    """The tools a request asks scores for (the ``const`` of each ``prefixItems`` entry)."""
    return [e["properties"]["tool_name"]["const"] for e in req.schema["properties"]["scores_of_tools"]["prefixItems"]]


def endpoint_problem(base_url: str | None) -> str | None:
    """Why the LLM evaluator has no endpoint with this ``base_url`` (None: it has one)."""
    if base_url or os.environ.get("OPENAI_BASE_URL"):
        return None
    return ("the LLM evaluator needs an endpoint: pass --evaluator-base-url URL (OpenAI-compatible) or "
            f"--evaluator-base-url {EMBEDDED} (the packaged local model), or set OPENAI_BASE_URL; "
            "or build with --evaluator rule")


def evaluator_llm_config(model: str | None, base_url: str | None, concurrency: int | None, cache_dir: str,
                         base_url_credentials: SecretStr | str | None = None) -> LLMConfig:
    """The LLM layer's config of the evaluator: ``base_url`` an OpenAI-compatible endpoint (None:
    ``OPENAI_BASE_URL``; the key comes from ``OPENAI_API_KEY``) or ``embedded`` (the config's base
    URL is then None until the server runs); ``model`` None: the packaged embedded model;
    ``concurrency`` None: 1 embedded, 16 otherwise."""
    from models.embedded_llm.catalog import DEFAULT_MODEL

    embedded = base_url == EMBEDDED
    if problem := endpoint_problem(base_url):
        raise ValueError(problem)
    return LLMConfig(model=model or DEFAULT_MODEL, base_url=None if embedded else base_url,
                     base_url_credentials=None if embedded else base_url_credentials,
                     concurrency=concurrency or (EMBEDDED_CONCURRENCY if embedded else ENDPOINT_CONCURRENCY), cache_dir=cache_dir, max_tokens=MAX_TOKENS)


@contextlib.contextmanager
def toolnet_evaluator(kind: str, docs: Mapping[str, Mapping[str, Any]], tasks: Mapping[str, str] | None = None,
                      magnitude: int = RULE_SCORE, *, model: str | None = None, base_url: str | None = None,
                      base_url_credentials: SecretStr | str | None = None, concurrency: int | None = None,
                      cache_dir: str = "artifacts/llm-cache", log: Any = None) -> Iterator[LLMEvaluator | None]:
    """The evaluator of one build, for the ``with`` block: None for ``rule`` (``build_toolnet``'s
    default); for ``llm`` an :class:`LLMEvaluator` (settings: :func:`evaluator_llm_config`), with
    the embedded llama.cpp server running for the block when ``base_url`` is ``embedded``."""
    if kind not in EVALUATORS:
        raise ValueError(f"evaluator must be one of {', '.join(EVALUATORS)}, not {kind!r}")
    if kind == "rule":
        yield None
        return
    llm = evaluator_llm_config(model, base_url, concurrency, cache_dir, base_url_credentials)
    if base_url != EMBEDDED:
        preflight(llm)  # an endpoint that cannot be reached: one clear error, not minutes of retries
        yield LLMEvaluator(StructuredLLM(llm), docs, tasks, magnitude, log=log)
        return
    from models.embedded_llm.server import EmbeddedLLMServer

    with EmbeddedLLMServer(model=llm.model) as server:
        (log or log_).info("ToolNet evaluator: embedded LLM %s ready at %s", llm.model, server.base_url)
        yield LLMEvaluator(StructuredLLM(replace(llm, base_url=server.base_url)), docs, tasks, magnitude,
                           endpoint=EMBEDDED, alive=server.raise_if_exited, log=log)
