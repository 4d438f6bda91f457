"""Function-record sources for build-tdi (step 1): where the functions that become tools come from.

Four sources, one record schema (CodeSearchNet's twelve fields), one module per job:

* ``spec``: what to read (:class:`SourceSpec`) and the errors of a source that cannot be read at all;
* ``records``: the record (:class:`FunctionRecord`), the read rejection reasons (:class:`Reason`) and
  what a reader yields per item (a candidate whose ``load()`` gives the record or its rejection);
* readers: ``codesearchnet`` (the official release layout ``<root>/<lang>/final/jsonl/<partition>/*.jsonl.gz``),
  ``hub`` (the CodeSearchNet copy on the Hugging Face hub, streamed; needs network), ``tree`` (any
  local Python source tree, or the running interpreter's standard library, parsed with :mod:`ast`);
* ``filters``: which records are kept; a filter returns ``(keep, reason)``;
* ``dedup``: duplicates of an accepted record (same id, same code, same code up to whitespace);
* ``read``: the one pipeline: each item read (a JSONL line, a hub row, a function definition, or
  a source file that cannot be read or parsed) ends accepted or as a rejection
  (:class:`tasks.common.outcome.Outcome`, stage ``read``) with a reason code, so
  ``len(accepted) + len(rejected) == n_read`` always holds. Nothing is dropped silently.

Every public name is importable from ``tasks.sources``.
"""
from __future__ import annotations

from tasks.common.outcome import Outcome
from tasks.sources.codesearchnet import csn_candidates, csn_files, record_from_json_line
from tasks.sources.dedup import Dedup, StringSpill, U64Map, h64
from tasks.sources.filters import SourceFilter, Verdict, normalized_code_key, passes
from tasks.sources.hub import hf_candidates, hf_row_to_csn
from tasks.sources.read import (
    SourceReadResult,
    candidates,
    check_source,
    nothing_read,
    read_function_records,
    read_items,
)
from tasks.sources.records import (
    CSN_FIELDS,
    EXCERPT_CHARS,
    READ,
    REJECTION_REASONS,
    Candidate,
    FunctionRecord,
    Reason,
    content_id,
    excerpt,
    record_from_mapping,
)
from tasks.sources.spec import (
    CSN_PARTITIONS,
    DEFAULT_TREE_EXCLUDES,
    SOURCE_KINDS,
    STDLIB_EXCLUDES,
    EmptySourceError,
    SourceConfigError,
    SourceError,
    SourceKind,
    SourceSpec,
    SourceUnavailableError,
)
from tasks.sources.tree import docstring_tokens, python_code_tokens, tree_candidates, tree_files

__all__ = [
    "CSN_FIELDS", "CSN_PARTITIONS", "DEFAULT_TREE_EXCLUDES", "EXCERPT_CHARS", "READ", "REJECTION_REASONS", "SOURCE_KINDS",
    "STDLIB_EXCLUDES", "Candidate", "Dedup", "EmptySourceError", "FunctionRecord", "Outcome", "Reason", "SourceConfigError",
    "SourceError", "SourceFilter", "SourceKind", "SourceReadResult", "SourceSpec", "SourceUnavailableError", "StringSpill",
    "U64Map", "Verdict", "candidates", "check_source", "content_id", "csn_candidates", "csn_files", "docstring_tokens",
    "excerpt", "h64", "hf_candidates", "hf_row_to_csn", "nothing_read", "normalized_code_key", "passes",
    "python_code_tokens", "read_function_records", "read_items", "record_from_json_line", "record_from_mapping",
    "tree_candidates", "tree_files",
]
