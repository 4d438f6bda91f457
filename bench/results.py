"""Write one benchmark's section of bench/RESULTS.md, leaving the other sections as they are."""
from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nEach section is rewritten by the benchmark named in it; rerun with the command shown.\n"


def write_section(title: str, body: str) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)
