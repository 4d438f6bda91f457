"""build-tdi progress you can see (docs/build-tdi.md, "Progress"): the counting and throttling of
``tasks.common.progress.RecordProgress`` on a hand-driven clock, then a real chunk against the fake
OpenAI server (online and Batch API), and the flow's Prefect progress artifacts."""
from __future__ import annotations

import logging
import re

import pytest

from tasks.agents.chunks import ChunkJob, iter_record_chunks, run_chunk
from tasks.common.progress import ProgressSnapshot, RecordProgress, duration
from tasks.llm.config import LLMConfig
from tasks.sources.filters import SourceFilter
from tasks.sources.spec import SourceSpec
from tests.openai_server import FakeOpenAIServer


class Clock:
    """A clock the test moves by hand (``clock.now += 12``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _progress(total: int = 100, every_s: float = 10.0, **kw):
    clock, lines = Clock(), []
    return RecordProgress(total, "chunk 7", say=lines.append, every_s=every_s, clock=clock, **kw), clock, lines


# -- the counters, rate, time left and throttle, by hand ---------------------------------------------
def test_counts_rate_and_time_left_follow_the_records_and_the_clock():
    p, clock, _ = _progress(total=100)
    p.request_started()
    p.request_started()
    snap = p.snapshot()
    assert (snap.done, snap.in_flight, snap.rate_per_min, snap.eta_s) == (0, 2, None, None)  # nothing finished: no rate
    assert "rate not known yet" in snap.line() and "time left not known yet" in snap.line()
    for accepted in [True] * 4 + [False] * 6:
        p.record_done(accepted)
    p.request_ended()
    clock.now += 60.0
    snap = p.snapshot()
    assert (snap.total, snap.done, snap.accepted, snap.rejected, snap.in_flight) == (100, 10, 4, 6, 1)
    assert snap.rate_per_min == pytest.approx(10.0)  # 10 records in one minute
    assert snap.eta_s == pytest.approx(90 / 10 * 60)  # 90 left at 10 a minute
    assert snap.fraction == pytest.approx(0.1)
    assert snap.line() == ("chunk 7: 10/100 records (10%), 1 requests in flight, 4 pairs accepted, 6 rejected, "
                           "10.0 records/min, about 9 min 0 s left (1 min 0 s so far)")
    p.records_done(accepted=5, rejected=15)
    clock.now += 60.0
    snap = p.snapshot()
    assert (snap.done, snap.accepted, snap.rejected) == (30, 9, 21)
    assert snap.rate_per_min == pytest.approx(15.0) and snap.eta_s == pytest.approx(70 / 15 * 60)


def test_records_answered_from_the_llm_cache_count_as_done_but_stay_out_of_the_rate():
    p, clock, _ = _progress(total=100)
    for _ in range(20):  # a resumed run: the first 20 records replay cached answers at once
        p.record_done(False, replayed=True)
    clock.now += 10.0
    snap = p.snapshot()
    assert (snap.done, snap.replayed, snap.rate_per_min, snap.eta_s) == (20, 20, None, None)  # no record asked yet
    assert "20/100 records (20%, 20 from the LLM cache)" in snap.line() and "rate not known yet" in snap.line()
    p.record_done(True)
    p.record_done(False)
    clock.now += 50.0  # two records the LLM answered in the minute
    snap = p.snapshot()
    assert (snap.done, snap.accepted, snap.replayed) == (22, 1, 20)
    assert snap.rate_per_min == pytest.approx(2.0)  # not 22 a minute
    assert snap.eta_s == pytest.approx(78 / 2 * 60)


def test_reports_come_at_most_every_every_s_seconds_and_the_first_one_after_every_s():
    p, clock, lines = _progress(every_s=10.0)
    assert p.maybe_report() is None and p.due_in() == pytest.approx(10.0)
    clock.now += 9.9
    assert p.maybe_report() is None and lines == []
    clock.now += 0.1
    p.record_done(True)
    snap = p.maybe_report()
    assert snap is not None and snap.done == 1 and len(lines) == 1 and lines[0].startswith("chunk 7: 1/100 records")
    clock.now += 5.0
    assert p.maybe_report() is None and p.due_in() == pytest.approx(5.0)
    clock.now += 5.0
    assert p.maybe_report() is not None and len(lines) == 2
    p.report()  # forced (the end of the chunk), throttle or not
    assert len(lines) == 3 and p.reports == 3 and p.due_in() == pytest.approx(10.0)


def test_a_sink_gets_each_snapshot_and_one_that_fails_is_dropped_without_failing_the_work():
    got: list[ProgressSnapshot] = []

    def broken(_snap: ProgressSnapshot) -> None:
        raise ConnectionError("API down")

    p, clock, lines = _progress(total=3, sinks=(got.append, broken))
    p.record_done(False)
    p.report()
    p.record_done(True)
    p.report()
    assert [(s.done, s.accepted, s.rejected) for s in got] == [(1, 0, 1), (2, 1, 1)]
    errors = [line for line in lines if "turned off" in line]
    assert len(errors) == 1 and "ConnectionError: API down" in errors[0]  # said once, then the sink is gone
    assert len(lines) == 3


def test_a_run_level_progress_leaves_requests_in_flight_out_and_bad_settings_are_refused():
    p, clock, _ = _progress(count_requests=False)
    assert p.snapshot().in_flight is None and "in flight" not in p.snapshot().line()
    with pytest.raises(ValueError, match="total"):
        RecordProgress(-1)
    with pytest.raises(ValueError, match="every_s"):
        RecordProgress(1, every_s=0)
    assert RecordProgress(0).snapshot().fraction == 1.0
    assert [duration(s) for s in (0.4, 59, 61, 3599, 3600 * 2 + 125)] == ["0 s", "59 s", "1 min 1 s", "59 min 59 s", "2 h 2 min"]


# -- a real chunk against the fake OpenAI server ----------------------------------------------------
LINE = re.compile(r"chunk 0: (\d+)/(\d+) records \(\d+%\), (\d+) requests in flight, (\d+) pairs accepted, (\d+) rejected, ")


def _chunk(shared_data, n: int):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet")
    return next(iter_record_chunks(spec, n, SourceFilter(max_chars=1800), n))


def test_a_chunk_reports_progress_while_it_runs_and_its_last_line_has_the_chunks_totals(shared_data, tmp_path):
    chunk = _chunk(shared_data, 40)
    lines: list[str] = []
    snaps: list[ProgressSnapshot] = []
    with FakeOpenAIServer(delay_s=0.05) as server:  # ~40 rounds of 4 requests: a couple of seconds
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=4, cache_dir=str(tmp_path / "cache"))
        marker = run_chunk(ChunkJob(chunk, str(tmp_path / "chunk"), llm, 1800, "fp"), say=lines.append,
                           progress_sinks=(snaps.append,), every_s=0.3)
    parsed = [tuple(map(int, m.groups())) for m in map(LINE.match, lines) if m]
    assert len(parsed) == len(lines) == len(snaps) >= 3  # lines while it ran, then the last one
    done, total, in_flight, accepted, rejected = parsed[-1]
    agent_rejected = marker["records"] - marker["validated"]
    assert (done, total, in_flight, accepted, rejected) == (40, 40, 0, marker["validated"], agent_rejected)
    assert len(chunk.records) == 40 and marker["validated"] > 0 and agent_rejected > 0
    running = parsed[:-1]
    assert parsed[0] == (0, 40, 0, 0, 0)  # the first line as the chunk starts, before any answer
    assert all(d < 40 and d == a + r and 0 <= f <= 4 and t == 40 for d, t, f, a, r in running)
    assert any(f > 0 for _d, _t, f, _a, _r in running)  # requests were counted in flight
    assert [p[0] for p in parsed] == sorted(p[0] for p in parsed)  # counts only grow
    assert snaps[-1].rate_per_min > 0 and snaps[-1].eta_s == 0


def test_a_chunk_run_again_says_its_records_came_from_the_llm_cache(shared_data, tmp_path):
    chunk = _chunk(shared_data, 8)
    snaps: list[list[ProgressSnapshot]] = [[], []]
    with FakeOpenAIServer() as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, cache_dir=str(tmp_path / "cache"))
        sent = []
        for run, got in enumerate(snaps):  # the same chunk in a new folder: the second run asks the cache only
            run_chunk(ChunkJob(chunk, str(tmp_path / f"chunk{run}"), llm, 1800, "fp"), say=lambda _line: None,
                      progress_sinks=(got.append,), every_s=60)
            sent.append(server.state.counts["completions"])
    first, again = snaps[0][-1], snaps[1][-1]
    assert (first.done, first.replayed) == (8, 0) and first.rate_per_min > 0
    assert (again.done, again.replayed, again.rate_per_min) == (8, 8, None)  # every answer replayed: no rate claimed
    assert (again.accepted, again.rejected) == (first.accepted, first.rejected)
    assert sent[0] > 0 and sent[1] == sent[0] and "8 from the LLM cache" in again.line()


def test_without_a_say_the_lines_go_to_the_module_logger_and_batch_mode_counts_too(shared_data, tmp_path, caplog):
    chunk = _chunk(shared_data, 12)
    with FakeOpenAIServer() as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, cache_dir=str(tmp_path / "cache"), batch=True, batch_poll_s=0.05)
        with caplog.at_level(logging.INFO, logger="tasks.agents.chunks"):
            marker = run_chunk(ChunkJob(chunk, str(tmp_path / "chunk"), llm, 1800, "fp"))
    assert server.state.counts["batches_created"] == 3  # one batch per agent: the stagewise path
    lines = [r.getMessage() for r in caplog.records if r.name == "tasks.agents.chunks"]
    assert lines, "no progress line was logged"
    done, total, in_flight, accepted, rejected = map(int, LINE.match(lines[-1]).groups())
    assert (done, total, in_flight, accepted, rejected) == (12, 12, 0, marker["validated"], marker["records"] - marker["validated"])


# -- the flow: Prefect progress artifacts ----------------------------------------------------------
def test_the_progress_artifact_does_nothing_outside_a_prefect_run():
    from tasks.common.progress import PrefectProgressArtifact

    sink = PrefectProgressArtifact("build-tdi")
    sink(RecordProgress(5).snapshot())
    assert sink.artifact_id is None


@pytest.mark.slow
def test_a_flow_run_shows_a_progress_artifact_per_chunk_and_one_for_the_run(shared_data, tmp_path, prefect_harness):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType

    from flows.build_tdi import build_tdi, config_from_args

    with FakeOpenAIServer() as server:
        args = ["--source", "codesearchnet", "--source-path", str(shared_data / "codesearchnet"), "--limit", "24",
                "--base-url", server.base_url, "--model", "fake", "--concurrency", "4", "--cache-dir", str(tmp_path / "cache"),
                "--output-root", str(tmp_path / "out"), "--dataset", "progress", "--rows-per-shard", "40",
                "--per-class", "1000", "--chunk-size", "12"]
        state = build_tdi(config_from_args(args), return_state=True)
        manifest = state.result()
    with get_client(sync_client=True) as client:
        ours = client.read_artifacts(artifact_filter=ArtifactFilter(
            type=ArtifactFilterType(any_=["progress"]), flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    chunks = [a for a in ours if a.task_run_id is not None and re.search(r"chunk \d+: ", a.description)]
    runs = [a for a in ours if a.task_run_id is None]
    # a later step longer than its report period shows its own bar (the quality gate, on a loaded machine)
    stages = [a for a in ours if a not in chunks and a not in runs]
    assert manifest["execution"]["chunks"] == 2
    assert len(chunks) == 2 and len(runs) == 1  # created once each, then updated in place
    assert all("quality gate: " in a.description for a in stages), [a.description for a in stages]
    assert all(a.data == 100.0 for a in ours)  # every bar ends full
    assert re.search(r"run: 24/24 records \(100%\), \d+ pairs accepted", runs[0].description)
    assert {re.search(r"chunk (\d+): 12/12 records", a.description).group(1) for a in chunks} == {"0", "1"}
