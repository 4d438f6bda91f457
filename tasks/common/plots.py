"""matplotlib for the flows' plots, and the Prefect artifact that shows each one.

``pyplot()`` is the one place the backend is chosen (Agg: flows run headless). The plots themselves live with
what they draw (tasks/dataset/plots.py, tasks/training/plots.py, tasks/graph/plots.py, tasks/retrieval/plots.py).
``show_plot`` makes a figure a flow wrote visible in the Prefect UI: a markdown artifact with the figure's path
and the numbers it draws (``create_image_artifact`` needs an http URL; a file on the flow's machine has none).
Prefect is imported inside it only, so a ``--help`` path that imports this module does not pay for Prefect.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.common.progress import in_prefect_run

log = logging.getLogger(__name__)


def pyplot():
    """matplotlib.pyplot on the Agg backend (flows run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """``rows`` as a markdown table, ``columns`` in order (default: the first row's keys); floats to 3 decimals,
    None as an empty cell."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def plot_markdown(path: str | Path, title: str, table: str | Sequence[Mapping[str, Any]], note: str = "") -> str:
    """The artifact's text: title, where the figure is, what it shows (``note``) and its numbers (``table``: a
    markdown table, or rows for ``markdown_table``)."""
    body = table if isinstance(table, str) else markdown_table(table)
    parts = [f"# {title}", "", f"Figure: `{Path(path).absolute()}`"]
    if note:
        parts += ["", note]
    return "\n".join(parts + ["", body, ""])


def show_plot(path: str | Path, title: str, table: str | Sequence[Mapping[str, Any]], *, note: str = "",
              key: str | None = None) -> Any | None:
    """Show the figure at ``path`` as a markdown artifact of the current Prefect run (``plot_markdown``; ``key``:
    the artifact's key, lowercase letters, digits and dashes, so the UI keeps its history across runs); its id.
    Outside a flow or task run it does nothing and returns None. A display must not fail the run that drew the
    figure: an API error is logged and None returned."""
    try:
        if not in_prefect_run():
            return None
        from prefect.artifacts import create_markdown_artifact

        return create_markdown_artifact(markdown=plot_markdown(path, title, table, note), key=key,
                                        description=f"{title}: {path}")
    except Exception as exc:  # noqa: BLE001 (the figure is on disk; only its display failed)
        log.warning("plot %s written, but its Prefect artifact failed: %s: %s", path, type(exc).__name__, exc)
        return None
