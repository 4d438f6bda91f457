"""bench.calibration_crossfit's cut for a recall: the highest cut whose called dependencies reach it."""
from types import SimpleNamespace

import numpy as np
import pytest

from bench.calibration_crossfit import counts, cut_for_recall


def _pairs(labels):
    return [SimpleNamespace(label=label) for label in labels]


def test_the_cut_for_a_recall_is_the_highest_that_reaches_it_and_counts_the_none_pairs_by_weight():
    # four gold dependencies (labels 0 and 2) and two none pairs, ranked by p0 + p2
    labels = [0, 1, 2, 1, 0, 2]
    probs = np.array([[0.9, 0.1, 0.0],   # gold 0, found right way: rank 1
                      [0.5, 0.2, 0.3],   # none, p(dep) 0.8: rank 2
                      [0.0, 0.3, 0.7],   # gold 2: rank 3
                      [0.3, 0.4, 0.3],   # none, 0.6: rank 4
                      [0.1, 0.5, 0.4],   # gold 0 but b depends on a is larger: a wrong direction, 0.5
                      [0.0, 0.6, 0.4]])  # gold 2, 0.4
    weights = np.array([1.0, 10.0, 1.0, 10.0, 1.0, 1.0])  # a none pair counts as ten
    pairs = _pairs(labels)
    assert cut_for_recall(pairs, probs, weights, 0.5) == pytest.approx(0.7)  # two of four found at 0.7
    tp, fp, gold = counts(pairs, probs, 0.7, weights)
    assert (tp, fp, gold) == (2, 10, 4)  # the none pair above it counts ten times
    assert cut_for_recall(pairs, probs, weights, 0.75) == pytest.approx(0.4)  # the wrong-direction one never counts
    with pytest.raises(ValueError, match="no cut reaches recall 1.0"):
        cut_for_recall(pairs, probs, weights, 1.0)
