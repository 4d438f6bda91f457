"""Strict JSON files of a training run (metrics, calibration.json): no NaN, written atomically."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from tasks.common.atomic import hidden_sibling


def strict_json(data: Any) -> Any:
    """``data`` with NaN/inf replaced by None and numpy scalars by Python ones: valid strict JSON."""
    if isinstance(data, dict):
        return {str(k): strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    if isinstance(data, np.generic):
        data = data.item()
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, Path):
        return str(data)
    return data


def write_json(path: Path, data: Any) -> Path:
    """Strict JSON (no NaN): any reader, not only Python's, can load it. Written to a temp file and
    renamed over ``path``: a kill mid-write leaves the previous file, never half of one."""
    text = json.dumps(strict_json(data), indent=2, default=str, allow_nan=False) + "\n"
    tmp = hidden_sibling(path, "tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
