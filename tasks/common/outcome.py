"""One shape for what became of an item read: accepted, or rejected at a stage with a reason.

The source readers and filters (``tasks.sources``), the three agents (``tasks.agents.requests``), balancing
(``tasks.dataset.balance``) and the flows' books (``records.duckdb``, table ``record_outcomes``) all use
:class:`Outcome`; :meth:`Outcome.row` is its row in :data:`OUTCOME_SCHEMA`, the books' on-disk columns.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

import pyarrow as pa

OUTCOME_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),  # Outcome.key
        pa.field("status", pa.string(), nullable=False),  # accepted | rejected
        pa.field("stage", pa.string(), nullable=False),  # read | extract | generate | validate | balance | dataset | ...
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
        pa.field("raw_text", pa.string()),  # the LLM's raw answer when parsing failed, or the raw line
    ]
)

Status = Literal["accepted", "rejected"]


@dataclass(frozen=True)
class Outcome:
    """An item's outcome. Positional order: ``Outcome(record_id, stage, reason, detail, raw_text)``."""

    record_id: str  # the record's id (repo:path:func_name, or a content hash when it has none)
    stage: str  # read | extract | generate | validate | balance | dataset (mine-tdi: parse | resolve | judge)
    reason: str  # machine-readable code: tasks.sources.records.Reason, "<stage>_<why>", ...
    detail: str = ""  # for a person: what was wrong, and where it clashed
    raw_text: str | None = None  # an excerpt of the raw item read, or the LLM's raw answer
    locator: str = ""  # where the item was read: file:line, file::qualname, hf:<id>/<lang>/<split>#<row>
    status: Status = "rejected"

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def key(self) -> str:
        """The books' key: the locator when the item has one (unique even for repeated bad lines), else the id."""
        return self.locator or self.record_id

    def placed(self, locator: str, fallback_id: str) -> Outcome:
        """This outcome at the place it was read; ``fallback_id`` when it was found before it had an id."""
        return replace(self, locator=locator, record_id=self.record_id or fallback_id)

    def row(self) -> dict[str, str | None]:
        """The row of ``record_outcomes`` (OUTCOME_SCHEMA)."""
        return {"record_id": self.key, "status": self.status, "stage": self.stage, "reason": self.reason,
                "detail": self.detail, "raw_text": self.raw_text}

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)
