"""The ledger: a row per request sent and per cache hit (CallRecord), the journal file rows are
appended to as calls end, and usage_summary of the rows."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tasks.llm.codec import dumps


@dataclass(slots=True)
class CallRecord:
    """A ledger row."""

    agent: str
    item_id: str
    cache_key: str
    attempt: int
    # ok | cache_hit | http_429 | http_5xx | http_4xx | http_401/403/404 | timeout | connection | bad_response |
    # invalid_json | schema_invalid | truncated | cancelled (in flight when the run stopped) | batch_<error>
    outcome: str
    latency_s: float
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    detail: str = ""


class LedgerJournal:
    """Ledger rows appended to a JSON-lines file as each call ends (``LLMConfig.ledger_journal``):
    one unbuffered append per row, so the rows of a run that fails, is cancelled or killed are on
    disk for the books (``tasks.dataset.accounting`` reads these files as ``llm_calls`` rows)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: Any = None

    def write(self, record: CallRecord) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close(), rows written as they come
        self._file.write(dumps(asdict(record)) + b"\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def ledger_rows(calls: Sequence[CallRecord]) -> list[dict[str, Any]]:
    return [asdict(c) for c in calls]


def usage_summary(ledger: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Requests actually sent (cache hits aside), their tokens and estimated cost."""
    sent = [c for c in ledger if c["outcome"] != "cache_hit"]
    return {
        "requests_sent": len(sent),
        "cache_hits": len(ledger) - len(sent),
        "tokens_in": sum(c["tokens_in"] for c in sent),
        "tokens_out": sum(c["tokens_out"] for c in sent),
        "cost_usd": round(sum(c["cost_usd"] for c in sent), 6),
    }
