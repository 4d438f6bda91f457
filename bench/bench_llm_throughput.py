"""LLM-stage throughput against an OpenAI-compatible server that answers after a fixed delay.

Ideal throughput is concurrency / delay; the ratio measured / ideal shows what the client layer
(cache, retries, ledger, JSON validation, asyncio) costs. Goal: >= 0.95 at concurrency 64.

    .venv/bin/python -m bench.bench_llm_throughput [--concurrency 64 --delay 1.0 --rounds 10]
"""
from __future__ import annotations

import argparse
import asyncio
import platform
import tempfile
import time

from bench.results import write_section
from tasks.agents import extract_request
from tasks.llm import LLMConfig, StructuredLLM
from tests.openai_server import FakeOpenAIServer

CODE = 'def fetch_{i}(url, timeout=10):\n    """Fetch a URL."""\n    return get(url, timeout=timeout)\n'


def run(concurrency: int, delay_s: float, rounds: int) -> dict:
    n = concurrency * rounds
    requests = [extract_request(f"r{i}", CODE.format(i=i), "python", 2000) for i in range(n)]
    with FakeOpenAIServer(delay_s=delay_s) as server, tempfile.TemporaryDirectory() as cache:
        llm = StructuredLLM(LLMConfig(model="fake", base_url=server.base_url, concurrency=concurrency, cache_dir=cache))
        started = time.perf_counter()
        results = asyncio.run(llm.run_many(requests))
        elapsed = time.perf_counter() - started
        # The same requests again: all from the cache.
        llm2 = StructuredLLM(LLMConfig(model="fake", base_url=server.base_url, concurrency=concurrency, cache_dir=cache))
        started = time.perf_counter()
        asyncio.run(llm2.run_many(requests))
        cached_elapsed = time.perf_counter() - started
        sent = server.requests
    ok = sum(r.ok for r in results)
    ideal = concurrency / delay_s
    return {"n": n, "ok": ok, "sent": sent, "elapsed": elapsed, "throughput": n / elapsed, "ideal": ideal,
            "ratio": (n / elapsed) / ideal, "cached_rps": n / cached_elapsed}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--delay", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=10)
    a = p.parse_args()
    r = run(a.concurrency, a.delay, a.rounds)
    print(r)
    write_section(
        "LLM stage throughput (build-tdi)",
        f"""Command: `.venv/bin/python -m bench.bench_llm_throughput --concurrency {a.concurrency} --delay {a.delay} --rounds {a.rounds}`
Machine: {platform.machine()}, CPU only, {__import__('os').cpu_count()} cores; server: tests/openai_server.py on loopback, fixed delay {a.delay} s per answer.

| requests | parsed | concurrency | ideal req/s (concurrency/delay) | measured / ideal | cache-hit rerun vs ideal |
|---|---|---|---|---|---|
| {r['n']} | {r['ok']} | {a.concurrency} | {r['ideal']:.1f} | **{r['ratio']:.3f}** | {r['cached_rps'] / r['ideal']:.1f}x |

The second pass over the same requests sent {r['sent'] - r['n']} requests (all answered from the content-addressed cache).""",
    )


if __name__ == "__main__":
    main()
