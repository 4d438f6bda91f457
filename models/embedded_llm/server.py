"""EmbeddedLLMServer: the ``serve`` process as a child of the caller for a ``with`` block (start,
wait until it lists its model and generates, fall back to the other backend, stop)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from models.embedded_llm.backends import (
    AUTO,
    INSTALL_HINTS,
    LLAMA_CPP_PYTHON,
    XLLAMACPP,
    backend_installed,
    default_backend,
    describe_exit,
)
from models.embedded_llm.catalog import DEFAULT_MODEL
from models.embedded_llm.fetch import cache_dir, fetch_model
from models.embedded_llm.serving import free_port

log = logging.getLogger(__name__)


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
                        f"{INSTALL_HINTS[LLAMA_CPP_PYTHON]}"
                    ) from None
                self.fallback_reason = f"the xllamacpp server failed: {exc}"
        elif fallback_ok:
            self.fallback_reason = "xllamacpp is not installed"
        else:
            raise EmbeddedLLMError(
                "no embedded LLM backend is installed: neither xllamacpp "
                f"({INSTALL_HINTS[XLLAMACPP]}) nor llama-cpp-python"
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
        repo_root = Path(__file__).resolve().parents[2]
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
