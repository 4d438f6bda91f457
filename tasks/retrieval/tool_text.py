"""What the sentence encoder and the lexical baselines see of a tool: the embed text styles
(structured document or description only) and each data set's default style.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EMBED_STYLES = ("structured", "description")
# Paper, Sec. 4: ToolBench embeddings use a structured document (name, description, parameters),
# API-Bank embeddings the description only.
DEFAULT_EMBED_STYLE = {"apibank": "description"}


def embed_style_for(dataset: str) -> str:
    return DEFAULT_EMBED_STYLE.get(dataset, "structured")


def embed_text(doc: dict[str, Any], style: str) -> str:
    """Text of a tool for the sentence encoder and the lexical baselines."""
    if style == "description":
        return doc["description"]
    if style != "structured":
        raise ValueError(f"unknown embed style {style!r}; known: {', '.join(EMBED_STYLES)}")

    def params(items: Sequence[dict]) -> str:
        return "; ".join(
            f"{p['name']} ({p['type']})" + (f": {p['description']}" if p.get("description") else "") for p in items
        ) or "none"

    return (f"name: {doc['name']}\ndescription: {doc['description']}\n"
            f"input parameters: {params(doc['input_params'])}\noutput parameters: {params(doc['output_params'])}")
