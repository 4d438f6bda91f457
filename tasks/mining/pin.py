"""The pinned mined corpus: every source file mine-tdi read with its sha256, grouped by package with the
package's version (``sources.json`` in the dataset folder, a summary in the manifest), and the exact file
list of a rerun from such a pin (``--pin``), refused when a pinned file is missing or changed."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks.common.checksums import sha256_file
from tasks.mining import sources
from tasks.mining.sources import FileItem, top_package

SOURCES_FILE = "sources.json"  # in the dataset folder, published with the shards
PIN_FORMAT = "tgr-mined-sources/1"
FILE_KEYS = ("origin", "root", "rel", "module", "is_package", "flows_only", "sha256")
INSTALLED_ORIGINS = ("stdlib", "site-packages")  # found again under the running interpreter's roots on a rerun
SHOWN = 5  # missing / changed files named in a refusal


class PinError(ValueError):
    """A pin that cannot be mined exactly: unreadable, or its files are missing or changed."""


def _rel(item: FileItem) -> tuple[str, str]:
    if item.root:
        return item.root, os.path.relpath(item.path, item.root)
    return "", item.path  # not listed by tree_files: the path is the whole name


def file_records(items: Sequence[FileItem]) -> list[dict[str, Any]]:
    """One record per mined file, in mining order: where it was listed (origin, root, path below the
    root), the module it was read as, and the sha256 of its bytes."""
    out = []
    for item in items:
        root, rel = _rel(item)
        out.append({"origin": item.origin, "root": root, "rel": rel, "module": item.module, "is_package": item.is_package,
                    "flows_only": item.flows_only, "sha256": sha256_file(Path(item.path))})
    return out


def _installed_files() -> dict[str, tuple[str, str]]:
    """Real path of each ``.py`` file an installed distribution lists (its RECORD) -> (name, version)."""
    out: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        base = os.path.realpath(dist.locate_file(""))
        name, version = dist.metadata["Name"], dist.version
        for f in dist.files or ():
            if f.suffix == ".py":
                out[os.path.normpath(os.path.join(base, str(f)))] = (name, version)
    return out


def _digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def package_table(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every source package mined, with its version and a sha256 over its files (``rel<TAB>sha256``
    lines, sorted). The standard library is one package, versioned by the Python version; a
    site-packages file belongs to the installed distribution whose RECORD lists it (importlib.metadata),
    else to its top-level module, version None; a ``tree`` package is its top-level module, version None
    (its hash is its identity)."""
    installed = _installed_files() if any(r["origin"] == "site-packages" for r in records) else {}
    real_roots: dict[str, str] = {}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if r["origin"] == "stdlib":
            key, dist = ("stdlib", "stdlib"), ("stdlib", platform.python_version())
        else:
            root = real_roots.setdefault(r["root"], os.path.realpath(r["root"]) if r["root"] else "")
            dist = installed.get(os.path.normpath(os.path.join(root, r["rel"]))) if r["origin"] == "site-packages" else None
            key = (r["origin"], dist[0] if dist else top_package(r["module"]))
        group = groups.setdefault(key, {"origin": key[0], "package": key[1], "distribution": dist[0] if dist else None,
                                        "version": dist[1] if dist else None, "lines": []})
        group["lines"].append(f"{r['rel']}\t{r['sha256']}")
    table = []
    for key in sorted(groups):
        g = groups[key]
        lines = sorted(g.pop("lines"))
        table.append({**g, "files": len(lines), "sha256": _digest(lines)})
    return table


def describe_sources(records: Sequence[dict[str, Any]], pinned_from: str | None = None) -> dict[str, Any]:
    """The whole ``sources.json``: the Python version, every package (``package_table``), every file
    record, and ``sha256`` over the files in mining order (what a pin fixes)."""
    return {"format": PIN_FORMAT, "python": platform.python_version(), "pinned_from": pinned_from,
            "sha256": _digest([f"{r['origin']}\t{r['rel']}\t{r['sha256']}" for r in records]),
            "n_files": len(records), "packages": package_table(records), "files": list(records)}


def manifest_summary(described: dict[str, Any]) -> dict[str, Any]:
    """What the manifest records of the sources: all of ``sources.json`` but the per-file records."""
    return {"file": SOURCES_FILE, **{k: v for k, v in described.items() if k != "files"}}


def write_sources(folder: Path, described: dict[str, Any]) -> Path:
    path = Path(folder) / SOURCES_FILE
    path.write_text(json.dumps(described, indent=1))
    return path


def read_pin(path: str | Path) -> dict[str, Any]:
    """A ``sources.json`` to rerun from, checked for shape (not yet against the files)."""
    path = Path(path)
    if path.is_dir():
        path = path / SOURCES_FILE  # a dataset folder: its sources.json
    try:
        pin = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PinError(f"--pin {path}: not a readable {SOURCES_FILE} ({exc})") from exc
    if not isinstance(pin, dict) or pin.get("format") != PIN_FORMAT or not isinstance(pin.get("files"), list):
        raise PinError(f"--pin {path}: not a {SOURCES_FILE} of format {PIN_FORMAT} (a mined dataset folder's file)")
    bad = [i for i, r in enumerate(pin["files"]) if not isinstance(r, dict) or set(FILE_KEYS) - set(r)]
    if bad:
        raise PinError(f"--pin {path}: file record {bad[0]} lacks one of {', '.join(FILE_KEYS)}")
    return pin


def _candidate_roots(record: dict[str, Any]) -> list[str]:
    """Where a pinned file is looked for: the running interpreter's stdlib / site-packages (so a pin
    made in another checkout or venv still applies), then the root it was listed under."""
    roots = [str(r) for r in sources.default_roots(record["origin"])] if record["origin"] in INSTALLED_ORIGINS else []
    return [*roots, record["root"]] if record["root"] not in roots else roots


def pinned_items(pin: dict[str, Any], label: str = "--pin") -> tuple[list[FileItem], list[dict[str, Any]]]:
    """The pin's files as ``FileItem`` in the pinned order, and their records as found now.

    Refuses (``PinError``) when any pinned file is missing or its sha256 differs, naming them: a
    rerun that skipped or re-read them would mine other pairs, other hard negatives and another
    balance, the drift a pin exists to rule out.
    """
    items, records, missing, changed = [], [], [], []
    for r in pin["files"]:
        found = next((root for root in _candidate_roots(r) if os.path.isfile(os.path.join(root, r["rel"]))), None)
        if found is None:
            missing.append(f"{r['origin']}:{r['rel']}")
            continue
        path = os.path.normpath(os.path.join(found, r["rel"])) if found else r["rel"]
        digest = sha256_file(Path(path))
        if digest != r["sha256"]:
            changed.append(f"{path} (pinned sha256 {r['sha256'][:12]}, now {digest[:12]})")
            continue
        items.append(FileItem(path, r["module"], bool(r["is_package"]), r["origin"], bool(r["flows_only"]), found))
        records.append({**{k: r[k] for k in FILE_KEYS}, "root": found})
    if missing or changed:
        parts = [f"{len(names)} {what}" + (f" ({', '.join(names[:SHOWN])}{', ...' if len(names) > SHOWN else ''})" if names else "")
                 for what, names in (("missing", missing), ("changed", changed))]
        raise PinError(f"{label}: {len(missing) + len(changed)} of {len(pin['files'])} pinned source files cannot be "
                       f"mined as pinned: {'; '.join(parts)}. A rerun from this pin needs exactly those files; mine "
                       "without --pin to make a new corpus (and a new pin).")
    return items, records
