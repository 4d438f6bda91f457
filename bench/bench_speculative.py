"""Speculative decoding on the embedded server: does a draft model (Qwen2.5-Coder-0.5B for the 1.5B default, the same
tokenizer) or n-gram lookup of the prompt make the three agents faster on 2 CPU cores?

    .venv/bin/python -m bench.bench_speculative [--records 3] [--variants none,ngram_simple,ngram_mod,draft3,draft8]

The first ``--records`` functions build-tdi reads by default go through the three agents in pipelined order (extract,
generate, validate for one record, then the next) with the body the pipeline sends (temperature 0, max_tokens 768, the
agents' ``json_schema``); agents 2 and 3 get docs from a built dataset (``--dataset``), as in bench_prompt_prefix. Each
variant runs in its own process with its own xllamacpp server (the default's settings, ``xllamacpp_params``), after a
1-token warm-up, one variant after the other. Reported per variant: wall time of all requests, generated tokens, the
server's generation time, draft tokens proposed and accepted, and how many answers equal the plain server's (greedy
decoding with a verifier should change nothing; where it does, batched evaluation moved a near tie).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("none", "ngram_simple", "ngram_mod", "draft3", "draft8")
DRAFT_MODEL = "qwen2.5-coder-0.5b"
TIMINGS = ("predicted_n", "predicted_ms", "prompt_ms", "draft_n", "draft_n_accepted")


def server_params(variant: str, port: int, threads: int):
    """The embedded default's xllamacpp parameters with one speculative decoding setting."""
    import xllamacpp as xlc

    from models.embedded_llm.catalog import DEFAULT_MODEL
    from models.embedded_llm.fetch import fetch_model
    from models.embedded_llm.serving import xllamacpp_params

    params = xllamacpp_params(fetch_model(DEFAULT_MODEL), DEFAULT_MODEL, "127.0.0.1", port, 4096, threads)
    kind = xlc.common_speculative_type
    if variant == "ngram_simple":
        params.speculative.types = [kind.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
    elif variant == "ngram_mod":
        params.speculative.types = [kind.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
    elif variant.startswith("draft"):
        params.speculative.types = [kind.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        draft = params.speculative.draft
        draft.mparams.path = str(fetch_model(DRAFT_MODEL))
        draft.n_gpu_layers = 0
        draft.cpuparams.n_threads = draft.cpuparams_batch.n_threads = threads
        draft.n_max = int(variant.removeprefix("draft"))  # tokens drafted per step
    elif variant != "none":
        raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    return params


def run_variant(variant: str, records: int, dataset: Path, threads: int) -> dict:
    """One variant in this process: start its server, send every request, return totals and the answers."""
    import httpx
    import xllamacpp as xlc

    from bench.bench_prompt_prefix import requests
    from models.embedded_llm.catalog import DEFAULT_MODEL
    from models.embedded_llm.serving import free_port
    from tasks.llm.client import chat_body
    from tasks.llm.config import LLMConfig

    port = free_port()
    server = xlc.Server(server_params(variant, port, threads))
    cfg = LLMConfig(model=DEFAULT_MODEL)
    per_agent: dict[str, dict[str, float]] = {}
    answers = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=900) as client:
        client.post("/chat/completions", json={"model": DEFAULT_MODEL, "max_tokens": 1,
                                                "messages": [{"role": "user", "content": "hi"}]}).raise_for_status()
        started = time.perf_counter()
        for req in requests(records, dataset):
            data = client.post("/chat/completions", json=chat_body(cfg, req)).raise_for_status().json()
            row = per_agent.setdefault(req.agent, dict.fromkeys(("requests", *TIMINGS), 0))
            row["requests"] += 1
            for key in TIMINGS:
                row[key] += data.get("timings", {}).get(key) or 0
            answers.append(data["choices"][0]["message"]["content"])
        wall = time.perf_counter() - started
    del server
    return {"variant": variant, "wall_s": wall, "per_agent": per_agent, "answers": answers}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--dataset", type=Path, default=Path("artifacts/tdi/tdi-stdlib-demo"),
                   help="a built TDI folder whose docs agents 2 and 3 get")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one variant, print its JSON
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(run_variant(a.one, a.records, a.dataset, a.threads)))
        return
    results = []
    for variant in a.variants.split(","):
        out = subprocess.run([sys.executable, "-m", "bench.bench_speculative", "--one", variant, "--records",
                              str(a.records), "--dataset", str(a.dataset), "--threads", str(a.threads)],
                             capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{variant}: {results[-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    base = next((r for r in results if r["variant"] == "none"), results[0])
    print(f"{a.records} records x 3 agents, pipelined order, {a.threads} threads; draft model {DRAFT_MODEL}\n")
    print("| variant | wall s | vs none | generated tokens | generation ms per token | drafted / accepted | answers equal to none's |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        tot = {k: sum(row[k] for row in r["per_agent"].values()) for k in TIMINGS}
        same = sum(x == y for x, y in zip(r["answers"], base["answers"]))
        drafted = f"{tot['draft_n']:,.0f} / {tot['draft_n_accepted']:,.0f}" if tot["draft_n"] else "-"
        print(f"| {r['variant']} | {r['wall_s']:.1f} | {r['wall_s'] / base['wall_s']:.2f} | {tot['predicted_n']:,.0f} | "
              f"{tot['predicted_ms'] / max(tot['predicted_n'], 1):.1f} | {drafted} | {same} of {len(r['answers'])} |")


if __name__ == "__main__":
    main()
