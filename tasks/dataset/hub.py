"""Push a published TDI dataset folder to the Hugging Face hub as one commit (``--push-to-hub REPO_ID``).

What goes up is the published version (``tasks.dataset.publish``): ``shards/``, ``README.md`` (the card, whose
YAML makes the repo load with ``datasets.load_dataset(REPO_ID)``), ``manifest.json``, ``quality.json``,
mine-tdi's ``sources.json`` and its ``mix.png`` (the plot the card shows). ``records.duckdb`` stays local: it is
the run's books (every record's outcome, the LLM calls), a DuckDB file no ``datasets`` loader reads, and the
manifest and card already carry its totals.

The token comes from the environment (``HF_TOKEN``) only: it is passed to ``huggingface_hub`` and written
nowhere (not the manifest, the card, the logs or an error). ``HF_ENDPOINT`` names another hub (a test's fake).
A failed upload leaves the local dataset as published and says how to retry the upload alone:

    python -m tasks.dataset.hub artifacts/tdi/tdi-mined user/tdi-mined [--private]
"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from tasks.dataset.publish import MANIFEST, OPTIONAL_PARTS, PUBLISHED_PARTS, DatasetBusyError, dataset_lock, published_version

TOKEN_ENV = "HF_TOKEN"
REPO_TYPE = "dataset"
# namespace/name, as the hub spells repo ids (letters, digits, '-', '_', '.'; no '--' or '..')
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


class HubPushError(RuntimeError):
    """The upload failed; the local dataset is published and unchanged."""


def check_repo_id(repo_id: str | None) -> None:
    """The value of ``--push-to-hub`` (no environment): a ValueError naming the flag."""
    if repo_id is None:
        return
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id or repo_id.endswith((".", "-")):
        raise ValueError(f"--push-to-hub {repo_id!r}: a hub dataset repo id, namespace/name (e.g. your-user/tdi-mined)")


def check_push(repo_id: str | None) -> None:
    """Before any work: a push can be made from here (a token in HF_TOKEN, the hub not switched off)."""
    if repo_id is None:
        return
    if not os.environ.get(TOKEN_ENV, "").strip():
        raise ValueError(f"--push-to-hub {repo_id} needs a hub token with write access in the environment variable "
                         f"{TOKEN_ENV} (https://huggingface.co/settings/tokens); it is read from there only")
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise ValueError(f"--push-to-hub {repo_id}: HF_HUB_OFFLINE is set, which stops every request to the hub (the "
                         "Makefile exports HF_HUB_OFFLINE=1): run with HF_HUB_OFFLINE=0")


def hub_folder(out_dir: Path) -> Path:
    """The folder whose files go up: the published version (its parts, nothing of the run's books)."""
    version = published_version(out_dir)
    if version is None or not (version / MANIFEST).is_file():
        raise HubPushError(f"{out_dir} holds no published dataset (no {MANIFEST}): nothing to push")
    return version


def retry_command(out_dir: Path, repo_id: str, private: bool) -> str:
    return f"python -m tasks.dataset.hub {out_dir} {repo_id}" + (" --private" if private else "")


def _cause(exc: BaseException, token: str) -> str:
    """The first line of what went wrong, never the token."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}".replace(token, "***")


def push_dataset(out_dir: Path, repo_id: str, private: bool = False) -> str:
    """Upload the published dataset at ``out_dir`` to the hub dataset repo ``repo_id`` (created when missing,
    private when asked) as one commit; returns the commit's URL. Remote shards this version does not have are
    deleted in the same commit (else the card's ``shards/<split>-*`` globs would read a stale shard); any other
    file of the repo is left alone. Raises HubPushError with the cause and the retry command."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    check_push(repo_id)
    folder = hub_folder(out_dir)
    token = os.environ[TOKEN_ENV].strip()
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    expected = {*PUBLISHED_PARTS, *OPTIONAL_PARTS, MANIFEST}
    stray = [f for f in files if f.split("/", 1)[0] not in expected]
    if stray:  # a version holds only published parts; anything else is no dataset file
        raise HubPushError(f"{folder} holds files that are no published part: {stray[:5]}")
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        # not --private: None, the hub's default for a new repo (an organisation may make it private); an existing
        # repo keeps its visibility either way
        api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True, private=True if private else None)
        remote = api.list_repo_files(repo_id, repo_type=REPO_TYPE)
        stale = [f for f in remote if f not in files and (f.startswith("shards/") or f in OPTIONAL_PARTS)]
        operations = [*(CommitOperationDelete(path_in_repo=f) for f in stale),
                      *(CommitOperationAdd(path_in_repo=f, path_or_fileobj=str(folder / f)) for f in files)]
        info = api.create_commit(repo_id, operations, repo_type=REPO_TYPE,
                                 commit_message=f"{out_dir.name}: published version {folder.name}")
    except Exception as exc:  # noqa: BLE001 - every hub or network failure is said the same way
        raise HubPushError(
            f"pushing {out_dir} to the hub dataset {repo_id} failed ({_cause(exc, token)}); the local dataset is "
            f"published and unchanged: retry the upload alone with `{retry_command(out_dir, repo_id, private)}`"
        ) from None
    return str(info.commit_url)


def main(argv: list[str] | None = None) -> None:
    """``python -m tasks.dataset.hub OUT_DIR REPO_ID [--private]``: push (again) a published dataset folder."""
    parser = argparse.ArgumentParser(prog="python -m tasks.dataset.hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="a published TDI dataset folder (artifacts/tdi/<dataset>)")
    parser.add_argument("repo_id", help="hub dataset repo, namespace/name")
    parser.add_argument("--private", action="store_true", help="create the repo private (an existing repo keeps its visibility)")
    args = parser.parse_args(argv)
    try:
        check_repo_id(args.repo_id)
        with dataset_lock(args.out_dir):  # no run republishes (and tidies away) the version while it goes up
            url = push_dataset(args.out_dir, args.repo_id, args.private)
    except (ValueError, HubPushError, DatasetBusyError) as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    print(url)


if __name__ == "__main__":
    main()
