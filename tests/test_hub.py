"""Hub-ready dataset folders (issue 23 items 1-2): the card's YAML makes ``datasets.load_dataset(<folder>)`` load
both splits with ``label`` a ClassLabel, and ``--push-to-hub`` uploads the published folder as one commit to a
hub (here a local fake standing in for it through ``HF_ENDPOINT``)."""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from schemas.tdi import ID2LABEL
from tests.conftest import REPO_ROOT
from tests.test_mining import _bigger_tree

TOKEN = "hf_fake_token_0123456789abcdef"
REPO = "tester/tdi-mini"


class FakeHub:
    """The hub endpoints ``HfApi.create_repo``, ``list_repo_files`` and ``create_commit`` call (read from
    huggingface_hub's hf_api.py / _commit_api.py): repo create, tree listing, YAML validation, preupload
    (every file 'regular', so its bytes come inline in the commit) and the NDJSON commit. ``fail_with``: the
    status every request gets instead (a hub that is down)."""

    def __init__(self, fail_with: int | None = None):
        self.fail_with = fail_with
        self.repos: dict[str, dict[str, bytes]] = {}  # repo id -> path -> bytes (the main branch)
        self.created: list[dict[str, Any]] = []
        self.commits: list[dict[str, Any]] = []
        self.auth: set[str] = set()

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self) -> None:
                hub.auth.add(self.headers.get("Authorization", ""))
                if hub.fail_with:
                    return self._send(hub.fail_with, {"error": "injected"})
                match = re.match(r"^/api/datasets/([^/]+/[^/]+)/tree/main", self.path)
                if not match or match.group(1) not in hub.repos:
                    return self._send(404, {"error": f"no route {self.path}"})
                files = hub.repos[match.group(1)]
                self._send(200, [{"type": "file", "path": p, "size": len(b), "oid": "0" * 40} for p, b in sorted(files.items())])

            def do_POST(self) -> None:
                hub.auth.add(self.headers.get("Authorization", ""))
                body = self._body()
                if hub.fail_with:
                    return self._send(hub.fail_with, {"error": "injected"})
                if self.path == "/api/repos/create":
                    payload = json.loads(body)
                    hub.created.append(payload)
                    repo = f"{payload['organization']}/{payload['name']}"
                    if repo in hub.repos:
                        # the hub's 409 names the repo's url too: create_repo(exist_ok=True) returns it
                        return self._send(409, {"error": "You already created this dataset repo",
                                                "url": f"{hub.url}/datasets/{repo}"})
                    hub.repos[repo] = {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"}
                    return self._send(200, {"url": f"{hub.url}/datasets/{repo}"})
                if self.path == "/api/validate-yaml":
                    return self._send(200, {"errors": [], "warnings": []})
                match = re.match(r"^/api/datasets/([^/]+/[^/]+)/(preupload|commit)/main", self.path)
                if not match or match.group(1) not in hub.repos:
                    return self._send(404, {"error": f"no route {self.path}"})
                repo, action = match.groups()
                if action == "preupload":
                    files = json.loads(body)["files"]
                    return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                                      for f in files]})
                lines = [json.loads(line) for line in body.splitlines() if line.strip()]
                added = {x["value"]["path"]: base64.b64decode(x["value"]["content"]) for x in lines if x["key"] == "file"}
                deleted = [x["value"]["path"] for x in lines if x["key"] == "deletedFile"]
                hub.commits.append({"repo": repo, "header": lines[0]["value"], "added": added, "deleted": deleted,
                                    "other": [x["key"] for x in lines[1:] if x["key"] not in ("file", "deletedFile")]})
                for path in deleted:
                    hub.repos[repo].pop(path, None)
                hub.repos[repo].update(added)
                self._send(200, {"commitUrl": f"{hub.url}/datasets/{repo}/commit/{len(hub.commits):040d}",
                                 "commitOid": f"{len(hub.commits):040d}", "pullRequestUrl": None})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub_env(monkeypatch, tmp_path):
    """A token in HF_TOKEN and the hub reachable (the suite runs offline: conftest sets HF_HUB_OFFLINE=1,
    which huggingface_hub reads once at import)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    return monkeypatch


def _mine_args(src: Path, out: Path, name: str, *extra: str) -> list[str]:
    return ["--source", "tree", "--tree-paths", str(src), "--output-root", str(out), "--dataset", name,
            "--workers", "1", "--validation-fraction", "0.2", "--rows-per-shard", "40", *extra]


def _load_and_check(folder: Path, manifest: dict[str, Any]) -> Any:
    """``datasets.load_dataset(folder)``: both splits, the manifest's row counts, label a ClassLabel of the
    three names in schemas.tdi order, every shard column there."""
    import datasets

    # a cache of this test's own: datasets reads HF_DATASETS_CACHE (hub_env) only when first imported, and an
    # xdist worker may have imported it for an earlier test
    ds = datasets.load_dataset(str(folder), cache_dir=str(folder.parent / "hf-cache"))
    assert set(ds) == set(manifest["counts"]) == {"train", "validation"}
    for split, per in manifest["counts"].items():
        assert ds[split].num_rows == sum(per.values())
        label = ds[split].features["label"]
        assert isinstance(label, datasets.ClassLabel) and label.names == [ID2LABEL[k] for k in sorted(ID2LABEL)]
        assert ds[split].features["kind"] == datasets.Value("string")
        assert ds[split].features["support"] == datasets.Value("int32")
        assert ds[split].column_names == manifest["schema"]["fields"]
        # the label names agree with the shards' own label_name column, row by row
        assert [label.int2str(x) for x in ds[split]["label"]] == ds[split]["label_name"]
    return ds


def test_a_mined_folder_loads_with_datasets_and_pushes_to_the_hub_as_one_commit(tmp_path, prefect_harness, hub_env):
    import datasets
    from huggingface_hub import DatasetCard

    from flows.mine_tdi import _parse_args, mine_tdi

    src = _bigger_tree(tmp_path / "src")
    with FakeHub() as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        cfg = _parse_args(_mine_args(src, tmp_path / "out", "mini", "--push-to-hub", REPO, "--private"))
        cfg.check_inputs()
        manifest = mine_tdi(cfg)
    out = tmp_path / "out" / "mini"
    assert len(manifest["shards"]) > 2  # several shards per split: the globs must take them all
    ds = _load_and_check(out, manifest)

    # the card: hub YAML first, then the body; its own snippet is the load_dataset call above
    text = (out / "README.md").read_text()
    assert text.startswith("---\n")
    card = DatasetCard.load(out / "README.md")
    data = card.data.to_dict()
    assert data["license"] == "other" and data["license_name"] and data["task_categories"] == ["text-classification"]
    assert data["size_categories"] == ["n<1K"] and data["pretty_name"] == "mini: mined TDI tool-dependency pairs"
    assert data["configs"] == [{"config_name": "default", "data_files": [
        {"split": "train", "path": "shards/train-*.parquet"}, {"split": "validation", "path": "shards/validation-*.parquet"}]}]
    assert "## License" in text and "sources.json" in text.split("## License", 1)[1]
    code = text.split("## Load\n```python\n", 1)[1].split("```", 1)[0]
    assert f"datasets.load_dataset({json.dumps(str(out))})" in code and f'load_dataset("{REPO}")' in code
    scope: dict = {}
    exec(code, scope)
    assert {s: scope["ds"][s].num_rows for s in scope["ds"]} == {s: ds[s].num_rows for s in ds}
    assert scope["df"].height == manifest["total_rows"]

    # the push: one private repo, one commit of exactly the published parts, no books, no token anywhere
    assert [(c["name"], c["organization"], c["type"], c["visibility"]) for c in hub.created] == [
        ("tdi-mini", "tester", "dataset", "private")]
    assert len(hub.commits) == 1
    commit = hub.commits[0]
    shard_files = {s["file"] for s in manifest["shards"]}
    assert set(commit["added"]) == {"README.md", "manifest.json", "quality.json", "sources.json", "mix.png", *shard_files}
    assert commit["deleted"] == [] and commit["other"] == []
    assert commit["added"]["README.md"] == (out / "README.md").read_bytes()
    assert all(commit["added"][f] == (out / f).read_bytes() for f in shard_files)
    assert json.loads(commit["added"]["manifest.json"]) == manifest
    assert manifest["config"]["push_to_hub"] == REPO
    assert hub.auth == {f"Bearer {TOKEN}"}
    assert not [f for f, b in commit["added"].items() if TOKEN.encode() in b]
    logs = list((REPO_ROOT / "artifacts" / "logs").glob("*.log"))  # the CLI's run logs, if any run wrote one
    assert not [p for p in logs if TOKEN in p.read_text(errors="replace")]

    # what the hub holds loads as the local folder does (a download of the repo: its files in a folder)
    copy = tmp_path / "from-hub"
    for path, blob in hub.repos[REPO].items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_bytes(blob)
    from_hub = _load_and_check(copy, manifest)
    assert from_hub["train"]["pair_id"] == ds["train"]["pair_id"]
    assert isinstance(datasets.load_dataset(str(copy), split="validation", cache_dir=str(copy.parent / "hf-cache")
                                            ).features["label"], datasets.ClassLabel)


def test_a_second_push_deletes_stale_shards_and_leaves_other_files(tmp_path, prefect_harness, hub_env):
    from flows.mine_tdi import _parse_args, mine_tdi
    from tasks.dataset.hub import push_dataset

    src = _bigger_tree(tmp_path / "src")
    manifest = mine_tdi(_parse_args(_mine_args(src, tmp_path / "out", "mini")))
    out = tmp_path / "out" / "mini"
    with FakeHub() as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        hub.repos[REPO] = {"shards/train-00000-of-00009.parquet": b"old", "LICENSE": b"mine", "sources.json": b"{}"}
        url = push_dataset(out, REPO)
    assert url.endswith(f"{1:040d}") and hub.created[0].get("visibility") is None  # not asked private: left as is
    commit = hub.commits[0]
    assert commit["deleted"] == ["shards/train-00000-of-00009.parquet"]  # its glob would read a stale shard
    assert set(hub.repos[REPO]) == {"LICENSE", "README.md", "manifest.json", "quality.json", "sources.json", "mix.png",
                                    *(s["file"] for s in manifest["shards"])}


def _published_books(out: Path) -> dict[str, bytes]:
    """Every published file of ``out`` by name, through its links (what a reader sees)."""
    return {p.relative_to(out).as_posix(): p.read_bytes()
            for part in ("shards", "README.md", "manifest.json", "quality.json", "sources.json", "mix.png")
            for p in ([out / part] if (out / part).is_file() else sorted((out / part).glob("*")))}


def test_a_failed_upload_leaves_the_dataset_published_and_says_why_and_how_to_retry(tmp_path, prefect_harness, hub_env):
    from prefect.settings import get_current_settings

    from tasks.dataset import hub as hub_module
    from tasks.dataset.publish import published_version

    src = _bigger_tree(tmp_path / "src")
    out = tmp_path / "out" / "mini"
    with FakeHub(fail_with=500) as down:
        env = {**os.environ, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": down.url,
               "PREFECT_API_URL": str(get_current_settings().api.url), "PREFECT_LOGGING_LEVEL": "WARNING"}
        run = subprocess.run([sys.executable, "-m", "flows.mine_tdi", *_mine_args(src, tmp_path / "out", "mini"),
                              "--push-to-hub", REPO], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stderr[-3000:]
    error = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(error) == 1, run.stderr[-3000:]
    retry = f"python -m tasks.dataset.hub {out} {REPO}"
    assert f"pushing {out} to the hub dataset {REPO} failed" in error[0] and "500" in error[0]
    assert "the local dataset is published and unchanged" in error[0] and retry in error[0]
    assert TOKEN not in run.stderr + run.stdout
    log = re.search(r"traceback: (\S+)", run.stderr)
    assert log and TOKEN not in (REPO_ROOT / log.group(1)).read_text()
    # the dataset is published whole: the manifest describes the shards beside it, and it loads
    manifest = json.loads((out / "manifest.json").read_text())
    from tests.test_crash_safety import _sha256

    assert all(_sha256(out / s["file"]) == s["sha256"] for s in manifest["shards"])
    _load_and_check(out, manifest)
    before = _published_books(out)

    # the retry the line names, against a hub that works: the same files go up, the local folder is untouched
    with FakeHub() as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        hub_module.main([str(out), REPO])
    assert set(hub.commits[0]["added"]) == set(before) and _published_books(out) == before
    assert published_version(out) is not None

    # a hub that is not running at all: the same one line, the cause a connection error
    hub_env.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(hub_module.HubPushError, match=r"failed \(.*(Connect|connect).*\); the local dataset is published"):
        hub_module.push_dataset(out, REPO)
    assert _published_books(out) == before


def test_a_push_without_a_token_or_with_the_hub_offline_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from flows.build_tdi import config_from_args
    from flows.mine_tdi import _parse_args

    src = _bigger_tree(tmp_path / "src")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    cfg = _parse_args(_mine_args(src, tmp_path / "out", "mini", "--push-to-hub", REPO))
    with pytest.raises(ValueError, match="needs a hub token with write access in the environment variable HF_TOKEN"):
        cfg.check_inputs()
    build_args = ["--source", "tree", "--source-path", str(src), "--base-url", "http://127.0.0.1:9/v1",
                  "--output-root", str(tmp_path / "out"), "--push-to-hub", REPO]
    with pytest.raises(SystemExit) as exit_info:
        config_from_args(build_args)
    assert exit_info.value.code == 2 and "--push-to-hub tester/tdi-mini needs a hub token" in capsys.readouterr().err
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set.*run with HF_HUB_OFFLINE=0"):
        cfg.check_inputs()
    assert not (tmp_path / "out").exists()  # refused before a folder exists
    # the command line says it as a usage error, before Prefect starts
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    run = subprocess.run([sys.executable, "-m", "flows.mine_tdi", *_mine_args(src, tmp_path / "out", "mini"),
                          "--push-to-hub", REPO], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip().splitlines()[-1].startswith("python -m flows.mine_tdi: error: --push-to-hub")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("repo_id", ["no-namespace", "a/b/c", "user/", "user/a--b", "user/name with space"])
def test_the_configs_refuse_a_bad_repo_id(repo_id):
    from flows.build_tdi import BuildTDIConfig
    from flows.mine_tdi import MineTDIConfig

    for config in (BuildTDIConfig, MineTDIConfig):
        with pytest.raises(ValueError, match=re.escape(f"--push-to-hub {repo_id!r}: a hub dataset repo id, namespace/name")):
            config(push_to_hub=repo_id)
    assert BuildTDIConfig(push_to_hub="user/tdi.v2_x-1").push_to_hub == "user/tdi.v2_x-1"


@pytest.mark.slow
def test_a_build_tdi_folder_loads_with_datasets_and_pushes(shared_data, tmp_path, prefect_harness, hub_env):
    from flows.build_tdi import build_tdi, config_from_args
    from tests.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server, FakeHub() as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        manifest = build_tdi(config_from_args([
            "--source", "codesearchnet", "--source-path", str(shared_data / "codesearchnet"), "--limit", "60",
            "--base-url", server.base_url, "--model", "fake", "--cache-dir", str(tmp_path / "cache"),
            "--output-root", str(tmp_path / "out"), "--dataset", "built", "--rows-per-shard", "20", "--push-to-hub", REPO]))
    out = tmp_path / "out" / "built"
    _load_and_check(out, manifest)
    text = (out / "README.md").read_text()
    assert text.startswith("---\n") and "license: other" in text and "model" in text.split("## License", 1)[1]
    assert "](mix.png)" in text  # the shared publish step draws build-tdi's mix too
    commit = hub.commits[0]
    assert set(commit["added"]) == {"README.md", "manifest.json", "quality.json", "mix.png",
                                    *(s["file"] for s in manifest["shards"])}
    assert "records.duckdb" not in commit["added"] and (out / "records.duckdb").exists()
    assert not [f for f, b in commit["added"].items() if TOKEN.encode() in b] and hub.auth == {f"Bearer {TOKEN}"}
