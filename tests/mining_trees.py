"""A small source tree written from text and mined as mine-tdi mines a folder (one process): the fixture of
the call-order and stated-precondition tests."""
from __future__ import annotations

import textwrap
from pathlib import Path

from tasks.mining.mine import MineResult, mine_files
from tasks.mining.sources import tree_files


def mine_tree(root: Path, files: dict[str, str], **options) -> MineResult:
    """``files``: path under ``root`` -> source (dedented); the whole tree mined, call orders included; ``options``:
    more of ``mine_files``'s (``keyed_state=True``)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return mine_files(tree_files(root, "tree"), workers=1, **options)
