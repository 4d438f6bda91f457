"""Prompt prefix caching on the embedded server: how many prompt tokens llama.cpp evaluates when each agent's
prompt puts its fixed part first (as shipped: instructions and schema, then the record's code or docs) against
the same words with the record's part first (the layout before extract-v4 / generate-dependent-v7 / validate-v3).

    .venv/bin/python -m bench.bench_prompt_prefix [--records 6] [--dataset artifacts/tdi/tdi-stdlib-demo]

The first ``--records`` functions build-tdi reads by default (the stdlib, sample seed 13) go through the three
agents in the order a chunk's pipeline sends them (extract, generate, validate for one record, then the next),
each request with ``max_tokens`` 1: only prompt evaluation is timed. Agent 2 and 3 get real docs from a built
dataset's shards (``--dataset``), as the pipeline would get agent 1's. One embedded server serves both layouts in
turn (data first, then as shipped), each starting on a slot filled by the other's last prompt. The server's own
``timings`` (``prompt_n``: tokens evaluated, ``cache_n``: tokens reused, ``prompt_ms``) are summed per agent.
Prints a table; bench/RESULTS.md quotes it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq

from models.embedded_llm.server import EmbeddedLLMServer
from schemas.tdi import DependentPair
from tasks.agents.requests import ExtractedDoc, extract_request, generate_request, validate_request
from tasks.llm.structured import StructuredRequest
from tasks.sources.read import read_function_records
from tasks.sources.spec import SourceSpec

DATA_STARTS = ("The function:\n", "The given API:\n", "API A:\n")  # where each shipped prompt's record part begins


def data_first(user: str) -> str:
    """The shipped user message with its record part (code or docs, at the end) moved to the front."""
    start = max(user.rfind(marker) for marker in DATA_STARTS)
    if start < 0:
        raise ValueError("no record part found at the end of the prompt")
    return user[start:] + "\n\n" + user[:start].rstrip()


def requests(records: int, dataset: Path) -> list[StructuredRequest]:
    recs = read_function_records(SourceSpec(kind="stdlib", sample_seed=13), limit=records).accepted
    docs = [json.loads(d) for d in pq.read_table(dataset / "shards", columns=["doc_a"]).column("doc_a").to_pylist()]
    if len(docs) < 2 * len(recs):
        raise SystemExit(f"{dataset} has {len(docs)} docs: {2 * len(recs)} needed for {len(recs)} records")
    out = []
    for i, r in enumerate(recs):
        given, partner = docs[2 * i], docs[2 * i + 1]
        out += [extract_request(r.record_id, r.code, r.language, 4000), generate_request(ExtractedDoc(r.record_id, given, "data")),
                validate_request(DependentPair(r.record_id, given, partner, 1))]
    return [r for r in out if isinstance(r, StructuredRequest)]  # a doc with no value to hand over gets no agent-2 request


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=6)
    p.add_argument("--dataset", type=Path, default=Path("artifacts/tdi/tdi-stdlib-demo"),
                   help="a built TDI folder whose docs agents 2 and 3 get")
    a = p.parse_args(argv)
    reqs = requests(a.records, a.dataset)
    totals: dict[str, dict[str, dict[str, float]]] = {}
    with EmbeddedLLMServer() as server, httpx.Client(base_url=server.base_url, timeout=900) as client:
        for layout in ("record part first", "fixed part first (shipped)"):
            per_agent = totals.setdefault(layout, {})
            for req in reqs:
                (_, system), (_, user) = req.messages
                if layout.startswith("record"):
                    user = data_first(user)
                body = {"model": server.model, "max_tokens": 1,
                        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
                timings = client.post("/chat/completions", json=body).raise_for_status().json()["timings"]
                row = per_agent.setdefault(req.agent, {"prompt_n": 0, "cache_n": 0, "prompt_ms": 0.0})
                for key in row:
                    row[key] += timings[key]
    print(f"{a.records} records x 3 agents, pipelined order, max_tokens 1; embedded {server.model}\n")
    print("| layout | agent | prompt tokens evaluated | reused from cache | prompt eval s |")
    print("|---|---|---|---|---|")
    for layout, per_agent in totals.items():
        for agent, row in [*per_agent.items(), ("all", {k: sum(r[k] for r in per_agent.values()) for k in
                                                      ("prompt_n", "cache_n", "prompt_ms")})]:
            print(f"| {layout} | {agent} | {row['prompt_n']:,.0f} | {row['cache_n']:,.0f} | {row['prompt_ms'] / 1000:.1f} |")
    before, after = (sum(r["prompt_n"] for r in t.values()) for t in totals.values())
    print(f"\nprompt tokens evaluated: {after:,.0f} shipped / {before:,.0f} record part first = {after / before:.2f}")


if __name__ == "__main__":
    main()
