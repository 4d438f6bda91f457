"""bench.param_head_errors: the head's errors become rows to read, a filled copy's verdicts are counted per
section, and the committed reading is complete."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.param_head_errors import (FALSE_NEGATIVES, FALSE_POSITIVES, SECTIONS, UNDER_THE_CUT, error_rows, markdown,
                                     precision_by_reading, read_verdicts)

NAMES = ["create_post", "add_images", "get_feedback", "delete_post"]
DOCS = [{"name": "create_post", "description": "Create a blog post.", "output_params": [{"name": "post_url"}]},
        {"name": "add_images", "description": "Add images to a post.", "output_params": [{"name": "updated_post_url"}]},
        {"name": "get_feedback", "description": "Feedback on a post.",
         "input_params": [{"name": "post_url", "description": "the post's URL | link"}]},
        {"name": "delete_post", "description": "Delete a post.", "input_params": [{"name": "post_url"}]}]
UNITS = [(0, 2, "post_url"), (1, 2, "post_url"), (0, 3, "post_url"), (1, 3, "post_url"), (2, 3, "post_url")]
PROBS = [0.99, 0.60, 0.96, 0.97, 0.10]
GOLD = {(1, 2, "post_url"), (0, 3, "post_url")}


def test_rows_split_the_errors_at_the_cut_and_sample_only_non_gold_units_under_it():
    rows = error_rows(UNITS, PROBS, GOLD, cut=0.98, band_low=0.95, sample=5)
    assert [r.unit for r in rows[FALSE_POSITIVES]] == [(0, 2, "post_url")]
    assert [r.unit for r in rows[FALSE_NEGATIVES]] == [(1, 2, "post_url"), (0, 3, "post_url")]
    assert [r.unit for r in rows[UNDER_THE_CUT]] == [(1, 3, "post_url")]  # 0.96 is gold, 0.10 under the band
    fp, = rows[FALSE_POSITIVES]
    assert (fp.rank, fp.gold_producers) == (1, (1,))  # the head's best for the input; the gold names another maker
    assert rows[FALSE_NEGATIVES][0].rank == 2
    assert error_rows(UNITS, PROBS, GOLD, 0.98, 0.95, sample=0)[UNDER_THE_CUT] == []


def test_the_sample_under_the_cut_is_seeded():
    units = [(0, 3, f"in{i}") for i in range(30)]
    probs = [0.95 + i / 1000 for i in range(30)]
    draw = lambda seed: [r.unit for r in error_rows(units, probs, set(), 0.99, 0.95, sample=5, seed=seed)[UNDER_THE_CUT]]
    assert draw(3) == draw(3) and len(set(draw(3))) == 5
    assert draw(3) != draw(4)


def test_a_filled_copy_is_counted_per_section_and_gives_precision_by_reading(tmp_path: Path):
    rows = error_rows(UNITS, PROBS, GOLD, 0.98, 0.95, 5)
    text = markdown(rows, NAMES, DOCS, "# header")
    assert "the post's URL / link" in text  # a pipe in a description cannot break the table
    filled, seen = [], {s: 0 for s in SECTIONS}
    verdicts = {FALSE_POSITIVES: ["right, a second maker"], FALSE_NEGATIVES: ["right", "borderline"],
                UNDER_THE_CUT: [""]}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = next(s for s in SECTIONS if line[3:].startswith(s))
        elif line.startswith("| ") and not line.startswith(("| #", "|---")):
            cells = line.split("|")
            cells[-3] = f" {verdicts[section][seen[section]]} "
            seen[section] += 1
            line = "|".join(cells)
        filled.append(line)
    path = tmp_path / "read.md"
    path.write_text("\n".join(filled))
    counts = read_verdicts(path)
    assert counts[FALSE_POSITIVES] == {"right": 1}
    assert counts[FALSE_NEGATIVES] == {"right": 1, "borderline": 1}
    assert counts[UNDER_THE_CUT] == {"unread": 1}
    got = precision_by_reading(true_positives=3, counts=counts)
    assert got == pytest.approx({"against the gold": 0.75, "read right counted": 1.0,
                                 "read right or borderline counted": 1.0})


def test_the_committed_reading_has_a_verdict_on_every_row():
    counts = read_verdicts(Path(__file__).parents[1] / "bench" / "param_head_errors_sample.md")
    assert {s: sum(c.values()) for s, c in counts.items()} == {FALSE_POSITIVES: 71, FALSE_NEGATIVES: 79, UNDER_THE_CUT: 40}
    assert all("unread" not in c for c in counts.values())
    assert counts[FALSE_POSITIVES] == {"right": 41, "borderline": 17, "wrong": 13}
