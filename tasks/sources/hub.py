"""Reader of the CodeSearchNet copy on the Hugging Face hub (its parquet conversion, streamed; needs network)."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any
from urllib.parse import quote

from tasks.sources.records import Candidate, Loaded, content_id, excerpt, record_from_mapping
from tasks.sources.spec import SourceSpec, SourceUnavailableError

_HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
_GITHUB_SHA = re.compile(r"github\.com/[^/]+/[^/]+/blob/([0-9a-fA-F]{7,40})/")


def hf_row_to_csn(row: Mapping[str, Any], partition: str) -> dict[str, Any]:
    """Map a hub row (``repository_name``, ``func_code_string``, ...) to the release field names.

    Rows already in the release schema pass through unchanged. Hub rows carry no ``sha`` field:
    it is taken from ``func_code_url`` (``.../blob/<sha>/...``), empty when absent.
    """
    if "repo" in row and "code" in row:
        return dict(row)
    url = row.get("func_code_url")
    sha = _GITHUB_SHA.search(url) if isinstance(url, str) else None
    mapping = {
        "repo": "repository_name", "path": "func_path_in_repository", "func_name": "func_name",
        "original_string": "whole_func_string", "language": "language", "code": "func_code_string",
        "code_tokens": "func_code_tokens", "docstring": "func_documentation_string",
        "docstring_tokens": "func_documentation_tokens", "url": "func_code_url",
    }
    out = {ours: row[theirs] for ours, theirs in mapping.items() if theirs in row}
    out["sha"] = sha.group(1) if sha else ""
    out["partition"] = partition
    return out


def _record_from_hf_row(row: Mapping[str, Any], partition: str) -> Loaded:
    return record_from_mapping(hf_row_to_csn(row, partition), excerpt(json.dumps(dict(row), default=str, ensure_ascii=False)))


def _hf_error(spec: SourceSpec, what: str, exc: BaseException) -> SourceUnavailableError:
    return SourceUnavailableError(
        f"cannot {what} Hugging Face dataset {spec.hf_dataset_id!r} (revision {spec.hf_revision!r}): "
        f"{type(exc).__name__}: {str(exc).rstrip('.')}. The 'hf' source streams from the hub and "
        "needs network access (and HF_HUB_OFFLINE unset); offline, use kind='codesearchnet' with a local copy of the "
        "release or kind='stdlib'.")


def hf_candidates(spec: SourceSpec) -> Iterator[Candidate]:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a hard dependency
        raise SourceUnavailableError(f"the 'hf' source needs the datasets package: {exc}") from exc
    for lang in spec.languages:
        for part in spec.partitions:
            split = _HF_SPLITS[part]
            pattern = spec.hf_data_files.format(dataset_id=spec.hf_dataset_id, language=lang, split=split,
                                                revision=quote(spec.hf_revision, safe=""))
            try:
                ds = datasets.load_dataset("parquet", data_files={split: pattern}, split=split,
                                           streaming=True)
                if spec.sample_seed is not None:
                    ds = ds.shuffle(seed=spec.sample_seed, buffer_size=spec.hf_shuffle_buffer)
                rows = iter(ds)
            except Exception as exc:  # network/offline/hub errors come in many types
                raise _hf_error(spec, "open", exc) from exc
            index = 0
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    break
                except Exception as exc:
                    raise _hf_error(spec, f"stream row {index} of {lang}/{split} from", exc) from exc
                yield Candidate(f"hf:{spec.hf_dataset_id}/{lang}/{split}#{index}",
                                partial(_record_from_hf_row, row, part),
                                content_id(json.dumps(dict(row), default=str, sort_keys=True)))
                index += 1
