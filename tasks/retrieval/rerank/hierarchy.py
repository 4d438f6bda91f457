"""The tool hierarchy of Alg. 1 and Alg. 2: the tool each API belongs to, per data set.

ToolBench ``tool::api`` ids; TMDB the description prefix (``[Movie ...]``, 8 groups); UltraTool the
domain (the tool's group); any other set (API-Bank) has no tool level: every API is its own tool, so
Alg. 1 keeps R's order and Alg. 2 only merges near-duplicates.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

_TMDB_PREFIX = re.compile(r"\s*\[\s*([A-Za-z]+)")
_TMDB_TYPOS = {"Perso": "Person"}
HIERARCHY_SOURCE = {
    "toolbench": "ToolBench tool of `tool::api`",
    "tmdb": "TMDB description prefix `[Movie ...]`",
    "ultratool": "UltraTool domain",
    "none": "none: every API is its own tool",
}


def hierarchy_kind(dataset: str) -> str:
    if dataset.startswith("toolbench"):
        return "toolbench"
    return dataset if dataset in ("tmdb", "ultratool") else "none"


def tool_parents(dataset: str, tool_ids: Sequence[str], groups: Sequence[str] | None = None,
                 descriptions: Sequence[str] | None = None) -> list[str]:
    """The tool each API belongs to (the hierarchy of Alg. 1 and Alg. 2)."""
    kind = hierarchy_kind(dataset)
    if kind == "toolbench":
        return [t.split("::", 1)[0] if "::" in t else t for t in tool_ids]
    if kind == "tmdb":
        if descriptions is None:
            raise ValueError("TMDB's hierarchy needs the tool descriptions")
        out = []
        for t, d in zip(tool_ids, descriptions):
            m = _TMDB_PREFIX.match(d or "")
            out.append(_TMDB_TYPOS.get(m.group(1), m.group(1)) if m else t)
        return out
    if kind == "ultratool":
        if groups is None:
            raise ValueError("UltraTool's hierarchy needs the tool groups (domains)")
        return list(groups)
    return list(tool_ids)
