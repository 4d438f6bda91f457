"""Optional LLM review of mined data (issue 7): agent 1 rewrites a sample of mined docs, agent 3
judges a sample of mined dependency pairs.

Pure request building and answer handling; the flow (flows/mine_tdi.py) runs the requests through
``tasks.llm.client`` and records the ledger. Both samples are seeded and drawn from sorted keys, so the
same seed and inputs give the same requests (and, through the LLM cache, the same answers).

- rewrite: agent 1 (``tasks.agents.requests.extract_request``) sees the function's signature and docstring
  rendered as Python; an answer that passes the ``api_doc`` schema replaces the mined doc, any other
  keeps the mined doc and is counted by its reason (``extract_invalid_json``, ``extract_schema_invalid``...).
- judge: agent 3 (``tasks.agents.requests.validate_request``) sees the producer's doc as API A and the
  consumer's doc as API B. Mined records with the same two functions (several call sites, or the
  reverse direction) are one *doc pair*: it is judged once and the verdict holds for all of them.
  ``drop`` rejects every record of a doc pair judged "no dependency" (``judge_no_dependency``);
  ``report`` only measures.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.tdi import DependentPair
from tasks.agents.requests import extract_request, interpret_extract, interpret_validate, validate_request
from tasks.mining.docs import FunctionFacts
from tasks.llm.structured import StructuredRequest, StructuredResult
from tasks.mining.dataset import DependencyPair
from tasks.common.outcome import Outcome

JUDGE_ACTIONS = ("drop", "report")
JUDGE_REJECTION = "judge_no_dependency"
MAX_CODE_CHARS = 1800  # what agent 1 sees of a signature + docstring (build-tdi's prompt budget)

VERDICT_DEPENDENT, VERDICT_NO_DEPENDENCY, VERDICT_FAILED = "dependent", "no_dependency", "failed"


def seeded_sample(items: Iterable[str], n: int, seed: int, purpose: str) -> list[str]:
    """``n`` of the distinct ``items`` (all when fewer), sorted; the draw depends only on the sorted
    items, the seed and ``purpose`` (so the rewrite and judge samples are independent draws)."""
    pool = sorted(set(items))
    if n >= len(pool):
        return pool
    return sorted(random.Random(f"mine-tdi:{purpose}:{seed}").sample(pool, n))


# -- agent 1: rewrite mined docs ------------------------------------------------------------------
def render_signature(facts: FunctionFacts) -> str:
    """The function's signature and docstring as Python source (no body), the code agent 1 documents."""
    params: list[str] = []
    star = False
    for p in facts.params:
        ann = f": {p.annotation}" if p.annotation else ""
        if p.kind == "var_positional":
            params.append(f"*{p.name}{ann}")
            star = True
        elif p.kind == "keyword_only":
            if not star:
                params.append("*")
                star = True
            params.append(f"{p.name}{ann}")
        elif p.kind == "var_keyword":
            params.append(f"**{p.name}{ann}")
        else:
            params.append(f"{p.name}{ann}")
    owner, _, name = facts.qualname.rpartition(".")
    in_class = bool(owner) and facts.binding != "function"
    decorator = {"class": "@classmethod\n", "static": "@staticmethod\n"}.get(facts.binding, "") if in_class else ""
    if in_class and facts.binding in ("instance", "class"):
        params.insert(0, "self" if facts.binding == "instance" else "cls")
    returns = f" -> {facts.return_annotation}" if facts.return_annotation else ""
    doc = facts.docstring.strip().replace('"""', '\\"\\"\\"')
    body = '    """' + doc.replace("\n", "\n    ") + '\n    """\n    ...\n' if doc else "    ...\n"
    text = f"{decorator}def {name}({', '.join(params)}){returns}:\n{body}"
    if in_class:
        text = f"class {owner}:\n" + "".join(f"    {line}\n" if line else "\n" for line in text.rstrip("\n").split("\n"))
    return text


def rewrite_keys(pairs: Sequence[DependencyPair], docs: dict[str, Any], facts: dict[str, FunctionFacts]) -> list[str]:
    """Docs that can be rewritten and would reach the dataset: a side of a mined pair, with a mined
    doc and the function's facts (docs mixed in from build-tdi are LLM docs already)."""
    keys = {k for p in pairs for k in (p.dependent_key, p.prerequisite_key)}
    return sorted(k for k in keys if k in docs and k in facts)


def rewrite_requests(keys: Sequence[str], facts: dict[str, FunctionFacts]) -> list[StructuredRequest]:
    return [extract_request(k, render_signature(facts[k]), "python", MAX_CODE_CHARS) for k in keys]


@dataclass
class RewriteReport:
    requested: int = 0  # the configured sample size
    available: int = 0  # docs that could be rewritten
    sampled: int = 0
    rewritten: int = 0
    kept_by_reason: dict[str, int] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)  # doc_rewrites table: doc_key, status, reason, detail

    def as_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "available": self.available, "sampled": self.sampled,
                "rewritten": self.rewritten, "kept": self.sampled - self.rewritten, "kept_by_reason": self.kept_by_reason}


def apply_rewrites(docs: dict[str, dict[str, Any]], results: Sequence[StructuredResult], report: RewriteReport) -> dict[str, dict[str, Any]]:
    """``docs`` with each valid answer in place of its mined doc; every other sampled doc is kept."""
    out = dict(docs)
    kept: Counter[str] = Counter()
    for result in results:
        got = interpret_extract(result)  # a failed call, or an answer that breaks the api_doc schema: a rejection (Outcome)
        if isinstance(got, Outcome):
            kept[got.reason] += 1
            report.rows.append({"doc_key": result.item_id, "status": "kept", "reason": got.reason, "detail": got.detail[:1000]})
        else:
            out[result.item_id] = got.doc
            report.rewritten += 1
            report.rows.append({"doc_key": result.item_id, "status": "rewritten", "reason": "rewritten", "detail": ""})
    report.kept_by_reason = dict(sorted(kept.items()))
    return out


# -- agent 3: judge mined pairs -------------------------------------------------------------------
@dataclass(frozen=True)
class DocPair:
    """Mined records linking the same two functions (either direction): judged once, as ``first``."""

    first: DependencyPair  # the lowest record id: its direction is the one shown to the judge
    records: tuple[DependencyPair, ...]


def doc_pairs(pairs: Sequence[DependencyPair], docs: dict[str, Any]) -> list[DocPair]:
    """Judgeable doc pairs of ``pairs``: both docs exist and the two functions differ."""
    groups: dict[frozenset[str], list[DependencyPair]] = {}
    for p in sorted(pairs, key=lambda p: p.record_id):
        if p.dependent_key in docs and p.prerequisite_key in docs and p.dependent_key != p.prerequisite_key:
            groups.setdefault(frozenset((p.dependent_key, p.prerequisite_key)), []).append(p)
    return [DocPair(g[0], tuple(g)) for g in groups.values()]


def sample_doc_pairs(groups: Sequence[DocPair], n: int, seed: int) -> list[DocPair]:
    by_id = {g.first.record_id: g for g in groups}
    return [by_id[rid] for rid in seeded_sample(by_id, n, seed, "judge")]


def judge_request(group: DocPair, docs: dict[str, dict[str, Any]]) -> StructuredRequest:
    """API A is the producer's doc, API B the consumer's (agent 3 of build-tdi sees given, generated)."""
    p = group.first
    return validate_request(DependentPair(p.record_id, docs[p.prerequisite_key], docs[p.dependent_key], 1))


@dataclass
class JudgeReport:
    action: str = "drop"
    requested: int = 0
    available: int = 0  # judgeable doc pairs
    sampled: int = 0  # doc pairs sent to the judge
    records_sampled: int = 0  # mined records those doc pairs cover
    judged: int = 0  # doc pairs with a verdict
    dependent: int = 0
    failed_by_reason: dict[str, int] = field(default_factory=dict)
    records_dropped: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)  # judge_verdicts table, one row per mined record

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action, "requested": self.requested, "available": self.available, "sampled": self.sampled,
            "records_sampled": self.records_sampled, "judged": self.judged, "dependent": self.dependent,
            "no_dependency": self.judged - self.dependent,
            "agreement_rate": round(self.dependent / self.judged, 4) if self.judged else None,
            "failed_by_reason": self.failed_by_reason, "records_dropped": self.records_dropped,
        }


def apply_verdicts(groups: Sequence[DocPair], results: Sequence[StructuredResult], report: JudgeReport,
                   docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Record each verdict; in ``drop`` mode return record id -> detail of every record to reject."""
    dropped: dict[str, str] = {}
    failed: Counter[str] = Counter()
    for group, result in zip(groups, results, strict=True):
        first = group.first
        got = interpret_validate(DependentPair(first.record_id, docs[first.prerequisite_key], docs[first.dependent_key], 1), result)
        if isinstance(got, Outcome) and got.reason == "validate_no_dependency":
            verdict, reason = VERDICT_NO_DEPENDENCY, got.detail
        elif isinstance(got, Outcome):
            verdict, reason = VERDICT_FAILED, got.reason
            failed[got.reason] += 1
        else:
            verdict, reason = VERDICT_DEPENDENT, str((result.value or {}).get("reason", ""))
        if verdict != VERDICT_FAILED:
            report.judged += 1
            report.dependent += verdict == VERDICT_DEPENDENT
        for p in group.records:
            report.rows.append({"record_id": p.record_id, "judged_as": first.record_id, "dependent": p.dependent_key,
                                "prerequisite": p.prerequisite_key, "verdict": verdict, "reason": reason[:1000],
                                "action": "dropped" if verdict == VERDICT_NO_DEPENDENCY and report.action == "drop" else "kept"})
            if verdict == VERDICT_NO_DEPENDENCY and report.action == "drop":
                via = "" if p.record_id == first.record_id else f" (verdict on {first.record_id}, same two functions)"
                dropped[p.record_id] = f"agent 3: {reason}{via}"[:1000]
    report.failed_by_reason = dict(sorted(failed.items()))
    report.records_dropped = len(dropped)
    return dropped
