"""The read: every item a reader yields ends accepted or rejected with a reason, counted once.

:func:`read_items` is the one pipeline (load, filter, deduplicate) behind both
:func:`read_function_records` (the whole result in memory) and ``tasks.agents.chunks.iter_record_chunks``
(build-tdi's lazy chunks), so the two give the same records, reasons and details."""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from tasks.common.outcome import Outcome
from tasks.sources.codesearchnet import csn_candidates
from tasks.sources.dedup import Dedup
from tasks.sources.filters import SourceFilter, passes
from tasks.sources.hub import hf_candidates
from tasks.sources.records import Candidate, FunctionRecord
from tasks.sources.spec import EmptySourceError, SourceConfigError, SourceSpec
from tasks.sources.tree import tree_candidates


@dataclass
class SourceReadResult:
    """What one read produced. Invariant: ``len(accepted) + len(rejected) == n_read``."""

    source: str
    accepted: list[FunctionRecord] = field(default_factory=list)
    rejected: list[Outcome] = field(default_factory=list)
    n_read: int = 0

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.rejected:
            counts[r.reason] = counts.get(r.reason, 0) + 1
        return dict(sorted(counts.items()))


def candidates(spec: SourceSpec) -> Iterator[Candidate]:
    """The reader of ``spec.kind``: one candidate per item, in file order."""
    if spec.kind == "codesearchnet":
        return csn_candidates(spec)
    if spec.kind == "hf":
        return hf_candidates(spec)
    return tree_candidates(spec)


def _close(items: Iterator) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        close()


def read_items(spec: SourceSpec, limit: int | None = None, source_filter: SourceFilter | None = None, *,
               sample_whole_source: bool = True, finish: bool = True) -> Iterator[FunctionRecord | Outcome]:
    """Every item read, in order: its record (accepted) or its rejection (stage ``read``, placed at
    the item's locator). Stops once ``limit`` records are accepted.

    Checks, in order (the first failure is the reason): decoding and schema (the reader), docstring
    and size (:func:`passes`), then duplicates of an accepted record (:class:`Dedup`).
    ``spec.sample_seed`` shuffles the candidates when there is a limit, or always with
    ``sample_whole_source``. ``finish``: fill in the costly fields of accepted tree records."""
    flt = source_filter or SourceFilter()
    if limit is not None and limit < 0:
        raise SourceConfigError(f"limit must be >= 0 or None, got {limit}")
    if limit == 0:
        return
    items = candidates(spec)
    if spec.sample_seed is not None and spec.kind != "hf" and (limit is not None or sample_whole_source):
        pool = list(items)
        random.Random(spec.sample_seed).shuffle(pool)
        items = iter(pool)
    dedup = Dedup(flt)
    n_read = accepted = 0
    try:
        for cand in items:
            n_read += 1
            got = cand.load()
            if isinstance(got, FunctionRecord):
                keep, why = passes(got, flt)
                if keep:
                    keep, why = dedup.admit(got, cand.locator, n_read)
                if keep:
                    yield cand.finish(got) if finish and cand.finish is not None else got
                    accepted += 1
                    if limit is not None and accepted >= limit:
                        break
                    continue
                got = why
            yield got.placed(cand.locator, cand.fallback_id)
    finally:
        _close(items)
        dedup.close()


def read_function_records(source_spec: SourceSpec, limit: int | None = None,
                          source_filter: SourceFilter | None = None) -> SourceReadResult:
    """Read function records from one source, filter and deduplicate them, account for all.

    An item is *read* when it is taken from the source: a non-blank JSONL line, a hub row, a
    function definition, or a file that could not be read/decoded/parsed (one item for the
    whole file, or for the rest of a gzip file after a stream error). Reading stops as soon as
    ``limit`` records are accepted, so every item read is in ``accepted`` or ``rejected`` and
    ``len(accepted) + len(rejected) == n_read``. ``limit=None`` reads the whole source.

    Checks, in order (first failure is the reason): decoding and schema (bad_encoding,
    malformed_json, not_an_object, missing_field, wrong_type), docstring, size, then duplicates
    of an already accepted record (duplicate_id, duplicate_exact, duplicate_normalized).

    Raises :class:`SourceConfigError` for a bad spec or missing folders and
    :class:`SourceUnavailableError` when the hub cannot be reached.
    """
    result = SourceReadResult(source=source_spec.name)
    for got in read_items(source_spec, limit, source_filter):
        result.n_read += 1
        (result.rejected if isinstance(got, Outcome) else result.accepted).append(got)  # type: ignore[arg-type]
    return result


def nothing_read(spec: SourceSpec) -> str:
    """The message for a source that yielded no item at all (says what was looked for, and where)."""
    if spec.kind == "codesearchnet":
        looked = (f"no line in any {spec.path}/<lang>/final/jsonl/<partition>/*.jsonl[.gz] for languages "
                  f"{','.join(spec.languages)}, partitions {','.join(spec.partitions)}")
    elif spec.kind == "hf":
        looked = f"the hub dataset gave no row for languages {','.join(spec.languages)}, partitions {','.join(spec.partitions)}"
    else:
        looked = "no function in any *.py file under it (after the excluded folders)"
    return f"nothing was read from {spec.name}: {looked}"


def check_source(spec: SourceSpec) -> None:
    """Before any work: raise :class:`SourceConfigError` (one line, no traceback needed) when the
    source's path or layout is missing, :class:`EmptySourceError` when it has nothing to read.
    Reads at most the first item; the hub (``hf``) is checked when it is read, not here."""
    if spec.kind == "hf":
        return
    items = candidates(spec)
    try:
        if next(items, None) is None:
            raise EmptySourceError(nothing_read(spec))
    finally:
        _close(items)
