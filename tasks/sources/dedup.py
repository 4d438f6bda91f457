"""Deduplication of the records read: same id, same code, same code up to whitespace and comments.

The state is three compact 64-bit hash tables and an on-disk string spill (~40 bytes per accepted
record instead of one Python string per record), so a read of millions of records stays small."""
from __future__ import annotations

import hashlib
import tempfile

import numpy as np

from tasks.sources.filters import KEEP, SourceFilter, Verdict, drop, normalized_code_key
from tasks.sources.records import FunctionRecord, Reason


def h64(data: str | bytes) -> int:
    """A non-zero 64-bit key of ``data`` (blake2b)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") or 1


class U64Map:
    """Open-addressing hash map from non-zero 64-bit keys to uint32 values, in two numpy arrays
    (12 bytes a slot, at most half full: ~24 bytes an entry, against ~150 for a dict of strings)."""

    def __init__(self, capacity: int = 1 << 12):
        self._keys = np.zeros(capacity, np.uint64)
        self._vals = np.zeros(capacity, np.uint32)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def _slot(self, key: int) -> int:
        keys, mask = self._keys, len(self._keys) - 1
        i = key & mask
        while True:
            k = int(keys[i])
            if k == key or k == 0:
                return i
            i = (i + 1) & mask

    def get(self, key: int) -> int | None:
        i = self._slot(key)
        return int(self._vals[i]) if self._keys[i] else None

    def put(self, key: int, value: int) -> None:
        if 2 * (self._n + 1) > len(self._keys):
            self._grow()
        i = self._slot(key)
        if not self._keys[i]:
            self._n += 1
            self._keys[i] = key
        self._vals[i] = value

    def _grow(self) -> None:
        keys, vals = self._keys, self._vals
        self._keys = np.zeros(2 * len(keys), np.uint64)
        self._vals = np.zeros(2 * len(keys), np.uint32)
        self._n = 0
        for k, v in zip(keys[keys != 0].tolist(), vals[keys != 0].tolist()):
            self.put(k, v)


class StringSpill:
    """Append-only strings in a temporary file, read back by index (8 bytes of memory each)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()
        self._offsets = np.zeros(1 << 12, np.uint64)
        self._n = 0
        self._end = 0

    def append(self, text: str) -> int:
        data = text.encode("utf-8", "surrogatepass")
        if self._n + 1 >= len(self._offsets):
            self._offsets = np.concatenate([self._offsets, np.zeros(len(self._offsets), np.uint64)])
        self._file.seek(self._end)
        self._file.write(data)
        self._end += len(data)
        self._n += 1
        self._offsets[self._n] = self._end
        return self._n - 1

    def get(self, index: int) -> str:
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        self._file.seek(start)
        return self._file.read(end - start).decode("utf-8", "surrogatepass")

    def close(self) -> None:
        self._file.close()


class Dedup:
    """Admits a record unless it repeats an accepted one: its id (always), or, with
    ``SourceFilter.dedup``, its code exactly or up to whitespace and comments."""

    def __init__(self, flt: SourceFilter):
        self.code = flt.dedup
        self.ids, self.exact, self.normalized = U64Map(), U64Map(), U64Map()
        self.spill = StringSpill()  # per accepted record: its id, then its locator

    def admit(self, rec: FunctionRecord, locator: str, n_read: int) -> Verdict:
        """``(keep, reason)``; a kept record is remembered. ``n_read``: the item's number in the read."""
        rid = rec.record_id
        rid_key = h64(rid)
        prev = self.ids.get(rid_key)
        if prev is not None and self.spill.get(prev) == rid:  # the rejection gets an id of its own: the books count distinct ids
            return drop(rec, Reason.DUPLICATE_ID, f"same id as the record accepted from {self.spill.get(prev + 1)}",
                        f"{rid}#read{n_read}")
        if self.code:
            code_key = h64(rec.code)
            if (prev := self.exact.get(code_key)) is not None:
                return drop(rec, Reason.DUPLICATE_EXACT, f"code identical to {self.spill.get(prev)}")
            norm_key = h64(normalized_code_key(rec.code, rec.language))
            if (prev := self.normalized.get(norm_key)) is not None:
                return drop(rec, Reason.DUPLICATE_NORMALIZED, f"code equal up to whitespace/comments to {self.spill.get(prev)}")
        at = self.spill.append(rid)
        self.spill.append(locator)
        if self.code:
            self.exact.put(code_key, at)
            self.normalized.put(norm_key, at)
        self.ids.put(rid_key, at)
        return KEEP

    def close(self) -> None:
        self.spill.close()
