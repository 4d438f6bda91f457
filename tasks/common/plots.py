"""matplotlib for the flows' plots: ``pyplot()`` is the one place the backend is chosen (Agg: flows run
headless). The plots themselves live with what they draw (tasks/dataset/plots.py, tasks/training/plots.py)."""
from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend (flows run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
