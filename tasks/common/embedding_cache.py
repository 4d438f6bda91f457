"""Content-addressed cache of text embeddings (sha256 of encoder id, max length and text -> float32 vector) in
.npy shards under ``artifacts/cache/embeddings``, each shard committed atomically, so a rerun (or a run after an
interrupted one) encodes no text twice; ``encode_cached`` encodes the misses in chunks and says its progress."""
from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

DEFAULT_CACHE_DIR = "artifacts/cache/embeddings"
CHUNK = 512  # texts encoded (and committed to the cache) between two progress lines
_MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "model.onnx", "tokenizer.json",
                "sentence_bert_config.json")


def encoder_identity(name: str) -> str:
    """What identifies an encoder's vectors: its name, and for a local folder (a trained retriever) the
    absolute path with the size and mtime of its weight and config files, so a retrained one misses; a
    precision suffix (``<folder>:int8``) is kept after them: int8 vectors are not the fp32 ones."""
    from models.encoder_path import PRECISION_SEP, split_precision

    base, precision = split_precision(name)
    if precision:
        return f"{encoder_identity(base)}{PRECISION_SEP}{precision}"
    folder = Path(name)
    if not folder.is_dir():
        return name
    stamps = [f"{f}:{(folder / f).stat().st_size}:{(folder / f).stat().st_mtime_ns}" for f in _MODEL_FILES
              if (folder / f).is_file()]
    return f"{folder.resolve()}|{'|'.join(stamps)}"


def text_keys(model_id: str, max_length: int, texts: Sequence[str]) -> np.ndarray:
    """(n, 32) uint8: sha256 of model id, max length and text for each text."""
    prefix = hashlib.sha256(f"{model_id}\0{max_length}\0".encode()).digest()
    out = np.empty((len(texts), 32), dtype=np.uint8)
    for n, text in enumerate(texts):
        out[n] = np.frombuffer(hashlib.sha256(prefix + text.encode("utf-8", "surrogatepass")).digest(), np.uint8)
    return out


class EmbeddingCache:
    """Shards ``<folder>/<setting>/<shard>.vec.npy`` (vectors) and ``<shard>.keys.npy`` (their keys, written
    last: a shard counts once its keys file is there, so a kill mid-write leaves only an ignored orphan)."""

    def __init__(self, folder: str | Path, model_id: str, max_length: int) -> None:
        setting = hashlib.sha256(f"{model_id}\0{max_length}".encode()).hexdigest()[:16]
        self.folder = Path(folder) / setting
        self.model_id, self.max_length = model_id, max_length
        self._index: dict[bytes, tuple[int, int]] = {}
        self._shards: list[np.ndarray | Path] = []  # a Path: a shard this run wrote, mapped when first read
        self._load()

    @classmethod
    def for_encoder(cls, folder: str | Path, encoder: str) -> "EmbeddingCache":
        """The cache of ``encoder``'s vectors at its default max length (``encoder_identity``: a retrained
        local encoder misses)."""
        from models.encoder_path import default_max_length

        return cls(folder, encoder_identity(encoder), default_max_length(encoder))

    def _load(self) -> None:
        if not self.folder.is_dir():
            return
        for keys_file in sorted(self.folder.glob("*.keys.npy")):
            vec_file = keys_file.with_name(keys_file.name.replace(".keys.npy", ".vec.npy"))
            try:
                keys, vectors = np.load(keys_file), np.load(vec_file, mmap_mode="r")
            except (OSError, ValueError):
                continue  # unreadable shard: its texts are encoded again
            if keys.ndim != 2 or keys.shape[1] != 32 or len(keys) != len(vectors):
                continue
            shard = len(self._shards)
            self._shards.append(vectors)
            for row, key in enumerate(keys):
                self._index[key.tobytes()] = (shard, row)

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, keys: np.ndarray) -> list[tuple[int, int] | None]:
        return [self._index.get(k.tobytes()) for k in keys]

    def vector(self, where: tuple[int, int]) -> np.ndarray:
        shard, row = where
        if isinstance(self._shards[shard], Path):
            self._shards[shard] = np.load(self._shards[shard], mmap_mode="r")
        return np.asarray(self._shards[shard][row], dtype=np.float32)

    def put(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Commit one shard: vectors first, then keys, each through a temp file and ``os.replace``."""
        if not len(keys):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(keys.tobytes()).hexdigest()[:24]
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for suffix, array in (("vec", vectors), ("keys", np.ascontiguousarray(keys, dtype=np.uint8))):
            final = self.folder / f"{name}.{suffix}.npy"
            tmp = self.folder / f".{name}.{suffix}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                np.save(fh, array)
            os.replace(tmp, final)
        shard = len(self._shards)
        self._shards.append(self.folder / f"{name}.vec.npy")  # not kept in memory: the caller holds them
        for row, key in enumerate(keys):
            self._index[key.tobytes()] = (shard, row)


def encode_cached(texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], cache: EmbeddingCache | None,
                  what: str = "texts", progress: Callable[[str], None] | None = None,
                  chunk: int = CHUNK, every_s: float = 5.0) -> np.ndarray:
    """``encode(texts)`` through ``cache``: hits are read, each distinct missing text is encoded once, in chunks
    of ``chunk`` (longest last, so batches pad little), each chunk committed to the cache; a progress line
    (count, rate, time left) after a chunk when ``every_s`` seconds have passed since the last, and after the
    last chunk. ``cache`` None: no cache, same chunks and progress."""
    say = progress or (lambda _line: None)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    keys = text_keys(cache.model_id, cache.max_length, texts) if cache is not None else None
    found = cache.lookup(keys) if cache is not None else [None] * len(texts)
    # distinct missing texts, by length (as SentenceEncoder.encode orders its batches)
    first: dict[str, int] = {}
    for n, (text, hit) in enumerate(zip(texts, found)):
        if hit is None and text not in first:
            first[text] = n
    todo = sorted(first.values(), key=lambda n: len(texts[n]))
    hits = sum(h is not None for h in found)
    say(f"encoding {len(texts)} {what}: {hits} from the cache, {len(todo)} to encode"
        + (f" ({cache.folder})" if cache is not None else " (no cache)"))
    out: np.ndarray | None = None
    start, done = time.monotonic(), 0
    last = start
    for at in range(0, len(todo), chunk):
        part = todo[at:at + chunk]
        vectors = np.asarray(encode([texts[n] for n in part]), dtype=np.float32)
        if cache is not None:
            cache.put(keys[part], vectors)
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[part] = vectors
        done += len(part)
        now = time.monotonic()
        if now - last < every_s and done < len(todo):
            continue
        last, rate = now, done / max(now - start, 1e-9)
        say(f"encoding {what}: {done}/{len(todo)} encoded ({rate:.1f}/s, about {(len(todo) - done) / rate:.0f} s left)")
    if out is None:  # everything was in the cache
        out = np.empty((len(texts), len(cache.vector(next(h for h in found if h)))), dtype=np.float32)
    for n, (text, hit) in enumerate(zip(texts, found)):
        if hit is not None:
            out[n] = cache.vector(hit)
        elif first[text] != n:  # a repeat of a text encoded at its first place
            out[n] = out[first[text]]
    return out
