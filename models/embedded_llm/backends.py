"""Which server implementation serves: the backends (xllamacpp, llama-cpp-python), whether
each is installed and imports here, the one asked for (``$TGR_LLM_BACKEND``), how to install
them."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys

BACKEND_ENV = "TGR_LLM_BACKEND"

XLLAMACPP = "xllamacpp"
LLAMA_CPP_PYTHON = "llama-cpp-python"
BACKENDS = (XLLAMACPP, LLAMA_CPP_PYTHON)  # in order of preference
AUTO = "auto"
_BACKEND_MODULES = {XLLAMACPP: "xllamacpp", LLAMA_CPP_PYTHON: "llama_cpp"}
INSTALL_HINTS = {
    XLLAMACPP: "`make setup-llm` (installs the pinned prebuilt xllamacpp wheel, no compile)",
    LLAMA_CPP_PYTHON: (
        "`rm -f .venv/.llm-installed && make setup-llm LLAMA_BACKEND=llama-cpp-python` (builds "
        "llama-cpp-python from source: about 10 minutes on 2 cores, see docs/embedded-llm.md)"
    ),
}


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


def xllamacpp_import_problem() -> str | None:
    """Import xllamacpp in a throwaway interpreter: a native library that dies on this CPU
    (SIGILL) must not take the serving process with it. None when it imports."""
    proc = subprocess.run([sys.executable, "-c", "import xllamacpp"], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode == 0:
        return None
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
    return f"`import xllamacpp` {describe_exit(proc.returncode)}" + (f": {tail}" if tail else "")


def backend_versions() -> dict[str, str | None]:
    """Installed version of each backend's distribution, None when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for backend in BACKENDS:
        try:
            versions[backend] = version(backend) if backend_installed(backend) else None
        except PackageNotFoundError:
            versions[backend] = "?"
    return versions

