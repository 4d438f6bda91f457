"""Agent 3's precondition verdict against pairs read by hand: would the judge build-tdi asks ("A is called before B.
Is this order required?", `tasks.agents.prompts.VALIDATE_PRECONDITION`) keep the right precondition edges and drop the
wrong ones? The pairs are the tool pairs of NesTools' held-out domains read by hand in `bench/precondition_sample.md`
(its sections on the cross-encoder's precondition edges and on check pairs: each row a prerequisite, a dependent and
a verdict, right, borderline or wrong); the docs come from the tool-set folder (`bench.nestools_split`'s nes_test).
Each pair is sent as agent 3's own request (`tasks.agents.requests.validate_request`), through the project's LLM
client (cache, retries), to the embedded model or to any OpenAI-protocol server.

    .venv/bin/python -m bench.nestools_split --output /tmp/n20
    .venv/bin/python -m bench.precondition_judge --toolset /tmp/n20/nes_test                  # the embedded model
    .venv/bin/python -m bench.precondition_judge --toolset /tmp/n20/nes_test --base-url https://api.openai.com/v1 --model gpt-4o-mini

Prints, per verdict read by hand, how many pairs the judge calls required, and the judge's precision and recall on
the right ones (borderline pairs left out of both).
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from bench.readings import reading_rows
from schemas.tdi import KIND_PRECONDITION, DependentPair
from tasks.agents.requests import validate_request
from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig
from tasks.toolsets.readers import read_toolset_dir

SAMPLE = Path(__file__).with_name("precondition_sample.md")
# the sections of SAMPLE whose rows are tool pairs of nes_test (the others are mined Python pairs)
SECTIONS = ("twenty-seventh session", "twenty-eighth session", "twenty-ninth session")
VERDICTS = ("right", "borderline", "wrong")


@dataclass(frozen=True)
class Label:
    prerequisite: str  # tool ids: the tool called first
    dependent: str
    verdict: str  # VERDICTS


def hand_labels(sample: Path = SAMPLE, sections: Sequence[str] = SECTIONS) -> list[Label]:
    """The distinct (prerequisite, dependent) pairs of the table rows under the ``## `` headings that name one of
    ``sections``: the first two cells name the tools (in backticks), the first later cell that opens with gold,
    right, borderline or wrong is the verdict (gold counts as right). A pair read twice keeps its first verdict."""
    labels: dict[tuple[str, str], Label] = {}
    for heading, cells in reading_rows(sample):
        if not any(s in heading for s in sections):
            continue
        names = [re.findall(r"`([^`]+)`", c) for c in cells[1:3]]
        verdict = next((("right" if v.startswith("gold") else v.split()[0].strip(",")) for v in map(str.lower, cells[3:])
                        if v.startswith(("gold", "right", "borderline", "wrong"))), None)
        if len(cells) > 3 and all(names) and verdict in VERDICTS:
            labels.setdefault((names[0][0], names[1][0]), Label(names[0][0], names[1][0], verdict))
    return list(labels.values())


def judge(labels: Sequence[Label], docs: dict[str, dict], cfg: LLMConfig) -> list[bool | None]:
    """Agent 3's verdict per label: True when it calls the order required, None when no valid answer came."""
    pairs = [DependentPair(f"judge-{n}", docs[x.prerequisite], docs[x.dependent], 1, kind=KIND_PRECONDITION)
             for n, x in enumerate(labels)]
    results = StructuredLLM(cfg).run([validate_request(p) for p in pairs])
    by_id = {r.item_id: r for r in results}
    return [None if not (r := by_id[p.record_id]).ok or r.value is None else int(r.value["result"]) == 1 for p in pairs]


def summary(labels: Sequence[Label], required: Sequence[bool | None]) -> dict:
    """Per verdict: pairs, called required, no answer; and precision / recall of "required" on right against wrong."""
    table = {v: Counter() for v in VERDICTS}
    for x, r in zip(labels, required):
        table[x.verdict]["pairs"] += 1
        table[x.verdict]["required" if r else "no answer" if r is None else "not required"] += 1
    kept_right, kept_wrong = table["right"]["required"], table["wrong"]["required"]
    return {"by_verdict": {v: dict(c) for v, c in table.items()},
            "precision": kept_right / (kept_right + kept_wrong) if kept_right + kept_wrong else None,
            "recall": kept_right / table["right"]["pairs"] if table["right"]["pairs"] else None,
            "share_right_read": table["right"]["pairs"] / ((table["right"]["pairs"] + table["wrong"]["pairs"]) or 1)}


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@contextmanager
def embedded(model: str) -> Iterator[str]:
    from models.embedded_llm.server import EmbeddedLLMServer

    with EmbeddedLLMServer(model=model) as server:
        yield server.base_url


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toolset", type=Path, required=True, help="a tool-set folder holding the pairs' tools (nes_test)")
    ap.add_argument("--sample", type=Path, default=SAMPLE, help="the hand reading (markdown tables)")
    ap.add_argument("--base-url", help="an OpenAI-protocol server; default: the embedded model, started here")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="the model name (the embedded model's, by default)")
    ap.add_argument("--cache-dir", default="artifacts/llm-cache", help="the LLM response cache (a rerun reads it)")
    ap.add_argument("--limit", type=int, help="judge only the first N pairs")
    ap.add_argument("--out", type=Path, help="a JSON file: each pair with its verdict and the judge's")
    a = ap.parse_args(argv)
    labels = hand_labels(a.sample)[: a.limit]
    docs = {t.tool_id: t.doc for t in read_toolset_dir(a.toolset).tools}
    missing = sorted({n for x in labels for n in (x.prerequisite, x.dependent)} - docs.keys())
    if missing:
        raise SystemExit(f"{a.toolset}: no tool {missing[0]!r} (and {len(missing) - 1} more): the pairs were read on "
                         "bench.nestools_split's nes_test")
    with (nullcontext(a.base_url) if a.base_url else embedded(a.model)) as base_url:
        required = judge(labels, docs, LLMConfig(model=a.model, base_url=base_url, cache_dir=a.cache_dir))
    result = summary(labels, required)
    print(f"## Agent 3's precondition verdict ({a.model}) on {len(labels)} pairs read by hand\n")
    print("| read by hand | pairs | called required | not required | no answer |\n|---|---|---|---|---|")
    for verdict, c in result["by_verdict"].items():
        print(f"| {verdict} | {c.get('pairs', 0)} | {c.get('required', 0)} | {c.get('not required', 0)} | {c.get('no answer', 0)} |")
    print(f"\nprecision {_share(result['precision'])} (the share right among all right and wrong pairs: "
          f"{_share(result['share_right_read'])}), recall {_share(result['recall'])}")
    if a.out:
        a.out.write_text(json.dumps([{**vars(x), "required": r} for x, r in zip(labels, required)], indent=1))
    return result


if __name__ == "__main__":
    main()
