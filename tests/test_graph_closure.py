"""tasks.graph.closure: the pairs a chain of decided dependencies reaches, as the warehouse's prerequisite_closure
reads the same edges."""
from __future__ import annotations

import numpy as np

from schemas.tdi import LABEL_A_DEPENDS_ON_B as A_NEEDS_B, LABEL_B_DEPENDS_ON_A as B_NEEDS_A, LABEL_NO_DEPENDENCY as NONE
from tasks.graph.closure import closure_labels


def test_a_chain_makes_the_far_end_a_prerequisite_in_either_order_of_the_pair():
    # g1: book needs search, pay needs book -> pay needs search (asked both ways round); g2 holds the same names
    pairs = [("g1", "book", "search"), ("g1", "book", "pay"), ("g1", "pay", "search"), ("g1", "search", "pay"),
             ("g1", "pay", "refund"), ("g2", "pay", "search"), ("g2", "book", "search")]
    labels = np.array([A_NEEDS_B, B_NEEDS_A, NONE, NONE, NONE, NONE, NONE])
    got = closure_labels(pairs, labels)
    assert got.tolist() == [A_NEEDS_B, B_NEEDS_A, A_NEEDS_B, B_NEEDS_A, NONE, NONE, NONE]
    assert labels.tolist() == [A_NEEDS_B, B_NEEDS_A, NONE, NONE, NONE, NONE, NONE]  # the input is left as it was


def test_a_cycle_reaches_every_member_and_decided_pairs_keep_their_label():
    # x needs y, y needs z, z needs x: every pair of the three reaches the other both ways; a decided pair stays
    pairs = [("g", "x", "y"), ("g", "y", "z"), ("g", "z", "x"), ("g", "x", "z"), ("g", "z", "y"), ("g", "w", "x")]
    labels = np.array([A_NEEDS_B, A_NEEDS_B, A_NEEDS_B, NONE, NONE, NONE])
    got = closure_labels(pairs, labels)
    assert got[:3].tolist() == [A_NEEDS_B] * 3
    assert got[3] == A_NEEDS_B and got[4] == A_NEEDS_B  # on a cycle each reaches the other: a depends on b
    assert got[5] == NONE  # w is on no chain


def test_nothing_decided_adds_nothing():
    pairs = [("g", "a", "b"), ("g", "b", "a")]
    assert closure_labels(pairs, np.array([NONE, NONE])).tolist() == [NONE, NONE]
    assert closure_labels([], np.array([], dtype=int)).tolist() == []
