"""Shared pytest fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests never reach the Hugging Face hub; set before anything imports huggingface_hub/datasets,
# which read these once at import time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Flows run outside the harness start Prefect's temporary server; on a busy 2-core machine its
# default start-up wait is too short.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# Under pytest-xdist (make test: one worker per core) a second math thread per worker only waits on the
# other worker's: one thread each (torch, numpy, onnxruntime read this when they load).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout (real public datasets); skips when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not found at {SHARED_DATA} (../shared/data beside the checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def prefect_harness():
    """A throwaway Prefect API + database for tests that run real flows."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
