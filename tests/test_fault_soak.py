"""A small fault soak (issue 12): the whole build-tdi flow against a fake server serving a seeded
mix of 429s, 500s, HTML pages with status 200, truncated JSON, stalls past the timeout and
connections dropped (mid-response, or before any byte of it); then the books, the ledger, a rerun and
the shards are checked
(bench/bench_fault_soak.py is the 10^4-request version, with the figures in bench/RESULTS.md)."""
from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from bench.bench_fault_soak import FAULT_OUTCOME, MIX, SoakSettings, soak
from tests.openai_server import FakeOpenAIServer, FaultPlan
from tests.test_llm import _llm, _requests


def test_a_fault_soak_balances_the_books_and_the_ledger_and_a_rerun_sends_only_what_was_unanswered(tmp_path, prefect_harness):
    # A healthy answer takes milliseconds here: a 1 s timeout (the bench's is 2 s) keeps the stalls short.
    s = SoakSettings(records=100, concurrency=8, chunk_size=25, timeout_s=1.0, stall_s=1.5, seed=4, own_process=False)
    r = soak(tmp_path, s, log=lambda line: None)
    failed = [f"{name}: {detail}" for name, ok, detail in r["checks"] if not ok]
    assert not failed, "\n".join(failed)

    # the same figures, as exact equalities
    b1, srv1 = r["books1"], r["server1"]
    assert b1["read"] == b1["accepted"] + b1["rejected"] == 100 and b1["unexplained"] == 0
    assert b1["sent"] == srv1["requests"] and 300 <= srv1["requests"] <= 600
    assert set(srv1["faults"]) <= set(MIX) and len(srv1["faults"]) >= 4  # most kinds met at this size
    served = Counter()
    for fault, n in srv1["faults"].items():
        served[FAULT_OUTCOME[fault]] += n
    for outcome, n in served.items():
        if outcome != "timeout":  # a stall is a timeout; an answer slowed past the timeout by the machine would be one too
            assert b1["ledger"][outcome] == n, outcome
    assert b1["ledger"]["ok"] + sum(b1["ledger"].get(o, 0) for o in set(FAULT_OUTCOME.values())) == srv1["requests"]
    rr = r["rerun"]
    assert r["server2"]["requests"] == rr["sent"] == rr["asked_again"] + rr["first_asked"]
    assert r["books2"]["sent"] == srv1["requests"] + r["server2"]["requests"]
    assert r["books2"]["read"] == r["books2"]["accepted"] + r["books2"]["rejected"] == 100
    assert r["pairs"]["differ"] == 0 and r["pairs"]["extra"] == 0 and r["pairs"]["common"] > 0


def test_a_fault_mix_is_drawn_per_request_so_any_concurrency_meets_the_same_faults(tmp_path):
    mix = {"429": 0.15, "500": 0.1, "html_page": 0.1, "truncated": 0.1, "drop": 0.05, "reset": 0.05}
    seen = []
    for concurrency in (1, 8):
        with FakeOpenAIServer(faults=FaultPlan(mix=mix, seed=5, retry_after_s=0.01)) as server:
            llm, _ = _llm(server, tmp_path / str(concurrency), concurrency=concurrency, max_retries=3)
            asyncio.run(llm.run_many(_requests(60)))
            assert sum(c.outcome != "cache_hit" for c in llm.ledger) == server.requests
            seen.append((sorted((c.item_id, c.attempt, c.outcome) for c in llm.ledger), server.faults_served()))
    assert seen[0] == seen[1]
    assert set(seen[0][1]) == set(mix)  # every kind met
    with pytest.raises(ValueError, match="fault mix"):
        FakeOpenAIServer(faults=FaultPlan(mix={"429": 0.7, "500": 0.5}))
