"""The ``serve`` process: one catalogue model served over HTTP in this process until SIGTERM or
SIGINT, by xllamacpp or the llama-cpp-python app under uvicorn (thread count, server settings,
stopping with the parent)."""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

from models.embedded_llm.backends import (
    AUTO,
    BACKEND_ENV,
    INSTALL_HINTS,
    LLAMA_CPP_PYTHON,
    XLLAMACPP,
    backend_installed,
    default_backend,
    xllamacpp_import_problem,
)
from models.embedded_llm.catalog import DEFAULT_MODEL
from models.embedded_llm.fetch import fetch_model
from models.embedded_llm.response_format import ResponseFormatTranslator

log = logging.getLogger(__name__)

THREADS_ENV = "TGR_LLM_THREADS"
# llama.cpp keeps prompt caches of idle slots in RAM, 8 GiB by default: bound it on shared boxes.
XLLAMACPP_CACHE_RAM_MIB = 1024


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
            f"for these CPUs: {INSTALL_HINTS[LLAMA_CPP_PYTHON]}"
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
        xllamacpp_failure = (xllamacpp_import_problem() if backend_installed(XLLAMACPP)
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
