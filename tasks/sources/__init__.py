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

May import: schemas/, tasks.common. Import each name from the module that owns it.
"""
