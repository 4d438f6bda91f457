"""Progress you can see beyond build-tdi (issue 23 item 4): ``tasks.common.progress.CountProgress`` on a
hand-driven clock, its timer thread (``ticking``), the training callback on a fake trainer state, pair
scoring and prediction on a tiny model, and a mine-tdi run on a tiny tree with its lines and Prefect
progress artifacts."""
from __future__ import annotations

import contextvars
import json
import logging
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks.common.progress import CountProgress, CountSnapshot, PrefectProgressArtifact, ticking
from tests.test_build_tdi_progress import Clock


def _counter(total: int = 200, every_s: float = 10.0, **kw):
    clock, lines = Clock(500.0), []
    return CountProgress(total, "mine-tdi parse", "files", say=lines.append, every_s=every_s, clock=clock, **kw), clock, lines


# -- the counters, rate, time left and throttle, by hand ---------------------------------------------
def test_counts_rate_and_time_left_follow_the_units_and_the_clock():
    p, clock, _ = _counter(counts=("pairs found", "rejected"))
    snap = p.snapshot()
    assert (snap.done, snap.rate_per_s, snap.eta_s, snap.counts) == (0, None, None, (("pairs found", 0), ("rejected", 0)))
    assert "rate not known yet" in snap.line() and "time left not known yet" in snap.line()
    p.advance(10, pairs_found=25, rejected=1)
    p.advance(30, pairs_found=5)
    clock.now += 20.0
    snap = p.snapshot()
    assert (snap.total, snap.done, snap.count("pairs found"), snap.count("rejected")) == (200, 40, 30, 1)
    assert snap.rate_per_s == pytest.approx(2.0) and snap.eta_s == pytest.approx(160 / 2.0)
    assert snap.line() == ("mine-tdi parse: 40/200 files (20%), 30 pairs found, 1 rejected, 2.0 files/s, "
                           "about 1 min 20 s left (20 s so far)")
    p.detail = "loss 0.4213"
    clock.now += 380.0  # 40 files in 400 s: under one a second, said per minute
    assert p.snapshot().line() == ("mine-tdi parse: 40/200 files (20%), 30 pairs found, 1 rejected, loss 0.4213, "
                                   "6.0 files/min, about 26 min 40 s left (6 min 40 s so far)")
    with pytest.raises(KeyError, match="no count named 'accepted'"):
        p.advance(1, accepted=1)


def test_a_resumed_count_rates_only_the_units_of_this_run_and_a_total_runs_out_at_100_percent():
    p, clock, _ = _counter(total=100, start=40)
    assert p.snapshot().done == 40 and p.snapshot().rate_per_s is None  # the 40 were done before this run
    clock.now += 20.0
    p.set_done(50)
    snap = p.snapshot()
    assert snap.rate_per_s == pytest.approx(0.5) and snap.eta_s == pytest.approx(100.0) and snap.fraction == 0.5
    p.set_done(120)  # more than the total (an estimate that was low): the bar stops at full, time left 0
    assert p.snapshot().fraction == 1.0 and p.snapshot().eta_s == 0
    with pytest.raises(ValueError, match="total"):
        CountProgress(-1, "x")
    with pytest.raises(ValueError, match="start"):
        CountProgress(5, "x", start=-1)
    with pytest.raises(ValueError, match="every_s"):
        CountProgress(5, "x", every_s=0)
    assert CountProgress(0, "x").snapshot().fraction == 1.0


def test_reports_come_at_most_every_every_s_and_a_sink_that_fails_is_dropped():
    got: list[CountSnapshot] = []

    def broken(_snap) -> None:
        raise ConnectionError("API down")

    p, clock, lines = _counter(every_s=10.0, sinks=(got.append, broken))
    p.advance(3)
    assert p.maybe_report() is None and p.due_in() == pytest.approx(10.0)
    clock.now += 9.9
    assert p.maybe_report() is None and lines == []
    clock.now += 0.1
    assert p.maybe_report().done == 3 and lines[0].startswith("mine-tdi parse: 3/200 files (2%)")
    assert len([line for line in lines if "turned off after an error: ConnectionError: API down" in line]) == 1
    clock.now += 5.0
    assert p.maybe_report() is None
    clock.now += 5.0
    p.advance(2)
    assert p.maybe_report() is not None and p.report() is not None  # forced: the end of the stage
    assert [s.done for s in got] == [3, 5, 5] and p.reports == 3


def test_a_report_already_running_is_the_report_a_second_caller_gets_none():
    """A timer thread and the loop may both find a report due: one reports, the other returns at once."""
    p, clock, lines = _counter()
    seen = []
    p.sinks.append(lambda _snap: seen.append(p.maybe_report()))  # a second report asked for during the first
    clock.now += 10.0
    assert p.maybe_report() is not None
    assert seen == [None] and len(lines) == 1


# -- the timer thread -----------------------------------------------------------------------------
def test_ticking_reports_while_the_work_runs_and_once_at_the_end():
    lines: list[str] = []
    p = CountProgress(20, "scoring pairs", "pairs", say=lines.append, every_s=0.05)
    with ticking(p):
        for _ in range(20):  # ~0.4 s, counts moving only here: the lines come from the timer
            time.sleep(0.02)
            p.advance(1)
    done = [int(re.match(r"scoring pairs: (\d+)/20 pairs", line).group(1)) for line in lines]
    assert len(done) >= 3 and done[-1] == 20 and done == sorted(done) and done[0] < 20


def test_a_short_pass_says_nothing_with_if_long_and_a_bad_choice_is_refused():
    lines: list[str] = []
    p = CountProgress(5, "predicting pairs", "pairs", say=lines.append, every_s=30.0)
    with ticking(p, last_line="if_long"):
        p.advance(5)
    assert lines == []
    with ticking(p, last_line="never"):
        pass
    assert lines == []
    with pytest.raises(ValueError, match="last_line"):
        with ticking(p, last_line="sometimes"):
            pass


def test_a_stage_reports_only_when_it_runs_long_and_takes_its_total_once_known():
    from tasks.common.progress import stage_progress

    lines: list[str] = []
    with stage_progress("quality gate", 0, "checks", say=lines.append, every_s=30.0) as p:
        p.set_total(4)
        p.advance(4)
    assert lines == []  # a step shorter than a line's period says nothing
    with stage_progress("quality gate", 0, "checks", say=lines.append, every_s=0.05) as p:
        p.set_total(4)
        for _ in range(4):
            time.sleep(0.05)
            p.advance(1)
    assert lines and lines[-1].startswith("quality gate: 4/4 checks (100%)")
    with pytest.raises(ValueError, match="total"):
        p.set_total(-1)


def test_the_timer_thread_sees_the_context_of_the_code_that_started_it():
    """What lets a sink on the timer thread find the Prefect run (a context variable) of the work."""
    run = contextvars.ContextVar("run", default=None)
    run.set("flow-run-7")
    seen: list[tuple[str | None, bool]] = []
    p = CountProgress(1, "x", every_s=0.01, sinks=(lambda _s: seen.append((run.get(), threading.current_thread()
                                                                            is not threading.main_thread())),))
    with ticking(p, last_line="never"):
        time.sleep(0.15)
    assert seen and all(value == "flow-run-7" for value, _ in seen) and all(on_timer for _, on_timer in seen)


def test_the_prefect_artifact_does_nothing_outside_a_prefect_run():
    sink = PrefectProgressArtifact("x")
    sink(CountProgress(5, "x").snapshot())
    assert sink.artifact_id is None


# -- the training callback on a fake trainer state ---------------------------------------------------
def _callback(every_s: float = 10.0):
    from tasks.training.progress import ProgressLinesCallback

    clock, lines, snaps = Clock(500.0), [], []
    cb = ProgressLinesCallback("pretrain", say=lines.append, sinks=(snaps.append,), artifacts=False, every_s=every_s,
                               clock=clock)
    return cb, clock, lines, snaps


def test_the_training_callback_says_steps_loss_rate_and_time_left_every_10_s():
    cb, clock, lines, snaps = _callback()
    state = SimpleNamespace(max_steps=100, global_step=0)
    cb.on_train_begin(None, state, None)
    for step in range(1, 101):
        clock.now += 0.5  # 2 steps a second
        state.global_step = step
        if step % 10 == 0:
            cb.on_log(None, state, None, logs={"loss": 1.0 / step, "learning_rate": 1e-5})
        cb.on_step_end(None, state, None)
    cb.on_train_end(None, state, None)
    assert [s.done for s in snaps] == [20, 40, 60, 80, 100, 100]  # every 10 s, then the end line
    assert lines[0] == "pretrain training: 20/100 steps (20%), loss 0.0500, 2.0 steps/s, about 40 s left (10 s so far)"
    assert lines[-1] == "pretrain training: 100/100 steps (100%), loss 0.0100, 2.0 steps/s, about 0 s left (50 s so far)"


def test_a_resumed_run_rates_its_own_steps_and_validation_loss_joins_the_line():
    cb, clock, lines, snaps = _callback()
    state = SimpleNamespace(max_steps=300, global_step=200)  # resumed from checkpoint-200
    cb.on_train_begin(None, state, None)
    cb.on_log(None, state, None, logs={"eval_loss": 0.75})
    clock.now += 10.0
    state.global_step = 210
    cb.on_step_end(None, state, None)
    assert snaps[-1].rate_per_s == pytest.approx(1.0) and snaps[-1].eta_s == pytest.approx(90.0)
    assert lines[-1].startswith("pretrain training: 210/300 steps (70%), validation loss 0.7500, 1.0 steps/s")


def test_a_long_evaluation_pass_says_its_batches_and_a_short_one_says_nothing():
    cb, clock, lines, snaps = _callback()
    state = SimpleNamespace(max_steps=50, global_step=0)
    cb.on_train_begin(None, state, None)
    batches = list(range(30))
    for _ in batches:  # 30 batches, 1 s each
        clock.now += 1.0
        cb.on_prediction_step(None, state, None, eval_dataloader=batches)
    cb.on_evaluate(None, state, None, metrics={})
    evaluation = [line for line in lines if "evaluation" in line]
    # timed from the end of the first batch (no event before it): 10 s later 11 batches are done
    assert evaluation[0] == "pretrain evaluation at step 0: 11/30 batches (37%), 1.0 batches/s, about 19 s left (10 s so far)"
    assert evaluation[-1].startswith("pretrain evaluation at step 0: 30/30 batches (100%)") and len(evaluation) == 3
    lines.clear()
    for _ in range(5):  # a pass of 5 s: no line
        clock.now += 1.0
        cb.on_prediction_step(None, state, None, eval_dataloader=batches[:5])
    cb.on_evaluate(None, state, None, metrics={})
    assert lines == []


# -- a real Trainer, prediction and pair scoring on a tiny model --------------------------------------
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from tests.test_discriminator import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def test_training_ends_with_its_line_from_the_trainers_own_state(tiny_checkpoint, tmp_path, caplog):
    """The callback inside ``train_classifier``: the Trainer's step count and logged loss reach the line."""
    from models.discriminator import load_model, load_tokenizer
    from tasks.training.examples import build_pairs
    from tasks.training.trainer import StageArguments, train_classifier
    from tests.test_discriminator import toy_toolset

    pairs = build_pairs(toy_toolset())
    args = StageArguments(epochs=1, batch_size=4, max_steps=6, warmup_ratio=0.0, max_length=64, seed=0,
                          select_metric="loss", progress=False)
    with caplog.at_level(logging.INFO, logger="tasks.training.progress"):
        result = train_classifier(load_model(str(tiny_checkpoint)), load_tokenizer(str(tiny_checkpoint)), pairs, pairs,
                                  args, tmp_path / "run", stage="finetune")
    lines = [r.getMessage() for r in caplog.records if r.name == "tasks.training.progress"]
    assert lines[-1].startswith("finetune training: 6/6 steps (100%), loss ")
    last_loss = [h["loss"] for h in result.history if "loss" in h][-1]
    assert f"loss {last_loss:.4f}" in lines[-1] and "validation loss" in lines[-1]
    assert not [line for line in lines if "evaluation" in line]  # passes of a few batches say nothing


def _docs(n: int) -> list[dict]:
    return [{"name": f"tool_{i}", "description": f"tool number {i} " + "word " * (i % 7),
             "input_params": [{"name": f"in_{i}", "type": "str", "description": "an input"}],
             "output_params": [{"name": f"out_{i}", "type": "str", "description": "an output"}]} for i in range(n)]


def test_prediction_in_chunks_says_its_progress_and_gives_the_probabilities_of_one_pass(tiny_checkpoint, caplog):
    import numpy as np

    from models.discriminator import load_discriminator, predict_proba
    from schemas.docs import canonical_doc_json
    from tasks.training.examples import PairExample
    from tasks.training.trainer import predict_examples

    model, tokenizer = load_discriminator(tiny_checkpoint)
    docs = [canonical_doc_json(d) for d in _docs(12)]
    examples = [PairExample(docs[i % 12], docs[(i * 5 + 1) % 12], i % 3, "toy") for i in range(40)]
    with caplog.at_level(logging.INFO, logger="tasks.training.trainer"):
        chunked = predict_examples(model, tokenizer, examples, 64, batch_size=2, symmetric=True,  # chunks of 32
                                   what="scoring test pairs", progress_every_s=1e-6)
    whole = predict_proba(model, tokenizer, [e.doc_a for e in examples], [e.doc_b for e in examples], 64, 2,
                          symmetric=True).numpy()
    np.testing.assert_allclose(chunked, whole, atol=1e-5)
    done = [int(m.group(1)) for r in caplog.records if (m := re.match(r"scoring test pairs: (\d+)/40 pairs", r.getMessage()))]
    assert done and done[-1] == 40 and done == sorted(done)


def test_pair_scoring_keeps_its_bar_switch_and_logs_lines(tiny_checkpoint, caplog):
    from schemas.toolset import Tool
    from tasks.graph.scoring import score_pairs

    tools = [Tool(tool_id=f"t{i}", group="g", doc=d) for i, d in enumerate(_docs(10))]
    pairs = [(i, j) for i in range(10) for j in range(10) if i != j]
    with caplog.at_level(logging.INFO, logger="tasks.graph.scoring"):
        probs = score_pairs(tiny_checkpoint, tools, pairs, batch_size=2, max_length=64, progress=False,
                            progress_every_s=1e-6)
    assert probs.shape == (90, 3)
    done = [int(m.group(1)) for r in caplog.records
            if (m := re.match(r"scoring pairs \(both orders\): (\d+)/90 pairs", r.getMessage()))]
    assert len(done) >= 2 and done[-1] == 90 and done == sorted(done)  # chunks of 32 pairs: 32, 64, 90
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tasks.graph.scoring"):
        score_pairs(tiny_checkpoint, tools, pairs[:4], batch_size=2, max_length=64, progress=False)
    assert not [r for r in caplog.records if "scoring pairs" in r.getMessage()]  # a short scoring says nothing


# -- a mine-tdi run on a tiny tree -------------------------------------------------------------------
PARSE = re.compile(r"mine-tdi parse: (\d+)/(\d+) files \(\d+%\), (\d+) candidate pairs found, (\d+) files rejected, ")
RESOLVE = re.compile(r"mine-tdi resolve: (\d+)/(\d+) candidates \(\d+%\), ")
# the later steps: (step, done, total)
LATER = re.compile(r"(mine-tdi docs|mine-tdi balance|mine-tdi shards|quality gate): (\d+)/(\d+) (?:functions|pairs|rows|checks) ")


@pytest.mark.slow
def test_a_mine_tdi_run_shows_the_progress_of_every_step(tmp_path, prefect_harness, monkeypatch, caplog):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType

    import flows.mine_tdi as mt
    from tests.test_mining import _bigger_tree

    src = _bigger_tree(tmp_path / "src", n_modules=4, n_funcs=4)
    (src / "lib" / "broken.py").write_text("def broken(:\n    pass\n")  # a file rejected, counted as such
    monkeypatch.setattr(mt, "PROGRESS_EVERY_S", 1e-6)  # a line at every file: the lines of a run seen in a second
    monkeypatch.setattr("tasks.dataset.gate.PROGRESS_EVERY_S", 1e-6)
    task_log = logging.getLogger("prefect.task_runs")  # what get_run_logger() writes to in a task (it does not propagate)
    task_log.addHandler(caplog.handler)
    try:
        state = mt.mine_tdi(mt._parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root",
                                            str(tmp_path / "out"), "--dataset", "progress", "--workers", "1"]),
                            return_state=True)
    finally:
        task_log.removeHandler(caplog.handler)
    manifest = state.result()
    messages = [r.getMessage() for r in caplog.records]
    parse = [tuple(map(int, m.groups())) for m in map(PARSE.match, messages) if m]
    resolve = [tuple(map(int, m.groups())) for m in map(RESOLVE.match, messages) if m]
    mining = manifest["mining"]
    files = mining["files_read"]
    assert files == 6 and mining["files_rejected_by_reason"] == {"syntax_error": 1}
    assert len(parse) >= files  # one per file (and the timer's), then the end line
    assert parse[-1] == (files, files, mining["candidates"] + mining["precondition_candidates"], 1)
    assert all(t == files for _d, t, _c, _r in parse) and [p[0] for p in parse] == sorted(p[0] for p in parse)
    assert resolve[-1] == (parse[-1][2], parse[-1][2])  # every candidate found is judged
    with get_client(sync_client=True) as client:
        bars = client.read_artifacts(artifact_filter=ArtifactFilter(
            type=ArtifactFilterType(any_=["progress"]), flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    later: dict[str, list[tuple[int, int]]] = {}
    for m in filter(None, map(LATER.match, messages)):
        later.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3))))
    assert set(later) == {"mine-tdi docs", "mine-tdi balance", "mine-tdi shards", "quality gate"}
    for step, seen in later.items():  # each ends at its total, never counting back
        assert seen[-1][0] == seen[-1][1] > 0 and [d for d, _ in seen] == sorted(d for d, _ in seen), step
    rows = sum(sum(per.values()) for per in manifest["counts"].values())
    assert later["mine-tdi shards"][-1] == (rows, rows)
    assert later["quality gate"][-1][1] == len(json.loads((tmp_path / "out" / "progress" / "quality.json").read_text())["checks"])
    assert sorted(a.description.split(":")[0] for a in bars) == sorted(["mine-tdi parse", "mine-tdi resolve", *later])
    assert all(a.data == 100.0 for a in bars)  # created once each, updated to the end
