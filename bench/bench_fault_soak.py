"""A fault soak (issue 12): a whole build-tdi run against a fake OpenAI server that serves a seeded
random mix of faults, then the books, the ledger, a rerun and the shards are checked.

    .venv/bin/python -m bench.bench_fault_soak [--records 2500 --concurrency 32 --chunk-size 250] [--write-results]

Synthetic distinct CodeSearchNet records (``bench.bench_build_tdi_scale.write_records``) go through
the real flow (``flows.build_tdi``, sequential chunks, Prefect test API) against
``tests/openai_server.py`` in its own process, serving ``FaultPlan.mix`` (:data:`MIX`): 10% 429 with
Retry-After, 5% 500, 5% an HTML page with status 200, 5% truncated JSON (finish_reason "length"),
2% stalls past the client's timeout, 1% connections dropped (0.5% mid-response, 0.5% before any byte of the
response). The draw is keyed by
request body and occurrence, so the run is reproducible whatever the arrival order. Three runs:

1. **faulty**: fresh cache, the faulty server;
2. **rerun**: the same command (same dataset folder, same cache) against a fault-free server, as
   after the endpoint recovered;
3. **reference**: the same records, a fresh cache and dataset, a fault-free server.

Checks (each PASS/FAIL; :func:`soak` returns them, ``tests/test_fault_soak.py`` runs a small soak):

1. books: every record read ends accepted or rejected with a reason (accepted + rejected = read);
2. ledger: rows of requests sent (``llm_calls`` rows whose outcome is not ``cache_hit``) = the
   server's count of chat requests, in total and fault by fault (429 = http_429, 500 = http_5xx,
   HTML 200 = bad_response, truncated = truncated, drop + reset = connection, stall <= timeout); after
   the rerun the books hold both runs' rows, and equal both servers' counts;
3. rerun: a logical request is (agent, record); it was *answered* in run 1 when run 1 has an ``ok``
   ledger row for it (its answer validated and was cached). The rerun redoes the chunks with a
   transient failure (``tasks.agents.chunks.finished``); it must send exactly the logical requests of
   those chunks that were not answered in run 1: the ones that failed there (asked again) and the
   ones never reached (downstream of a failure, first asked now), each once (the server is
   healthy), and take every answered one from the cache. Server count on the rerun = that number;
4. shards: the accepted pairs of the faulty run against those of the reference run, by record: a
   pair in both must be identical (validated rows, and the shards' two dependency rows without the
   split column, which a seeded permutation of the run's set of pairs draws); the pairs missing
   from the faulty run are listed by their rejection reason (faults, expected); and the rerun's
   shards are compared with the reference's byte for byte (equal when the rerun left no record
   rejected for a fault).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flows.build_tdi import JOURNALS
from tasks.agents.chunks import CHUNKS
from tasks.llm.cache import ResponseCache
from tests.openai_server import FakeOpenAIServer, FaultPlan

# 1% connection drops: half mid-response (the head and half the body), half before any byte of the response
MIX = {"429": 0.10, "500": 0.05, "html_page": 0.05, "truncated": 0.05, "stall": 0.02, "drop": 0.005, "reset": 0.005}
# The server's fault name -> the ledger outcome it must produce (each fault is one request).
FAULT_OUTCOME = {"429": "http_429", "500": "http_5xx", "html_page": "bad_response", "truncated": "truncated",
                 "stall": "timeout", "drop": "connection", "reset": "connection"}
FAULT_LABEL = {"429": "429 + Retry-After", "500": "500", "html_page": "HTML page, status 200", "truncated": "truncated JSON",
               "stall": "stall past the timeout", "drop": "connection dropped mid-response",
               "reset": "connection closed before any response byte"}


@dataclass(frozen=True)
class SoakSettings:
    records: int = 2500
    concurrency: int = 32
    chunk_size: int = 250
    timeout_s: float = 2.0  # the client's: an answer slowed by a busy machine must not reach it; a stall lasts longer
    stall_s: float = 2.5
    retry_after_s: float = 0.02
    max_retries: int = 2  # transport retries per request: a few requests run out of them
    backoff_base_s: float = 0.02
    seed: int = 12
    own_process: bool = True  # the server in its own process (the bench); in this one (the test)

    def plan(self) -> FaultPlan:
        return FaultPlan(mix=MIX, seed=self.seed, stall_s=self.stall_s, retry_after_s=self.retry_after_s)


# -- the fake server, in its own process or in this one ---------------------------------------
def _snapshot(server: FakeOpenAIServer) -> dict[str, Any]:
    with server.state.lock:
        bodies = [n for k, n in server.state.counts.items() if k.startswith("body:")]
    return {"requests": server.requests, "faults": server.faults_served(), "distinct_bodies": len(bodies),
            "repeated_bodies": sum(bodies) - len(bodies)}


def _serve(plan: FaultPlan, conn: Any) -> None:
    with FakeOpenAIServer(faults=plan) as server:
        conn.send(server.base_url)
        while conn.recv() != "stop":
            conn.send(_snapshot(server))


class ServerHandle:
    def __init__(self, base_url: str, snapshot: Any):
        self.base_url, self._snapshot = base_url, snapshot

    def counts(self) -> dict[str, Any]:
        return self._snapshot()


@contextlib.contextmanager
def fake_server(plan: FaultPlan, own_process: bool) -> Iterator[ServerHandle]:
    if not own_process:
        with FakeOpenAIServer(faults=plan) as server:
            yield ServerHandle(server.base_url, lambda: _snapshot(server))
        return
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(plan, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(120):
            raise RuntimeError("the fake server process did not start")
        url = parent.recv()

        def snapshot() -> dict[str, Any]:
            parent.send("counts")
            return parent.recv()

        yield ServerHandle(url, snapshot)
        parent.send("stop")
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            proc.kill()


# -- one build-tdi run --------------------------------------------------------------------------
def build(records: Path, base_url: str, work: Path, dataset: str, cache: str, s: SoakSettings) -> tuple[dict[str, Any], float]:
    from flows.build_tdi import build_tdi, config_from_args

    cfg = config_from_args([
        "--source", "codesearchnet", "--source-path", str(records), "--partitions", "train", "--sample-seed", "-1", "--limit", "-1",
        "--base-url", base_url, "--model", "fake", "--concurrency", str(s.concurrency), "--chunk-size", str(s.chunk_size),
        "--timeout-s", str(s.timeout_s), "--cache-dir", str(work / cache), "--output-root", str(work / "out"), "--dataset", dataset,
        "--per-class", str(10 * s.records), "--rows-per-shard", str(max(100, s.records)),
    ])  # per-class above what can validate: every accepted pair goes into the shards
    cfg = replace(cfg, llm=replace(cfg.llm, max_retries=s.max_retries, backoff_base_s=s.backoff_base_s, backoff_max_s=1.0))
    t0 = time.perf_counter()
    manifest = build_tdi(cfg)
    return manifest, time.perf_counter() - t0


# -- what a run left -------------------------------------------------------------------------------
def books(out: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect(str(out / "records.duckdb"), read_only=True)
    try:
        q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
        [(read,)] = q("SELECT records_read FROM run_info")
        [(accepted, rejected, distinct, unexplained)] = q(
            "SELECT count(*) FILTER (WHERE status = 'accepted'), count(*) FILTER (WHERE status = 'rejected'), count(DISTINCT record_id), "
            "count(*) FILTER (WHERE status = 'rejected' AND coalesce(reason, '') = '') FROM record_outcomes")
        return {
            "read": read, "accepted": accepted, "rejected": rejected, "distinct": distinct, "unexplained": unexplained,
            "by_reason": dict(q("SELECT reason, count(*) FROM record_outcomes WHERE status = 'rejected' GROUP BY ALL ORDER BY 2 DESC, 1")),
            "outcome_of": dict(q("SELECT record_id, reason FROM record_outcomes WHERE status = 'rejected'")),
            "ledger": dict(q("SELECT outcome, count(*) FROM llm_calls GROUP BY ALL")),
            "sent": q("SELECT count(*) FROM llm_calls WHERE outcome <> 'cache_hit'")[0][0],
        }
    finally:
        con.close()


def journal_rows(paths: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def journals(out: Path) -> list[Path]:
    return sorted((out / CHUNKS).glob(f"chunk-*/{JOURNALS}/*.jsonl"))


def chunk_state(out: Path) -> dict[str, dict[str, Any]]:
    """Per chunk: its marker's transient failures and the record ids it holds."""
    import polars as pl

    state = {}
    for folder in sorted((out / CHUNKS).glob("chunk-*")):
        marker = json.loads((folder / "done.json").read_text())
        ids = set(pl.read_parquet(folder / "outcomes.parquet")["record_id"]) | set(pl.read_parquet(folder / "validated.parquet")["record_id"])
        state[folder.name] = {"transient": marker["transient_failures"], "records": ids}
    return state


def _sha(row: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()


def pairs(out: Path) -> dict[str, str]:
    """record id -> sha256 of its validated pair (every chunk's validated.parquet)."""
    import polars as pl

    df = pl.read_parquet(str(out / CHUNKS / "chunk-*" / "validated.parquet"))
    return {r["record_id"]: _sha(r) for r in df.iter_rows(named=True)}


def shard_rows(out: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """(record id, label) -> (sha256 of the row without its split, sha256 of the whole row), for the
    two dependency classes (a validated pair and its swap); 'no dependency' rows are random pairings."""
    import polars as pl

    from schemas.tdi import LABEL_NO_DEPENDENCY

    df = pl.read_parquet(str(out / "shards" / "*.parquet"))
    found = {}
    for r in df.filter(pl.col("label") != LABEL_NO_DEPENDENCY).iter_rows(named=True):
        record = r["source_a"].rpartition("#")[0]
        key = (record, r["label"])
        assert key not in found, f"two rows for {key}"
        found[key] = (_sha({k: v for k, v in r.items() if k != "split"}), _sha(r))
    return found


def cache_keys(cache: Path) -> set[str]:
    con = sqlite3.connect(cache / ResponseCache.DB_NAME)
    try:
        return {k for (k,) in con.execute("SELECT key FROM responses")}
    finally:
        con.close()


# -- the soak ---------------------------------------------------------------------------------------
def soak(work: Path, s: SoakSettings, log: Any = print) -> dict[str, Any]:
    """Run the three builds in ``work`` (a Prefect API must be set up) and check them."""
    from bench.bench_build_tdi_scale import write_records

    records = work / "records"
    write_records(records, s.records)
    checks: list[tuple[str, bool, str]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append((name, bool(ok), detail))
        log(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    # 1. the faulty run
    out = work / "out" / "soak"
    with fake_server(s.plan(), s.own_process) as faulty:
        manifest1, wall1 = build(records, faulty.base_url, work, "soak", "cache", s)
        server1 = faulty.counts()
    log(f"faulty run: {wall1:.1f} s, server {server1}")
    books1 = books(out)
    journals1 = set(journals(out))
    run1 = journal_rows(sorted(journals1))
    chunks1 = chunk_state(out)
    keys1 = cache_keys(work / "cache")
    pairs1, shards1 = pairs(out), shard_rows(out)

    # check 1: the books
    b = books1
    check("books balance", b["accepted"] + b["rejected"] == b["read"] == b["distinct"] == s.records and b["unexplained"] == 0,
          f"read {b['read']:,} = accepted {b['accepted']:,} + rejected {b['rejected']:,}; {b['distinct']:,} distinct records with an "
          f"outcome; {b['unexplained']} rejected without a reason")

    # check 2: the ledger against the server, in total and fault by fault
    faults = server1["faults"]
    by_outcome: Counter = Counter()
    for f, n in faults.items():
        by_outcome[FAULT_OUTCOME[f]] += n
    per_kind = {o: (n, b["ledger"].get(o, 0)) for o, n in sorted(by_outcome.items())}
    kinds_ok = all(led == n if o != "timeout" else led >= n for o, (n, led) in per_kind.items())
    unexpected = set(b["ledger"]) - set(FAULT_OUTCOME.values()) - {"ok"}
    check("ledger = server", b["sent"] == server1["requests"] == len(run1) and kinds_ok and not unexpected,
          f"{b['sent']:,} ledger rows of requests sent, {server1['requests']:,} chat requests received; faults served / ledger rows: "
          + ", ".join(f"{o} {n}/{led}" for o, (n, led) in per_kind.items()) + (f"; unexpected outcomes {unexpected}" if unexpected else ""))

    # 3. the rerun, same command and cache, against a healthy server; 4. the reference run
    with fake_server(FaultPlan(), s.own_process) as healthy:
        manifest2, wall2 = build(records, healthy.base_url, work, "soak", "cache", s)
        server2 = healthy.counts()
        manifest3, wall3 = build(records, healthy.base_url, work, "reference", "cache-reference", s)
        server3 = healthy.counts()
    log(f"rerun: {wall2:.1f} s, server {server2}; reference run: {wall3:.1f} s, server {server3['requests'] - server2['requests']} requests")
    books2 = books(out)
    rerun = journal_rows([p for p in journals(out) if p not in journals1])

    answered1 = {(r["agent"], r["item_id"]) for r in run1 if r["outcome"] in ("ok", "cache_hit")}
    tried1 = {(r["agent"], r["item_id"]) for r in run1}
    redone = {c for c, st in chunks1.items() if st["transient"]}
    redone_records = set().union(*(chunks1[c]["records"] for c in redone)) if redone else set()
    failed1 = {q for q in tried1 - answered1 if q[1] in redone_records}
    failed1_kept = {q for q in tried1 - answered1 if q[1] not in redone_records}
    sent2 = [r for r in rerun if r["outcome"] != "cache_hit"]
    sent2_q = {(r["agent"], r["item_id"]) for r in sent2}
    hits2 = [r for r in rerun if r["outcome"] == "cache_hit"]
    asked_again, first_asked = sent2_q & failed1, sent2_q - tried1
    expected_hits = {q for q in answered1 if q[1] in redone_records}
    check("rerun sends only what was never answered",
          server2["requests"] == len(sent2) == len(sent2_q) == len(asked_again) + len(first_asked)
          and asked_again == failed1 and not sent2_q & answered1 and not {r["cache_key"] for r in sent2} & keys1
          and {(r["agent"], r["item_id"]) for r in hits2} == expected_hits and {r["cache_key"] for r in hits2} <= keys1
          and {r["outcome"] for r in sent2} <= {"ok"},
          f"{len(redone)} of {len(chunks1)} chunks redone (a transient failure in run 1); the rerun's server received "
          f"{server2['requests']:,} requests = {len(sent2):,} ledger rows = {len(asked_again):,} failed in run 1 and asked again + "
          f"{len(first_asked):,} never reached in run 1 (downstream of a failure); none of them answered in run 1, none of their "
          f"keys in run 1's cache; {len(hits2):,} cache hits = the {len(expected_hits):,} answered requests of the redone chunks; "
          f"{len(failed1_kept)} failed requests in chunks kept as finished (non-transient failures) not asked again")
    check("ledger = server after the rerun", books2["sent"] == server1["requests"] + server2["requests"]
          and books2["accepted"] + books2["rejected"] == books2["read"] == books2["distinct"] == s.records and books2["unexplained"] == 0,
          f"the books after the rerun hold both runs' rows: {books2['sent']:,} sent = {server1['requests']:,} + {server2['requests']:,}; "
          f"books balance: read {books2['read']:,} = accepted {books2['accepted']:,} + rejected {books2['rejected']:,}")

    # 4. the faulty run's pairs and shards against the reference's
    ref = work / "out" / "reference"
    pairs3, shards3 = pairs(ref), shard_rows(ref)
    common = pairs1.keys() & pairs3.keys()
    differ = sorted(r for r in common if pairs1[r] != pairs3[r])
    missing = pairs3.keys() - pairs1.keys()
    extra = pairs1.keys() - pairs3.keys()
    missing_by_reason = Counter(b["outcome_of"].get(r, "?") for r in missing)
    fault_reasons = all(reason.partition("_")[2] in ("llm_http_429", "llm_http_5xx", "llm_bad_response", "llm_timeout",
                                                     "llm_connection", "truncated") for reason in missing_by_reason)
    common_rows = shards1.keys() & shards3.keys()
    rows_differ = sum(shards1[k][0] != shards3[k][0] for k in common_rows)
    split_only = sum(shards1[k][0] == shards3[k][0] and shards1[k][1] != shards3[k][1] for k in common_rows)
    rows_missing = len(shards3.keys() - shards1.keys())
    rows_extra = len(shards1.keys() - shards3.keys())
    records_missing = {rec for rec, _ in shards3.keys() - shards1.keys()}
    check("shards match the fault-free run where answers matched",
          not differ and not extra and fault_reasons and rows_differ == 0 and rows_extra == 0 and records_missing <= missing,
          f"{len(common):,} accepted pairs in both runs, {len(differ)} differ; {len(missing):,} only in the fault-free run, rejected in "
          f"the faulty one by {dict(missing_by_reason.most_common())} (faults: expected); {len(extra)} only in the faulty run. "
          f"Shard rows of the two dependency classes: {len(common_rows):,} in both, {rows_differ} differ (without the split column), "
          f"{split_only:,} have another split (a seeded permutation of each run's set of pairs), {rows_missing:,} missing "
          f"(of the missing pairs), {rows_extra} extra")
    shas = lambda m: [x["sha256"] for x in m["shards"]]  # noqa: E731
    leftover = {r: n for r, n in books2["by_reason"].items() if r.split("_", 1)[-1] in ("truncated",) or "_llm_" in r}
    same = shas(manifest2) == shas(manifest3)
    check("rerun's dataset = the fault-free run's", same or bool(leftover),
          ("shards byte-identical (sha256)" if same else f"shards differ: {leftover} records still rejected for a fault "
           "in chunks kept as finished"))

    return {
        "settings": s, "checks": checks, "server1": server1, "server2": server2, "server3_requests": server3["requests"] - server2["requests"],
        "wall": (wall1, wall2, wall3), "books1": {k: v for k, v in books1.items() if k != "outcome_of"},
        "books2": {k: v for k, v in books2.items() if k != "outcome_of"}, "rows": (manifest1["total_rows"], manifest2["total_rows"], manifest3["total_rows"]),
        "rerun": {"sent": len(sent2), "asked_again": len(asked_again), "first_asked": len(first_asked), "hits": len(hits2),
                  "redone": len(redone), "chunks": len(chunks1), "kept_failed": len(failed1_kept)},
        "pairs": {"common": len(common), "differ": len(differ), "missing": len(missing), "extra": len(extra),
                  "missing_by_reason": dict(missing_by_reason.most_common()), "split_only": split_only, "rows_common": len(common_rows)},
        "same_dataset": same,
    }


# -- command line ------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=SoakSettings.records)
    p.add_argument("--concurrency", type=int, default=SoakSettings.concurrency)
    p.add_argument("--chunk-size", type=int, default=SoakSettings.chunk_size)
    p.add_argument("--seed", type=int, default=SoakSettings.seed)
    p.add_argument("--write-results", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # its heartbeat meets a locked test database: noise
    from prefect.testing.utilities import prefect_test_harness

    s = SoakSettings(records=a.records, concurrency=a.concurrency, chunk_size=a.chunk_size, seed=a.seed)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-fault-soak-") as tmp, prefect_test_harness(server_startup_timeout=180):
        r = soak(Path(tmp), s)
    load_after = os.getloadavg()[0]
    failed = [name for name, ok, _ in r["checks"] if not ok]
    print("ALL CHECKS PASS" if not failed else f"FAILED: {failed}")
    if a.write_results:
        write_results(a, r, load_before, load_after)
    if failed:
        raise SystemExit(1)


def write_results(a: argparse.Namespace, r: dict[str, Any], load_before: float, load_after: float) -> None:
    from bench.results import write_section

    s, srv1, b1 = r["settings"], r["server1"], r["books1"]
    faults = srv1["faults"]
    shared = Counter(FAULT_OUTCOME.values())

    def ledger_cell(f: str) -> str:
        outcome = FAULT_OUTCOME[f]
        others = " + ".join(g for g in MIX if FAULT_OUTCOME[g] == outcome)
        return f"`{outcome}` {b1['ledger'].get(outcome, 0):,}" + (f" ({others})" if shared[outcome] > 1 else "")

    fault_rows = "\n".join(f"| {FAULT_LABEL[f]} | {MIX[f]:.1%} | {faults.get(f, 0):,} | {faults.get(f, 0) / srv1['requests']:.1%} | "
                           f"{ledger_cell(f)} |" for f in MIX)
    total_faults = sum(faults.values())
    reasons = ", ".join(f"`{k}` {v:,}" for k, v in b1["by_reason"].items())
    rr, pp = r["rerun"], r["pairs"]
    checks = "\n".join(f"- **{'PASS' if ok else 'FAIL'}** {name}: {detail}" for name, ok, detail in r["checks"])
    w1, w2, w3 = r["wall"]
    write_section("Fault soak (build-tdi)", f"""Command: `.venv/bin/python -m bench.bench_fault_soak --records {s.records} --concurrency {s.concurrency} --chunk-size {s.chunk_size} --seed {s.seed} --write-results`
Machine: {platform.machine()}, CPU only, {os.cpu_count()} cores shared with other jobs (1-min load average {load_before:.1f} before,
{load_after:.1f} after). {s.records:,} synthetic distinct CodeSearchNet records through the whole build-tdi flow (sequential chunks
of {s.chunk_size}, {s.concurrency} requests in flight, client timeout {s.timeout_s:g} s, {s.max_retries} transport retries with
{s.backoff_base_s:g} s backoff, 2 parse attempts) against tests/openai_server.py in its own process serving a seeded fault mix
(`FaultPlan.mix`, seed {s.seed}: drawn per request body and occurrence, so the run is the same at any arrival order; Retry-After
{s.retry_after_s:g} s, stalls of {s.stall_s:g} s). Then the same command again (same dataset folder and cache) against a fault-free
server, and a reference run (fresh cache and dataset) against it.

| fault | mix | served | share of requests | ledger outcome (rows) |
|---|---|---|---|---|
{fault_rows}
| **all** | {sum(MIX.values()):.1%} | **{total_faults:,}** | {total_faults / srv1['requests']:.1%} | |

- **Faulty run**: {srv1['requests']:,} chat requests served ({srv1['distinct_bodies']:,} distinct bodies, {srv1['repeated_bodies']:,}
  repeats: retries and re-asks), {w1:.0f} s wall. Records: read {b1['read']:,}, accepted {b1['accepted']:,}, rejected {b1['rejected']:,}
  by reason: {reasons}. Ledger: {b1['sent']:,} rows of requests sent (server: {srv1['requests']:,}). Rows: {r['rows'][0]:,}.
- **Rerun** (healthy server): {r['server2']['requests']:,} requests = {rr['asked_again']:,} that failed in the faulty run + {rr['first_asked']:,}
  never reached there; {rr['hits']:,} cache hits; {rr['redone']} of {rr['chunks']} chunks redone; {w2:.0f} s wall; rows {r['rows'][1]:,}.
- **Reference** (fault-free, fresh cache): {r['server3_requests']:,} requests, {w3:.0f} s wall, rows {r['rows'][2]:,}. Pairs:
  {pp['common']:,} in both runs, {pp['differ']} differ, {pp['missing']:,} missing from the faulty run
  ({', '.join(f'`{k}` {v}' for k, v in pp['missing_by_reason'].items())}), {pp['extra']} extra.

{checks}

A logical request is (agent, record); "answered" = an `ok` ledger row in the faulty run (its answer validated and was
cached). A chunk with any transient failure (429, 5xx, timeout, connection, bad response after the retries) is redone by the
next run; a chunk whose only failures are non-transient (an answer truncated on both parse attempts) is kept as finished,
so its rejected records stay rejected. The split column of the shards is drawn by a seeded permutation of a run's set of
pairs, so it differs between two runs that accepted different sets; the 'no dependency' rows are random pairings of a run's
docs and are not compared.

Found by the soak and fixed (tasks/llm/transport.py, `FastHTTPTransport.request`): a connection the server closed before any
byte of the response, after reading the request, was resent at once on another pooled connection with no ledger
row and no backoff (as often as there were idle connections), so the ledger came out short of the server's count
(410 rows for 413 requests in the 100-record test). It is now a `connection` outcome, retried after a backoff.""")


if __name__ == "__main__":
    main()
