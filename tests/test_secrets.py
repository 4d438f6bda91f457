"""Secrets stay out of everything a run records (issue 12): the API key is a SecretStr, credentials in
the base URL are stripped, and credentials a server echoes in an error body are redacted."""
from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from pydantic import SecretStr, TypeAdapter

from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig, redact, split_userinfo
from tasks.llm.errors import LLMEndpointError
from tests.openai_server import FakeOpenAIServer, FaultPlan
from tests.test_llm import _requests
from tests.test_llm_faults import TRANSPORTS, write_tree

KEY = "sk-config-0a1b2c3d4e5f6a7b8c9d"  # set through the LLM config, as a deployment parameter would
ENV_KEY = "sk-env-9f8e7d6c5b4a39281706"  # set in OPENAI_API_KEY
PASSWORD = "url-pass-5f3a9c1e7b"  # in the base URL: http://tgr-user:PASSWORD@host/v1
USERINFO = f"tgr-user:{PASSWORD}"
SECRETS = (KEY, ENV_KEY, PASSWORD, base64.b64encode(USERINFO.encode()).decode())


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{USERINFO}@", 1)


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


# -- redaction ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,kept", [
    (f"Received headers: Authorization: Bearer {KEY}; Host: api", "Received headers: Authorization: ***; Host: api"),
    (f'{{"headers": {{"authorization": "Bearer {KEY}", "accept": "*/*"}}}}', '{"headers": {"authorization": "***", "accept": "*/*"}}'),
    (f'{{\\"Authorization\\": \\"Bearer {KEY}\\"}}', '{\\"Authorization\\": \\"Bearer ***\\"}'),  # JSON inside JSON
    ("invalid api key sk-proj-Zx81kQ2m given", "invalid api key sk-*** given"),  # any OpenAI-style key
    (f"x-api-key={ENV_KEY}&model=m", "x-api-key=***&model=m"),
    ("proxy said Basic dGdyLXVzZXI6dXJsLXBhc3M= is wrong", "proxy said Basic *** is wrong"),
    (f"cannot reach http://{USERINFO}@gpu-box:8000/v1/chat", "cannot reach http://***@gpu-box:8000/v1/chat"),
    (f"the key {PASSWORD} is unknown", "the key *** is unknown"),  # the configured secret itself, whatever its shape
    ("HTTP 500: internal error; retry in 2 s", "HTTP 500: internal error; retry in 2 s"),  # nothing to hide: unchanged
])
def test_redact_hides_credentials_and_keeps_the_rest(text, kept):
    out = redact(text, (KEY, ENV_KEY, PASSWORD))
    assert out == kept and not _leaks(out)


# -- the config ---------------------------------------------------------------------------------
def test_the_api_key_is_a_secret_and_url_credentials_are_kept_apart(monkeypatch):
    from fastapi.encoders import jsonable_encoder

    from flows.build_tdi import BuildTDIConfig, recorded_config

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm = LLMConfig(model="m", base_url=f"http://{USERINFO}@gpu-box:8000/v1", api_key=KEY)
    assert isinstance(llm.api_key, SecretStr) and llm.resolved_api_key() == KEY
    assert llm.base_url == "http://gpu-box:8000/v1" and llm.public_base_url() == "http://gpu-box:8000/v1"
    assert llm.resolved_base_url() == f"http://{USERINFO}@gpu-box:8000/v1"  # the connection keeps them
    assert replace(llm, max_tokens=10).resolved_base_url() == llm.resolved_base_url()
    cfg = BuildTDIConfig(llm=llm)
    for shown in (repr(cfg), str(asdict(cfg)), json.dumps(jsonable_encoder(cfg)), json.dumps(recorded_config(cfg))):
        assert not _leaks(shown), shown  # repr, Prefect's parameter encoding (jsonable_encoder), the manifest
    assert "api_key" not in recorded_config(cfg)["llm"] and recorded_config(cfg)["llm"]["base_url"] == "http://gpu-box:8000/v1"
    assert split_userinfo("http://host/v1") == ("http://host/v1", "")


def test_a_deployment_parameter_dict_becomes_a_secret_too():
    from flows.build_tdi import BuildTDIConfig

    params = {"llm": {"model": "gpt-4o-mini", "api_key": KEY, "base_url": f"https://{USERINFO}@proxy.example/v1"}}
    cfg = TypeAdapter(BuildTDIConfig).validate_python(params)  # what Prefect does with a deployment's parameters
    assert isinstance(cfg.llm.api_key, SecretStr) and cfg.llm.resolved_api_key() == KEY
    assert cfg.llm.base_url == "https://proxy.example/v1" and not _leaks(repr(cfg))


# -- what a server echoes -------------------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("reply,reason", [("echo_auth_400", "llm_http_4xx"), ("echo_auth_500", "llm_http_5xx")])
def test_credentials_echoed_in_an_error_body_are_redacted_in_details_and_ledger(tmp_path, monkeypatch, transport, reply, reason):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    with FakeOpenAIServer(faults=FaultPlan(canned=(reply,) * 10)) as server:
        cfg = LLMConfig(model="fake", base_url=_with_credentials(server.base_url), api_key=KEY, cache_dir=str(tmp_path / "cache"),
                        transport=transport, max_retries=1, backoff_base_s=0.01, ledger_journal=str(tmp_path / "calls.jsonl"))
        llm = StructuredLLM(cfg)
        [result] = asyncio.run(llm.run_many(_requests(1)))
    assert not result.ok and result.reason == reason
    assert "Authorization: ***" in result.detail  # the echo happened, and was redacted
    stored = [result.detail, *(c.detail for c in llm.ledger), (tmp_path / "calls.jsonl").read_text()]
    assert not [leak for text in stored for leak in _leaks(text)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_endpoint_error_names_neither_the_key_nor_the_url_credentials(tmp_path, monkeypatch, transport):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    with FakeOpenAIServer(faults=FaultPlan(canned=("echo_auth_401",))) as server:
        cfg = LLMConfig(model="fake", base_url=_with_credentials(server.base_url), api_key=KEY, cache_dir=str(tmp_path), transport=transport)
        with pytest.raises(LLMEndpointError, match=r"HTTP 401.*Authorization: \*\*\*") as info:
            asyncio.run(StructuredLLM(cfg).run_many(_requests(1)))
    assert info.value.base_url == server.base_url and not _leaks(str(info.value))


# -- a whole build-tdi run ------------------------------------------------------------------------
def _texts(path: Path) -> Iterator[str]:
    """What a file holds, as text: Parquet and DuckDB compress strings, so they are read as rows."""
    if path.suffix == ".parquet":
        yield json.dumps(pq.read_table(path).to_pylist(), default=str)
    elif path.suffix == ".duckdb" and not path.name.endswith(".tmp"):
        con = duckdb.connect(str(path), read_only=True)
        try:
            for (table,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall():
                yield json.dumps(con.execute(f'SELECT * FROM "{table}"').fetchall(), default=str)
        finally:
            con.close()
    yield path.read_bytes().decode("utf-8", "replace")


def _scan(root: Path) -> dict[str, list[str]]:
    return {str(p): leaks for p in sorted(root.rglob("*")) if p.is_file() for text in _texts(p) if (leaks := _leaks(text))}


@pytest.mark.slow
def test_a_build_tdi_run_writes_no_secret_anywhere(tmp_path, prefect_harness, monkeypatch, capfd):
    import prefect.settings
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker

    from flows.build_tdi import build_tdi, config_from_args

    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    src = write_tree(tmp_path / "src", 10)
    # one request is refused with an error that echoes the Authorization header, one fails with it and is retried
    with FakeOpenAIServer(api_key=KEY, faults=FaultPlan(canned=("echo_auth_400", "echo_auth_500"))) as server:
        args = ["--source", "tree", "--source-path", str(src), "--sample-seed", "-1", "--limit", "-1", "--model", "fake",
                "--base-url", _with_credentials(server.base_url), "--concurrency", "1", "--cache-dir", str(tmp_path / "cache"),
                "--output-root", str(tmp_path / "out"), "--dataset", "secret-scan", "--rows-per-shard", "40", "--per-class", "1000"]
        cfg = config_from_args(args)
        cfg = replace(cfg, llm=replace(cfg.llm, api_key=KEY, backoff_base_s=0.01))
        state = build_tdi(cfg, return_state=True)
    assert state.is_completed(), state.message
    APILogWorker.drain_all(timeout=30)  # the run's logs reach Prefect's database
    out = tmp_path / "out" / "secret-scan"

    con = duckdb.connect(str(out / "records.duckdb"), read_only=True)
    details = [d for (d,) in con.execute("SELECT detail FROM record_outcomes WHERE reason = 'extract_llm_http_4xx' "
                                         "UNION ALL SELECT detail FROM llm_calls WHERE outcome LIKE 'http_%'").fetchall()]
    con.close()
    assert len(details) == 3 and all("Authorization: ***" in d for d in details)  # echoed, then redacted
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["llm"]["base_url"] == server.base_url and manifest["config"]["llm"]["base_url"] == server.base_url

    with get_client(sync_client=True) as client:
        parameters = client.read_flow_run(state.state_details.flow_run_id).parameters
    assert parameters["cfg"]["llm"]["api_key"] == "**********" and parameters["cfg"]["llm"]["base_url"] == server.base_url

    assert _scan(tmp_path) == {}  # dataset, chunks, journals, books, cache, source
    captured = capfd.readouterr()
    assert not _leaks(captured.out + captured.err)  # the run's console logs
    prefect_home = Path(prefect.settings.PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1]).parent
    assert _scan(prefect_home) == {}  # flow-run parameters, logs, artifacts (the dataset card) in Prefect's database
    prefect_text = "".join(text for p in prefect_home.rglob("*") if p.is_file() for text in _texts(p))
    assert server.base_url in prefect_text and "chunk 0: read 10" in prefect_text  # the scan sees parameters and logs
