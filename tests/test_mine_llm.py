"""mine-tdi's optional LLM review (issue 7): agent 1 rewrites a sample of mined docs, agent 3 judges a
sample of mined pairs; real Prefect flow runs against the local fake OpenAI server."""
from __future__ import annotations

import json
import re
import textwrap
import threading
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import tests.openai_server as fake
from flows.mine_tdi import MineTDIConfig, _parse_args, main, mine_tdi
from schemas.docs import schema_errors
from tasks.mining.docs import functions_in_source
from tasks.mining.dataset import DependencyPair
from tasks.mining.review import doc_pairs, render_signature, sample_doc_pairs, seeded_sample
from tests.openai_server import FakeOpenAIServer
from tests.test_mining import pipeline_modules, write_package

LONG = "produce_" + "x" * 130  # a name longer than the api_doc schema allows (120): agent 1's answer is invalid


def _tree(root: Path, n_modules: int = 3, n_funcs: int = 4) -> Path:
    """Modules whose functions feed each other (as tests/test_mining.py's _bigger_tree), one pair
    seen both ways round, and one producer whose name is too long for an LLM doc."""
    files = pipeline_modules(n_modules, n_funcs)
    files["lib/extra.py"] = f'''
        def make_token(user):
            """Make a token for user."""
            return user


        def use_token(token):
            """Use a token."""
            return token


        def {LONG}(x):
            """Produce a long value from x."""
            return x


        def consume_long(value):
            """Consume the long value."""
            return value


        def login():
            """One pair, first seen here."""
            use_token(make_token("a"))
            consume_long({LONG}(1))
            return None


        def relogin():
            """The same two functions, the other way round."""
            t = use_token("b")
            make_token(t)
            return None
    '''
    return write_package(root, files)


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(tmp_path_factory.mktemp("src"))


def _args(src: Path, tmp: Path, name: str, *extra: str) -> list[str]:
    return ["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp / "out"), "--dataset", name,
            "--workers", "1", "--validation-fraction", "0.2", "--cache-dir", str(tmp / f"cache-{name}"), *extra]


class Recorder:
    """Wraps the fake server's canned answers: every (schema name, user text, answer) it served."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        self.lock = threading.Lock()
        self.original = fake.canned_answer

    def __call__(self, agent: str, user_text: str) -> dict:
        answer = self.original(agent, user_text)
        with self.lock:
            self.calls.append((agent, user_text, answer))
        return answer

    def verdicts(self) -> dict[frozenset[str], int]:
        """Unordered {API A name, API B name} -> the fake judge's result (1 dependent, 0 not)."""
        out = {}
        for agent, text, answer in self.calls:
            if agent == "dependency_verdict":
                a = json.loads(re.search(r"API A:\n(.*?)\n\nAPI B:", text, re.S).group(1))["name"]
                b = json.loads(re.search(r"API B:\n(.*)$", text, re.S).group(1))["name"]
                out[frozenset((a, b))] = answer["result"]
        return out


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(fake, "canned_answer", rec)  # the server thread looks the name up per request
    return rec


def _name(key: str) -> str:
    """The mined doc's name of a function key (make_doc clips long names to 120 characters)."""
    name = key.rsplit(".", 1)[-1]
    return name if len(name) <= 120 else name[:117] + "..."


def _rows(out: Path) -> list[dict]:
    return pq.read_table(out / "shards").to_pylist()


def _db(out: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(out / "records.duckdb"), read_only=True)


def _shard_hashes(manifest: dict) -> list[str]:
    return [s["sha256"] for s in manifest["shards"]]


# -- configuration --------------------------------------------------------------------------------
def test_llm_options_without_an_endpoint_fail_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert MineTDIConfig().base_url is None and not MineTDIConfig().uses_llm
    for kwargs in ({"judge_sample": 5}, {"rewrite_docs": 2}):
        with pytest.raises(ValueError, match="no LLM endpoint is configured.*--base-url"):
            MineTDIConfig(**kwargs)
    with pytest.raises(ValueError, match="--judge-action"):
        MineTDIConfig(judge_action="ignore")
    with pytest.raises(ValueError, match=">= 0"):
        MineTDIConfig(rewrite_docs=-1, base_url="http://127.0.0.1:9/v1")

    # the CLI says so and exits before reading a file or making the output folder
    with pytest.raises(SystemExit) as exit_info:
        main(["--source", "tree", "--tree-paths", str(tmp_path / "missing"), "--output-root", str(tmp_path / "out"), "--judge-sample", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--judge-sample 3" in err and "OPENAI_BASE_URL" in err and "embedded" in err
    assert not (tmp_path / "out").exists()

    # an endpoint from the environment, or 'embedded', is enough; the counts default to 0 (no LLM)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    cfg = _parse_args(["--judge-sample", "3", "--judge-action", "report"])
    assert (cfg.base_url, cfg.judge_sample, cfg.judge_action, cfg.rewrite_docs) == ("http://127.0.0.1:9/v1", 3, "report", 0)
    assert _parse_args(["--base-url", "embedded", "--rewrite-docs", "4"]).rewrite_docs == 4
    assert not _parse_args([]).uses_llm


def test_samples_are_seeded_and_cover_each_pair_of_functions_once() -> None:
    keys = [f"k{i:02d}" for i in range(40)]
    assert seeded_sample(keys, 10, 13, "judge") == seeded_sample(list(reversed(keys)), 10, 13, "judge")
    assert seeded_sample(keys, 10, 13, "judge") != seeded_sample(keys, 10, 14, "judge")
    assert seeded_sample(keys, 10, 13, "judge") != seeded_sample(keys, 10, 13, "rewrite")
    assert seeded_sample(keys[:3], 10, 13, "judge") == keys[:3]

    docs = {k: {} for k in ("m.a", "m.b", "m.c")}
    pairs = [DependencyPair("r3", "m.b", "m.a", "mined"), DependencyPair("r1", "m.b", "m.a", "mined"),
             DependencyPair("r2", "m.a", "m.b", "mined"), DependencyPair("r4", "m.c", "m.a", "mined"),
             DependencyPair("r5", "m.c", "m.gone", "mined"), DependencyPair("r6", "m.c", "m.c", "mined")]
    groups = doc_pairs(pairs, docs)
    assert [(g.first.record_id, [p.record_id for p in g.records]) for g in groups] == [("r1", ["r1", "r2", "r3"]), ("r4", ["r4"])]
    assert len(sample_doc_pairs(groups, 1, 13)) == 1 and sample_doc_pairs(groups, 5, 13) == groups


def test_signature_rendering_gives_agent_1_the_def_and_its_docstring() -> None:
    facts = functions_in_source(textwrap.dedent('''
        def fetch(url: str, *args, timeout: float = 1.0, **kw) -> bytes:
            """Fetch url.

            Args:
                url: where from
            """

        class Store:
            def put(self, key, value=None):
                """Put a value."""

            @classmethod
            def open(cls, path):
                """Open a store."""
    '''))
    text = render_signature(facts["fetch"])
    assert text.startswith("def fetch(url: str, *args, timeout: float, **kw) -> bytes:\n")
    assert "Fetch url." in text and "url: where from" in text
    assert render_signature(facts["Store.put"]).startswith("class Store:\n    def put(self, key, value):\n")
    assert "    @classmethod\n    def open(cls, path):" in render_signature(facts["Store.open"])
    for f in facts.values():
        compile(render_signature(f), "<doc>", "exec")  # valid Python: the model reads real code


# -- the flow against the fake server -------------------------------------------------------------
def test_judge_drop_removes_exactly_the_pairs_the_judge_rejects(src: Path, tmp_path: Path, recorder: Recorder, prefect_harness) -> None:
    with FakeOpenAIServer() as server:
        manifest = mine_tdi(_parse_args(_args(src, tmp_path, "dropped", "--base-url", server.base_url, "--model", "fake",
                                              "--concurrency", "4", "--judge-sample", "1000")))
        sent = server.requests
    out = tmp_path / "out" / "dropped"
    judge = manifest["llm"]["judge"]
    verdicts = recorder.verdicts()
    rejected = {names for names, result in verdicts.items() if result == 0}
    assert judge["action"] == "drop" and judge["sampled"] == judge["available"] == len(verdicts) == judge["judged"] == sent
    assert judge["records_sampled"] == manifest["mining"]["accepted_pairs"]  # every pair: the sample asked for more
    assert 0 < len(rejected) < len(verdicts)
    assert judge["dependent"] == len(verdicts) - len(rejected) and judge["failed_by_reason"] == {}
    assert judge["agreement_rate"] == round(judge["dependent"] / judge["judged"], 4)
    assert manifest["llm"]["usage"]["requests_sent"] == sent and manifest["llm"]["rewrite"]["requested"] == 0

    con = _db(out)
    mined = dict(con.execute("SELECT record_id, dependent || ' ' || prerequisite FROM judge_verdicts").fetchall())
    expected = {rid for rid, keys in mined.items() if frozenset(map(_name, keys.split())) in rejected}
    dropped = {rid for (rid,) in con.execute("SELECT record_id FROM record_outcomes WHERE reason = 'judge_no_dependency'").fetchall()}
    assert dropped == expected and len(dropped) == judge["records_dropped"] == manifest["accounting"]["by_reason"]["judge_no_dependency"]
    assert con.execute("SELECT count(*) FROM record_outcomes WHERE reason = 'judge_no_dependency' AND (stage <> 'judge' "
                       "OR status <> 'rejected' OR detail NOT LIKE 'agent 3: %')").fetchone()[0] == 0
    # both directions between two functions are one doc pair: judged once, one verdict for both records
    shared = con.execute("SELECT count(*), count(DISTINCT judged_as), count(DISTINCT verdict) FROM judge_verdicts "
                         "WHERE dependent IN ('lib.extra.use_token', 'lib.extra.make_token')").fetchone()
    assert shared == (2, 1, 1) and judge["sampled"] == judge["records_sampled"] - 1
    # the books still add up, and every judge call is in the ledger
    acc = manifest["accounting"]
    assert acc["read"] == acc["accepted"] + acc["rejected"] == con.execute("SELECT count(*) FROM record_outcomes").fetchone()[0]
    assert con.execute("SELECT count(*) FROM llm_calls WHERE agent = 'validate'").fetchone()[0] == sent
    in_dataset = con.execute("SELECT count(*) FROM record_outcomes WHERE reason = 'in_dataset'").fetchone()[0]
    con.close()

    rows = _rows(out)
    seen = {frozenset((json.loads(r["doc_a"])["name"], json.loads(r["doc_b"])["name"])) for r in rows}
    assert not seen & rejected  # neither as a dependency nor drawn as a negative
    assert in_dataset == manifest["per_class"] == len(verdicts) - len(rejected)
    card = (out / "README.md").read_text()
    assert "## LLM review" in card and f"agreement rate {judge['agreement_rate']:.3f}" in card and "judge_no_dependency" in card


def test_judge_report_changes_no_pair_and_defaults_send_nothing(src: Path, tmp_path: Path, recorder: Recorder,
                                                                monkeypatch: pytest.MonkeyPatch, prefect_harness) -> None:
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # an endpoint alone turns nothing on
        plain = mine_tdi(_parse_args(_args(src, tmp_path, "plain")))
        assert server.requests == 0
        report = mine_tdi(_parse_args(_args(src, tmp_path, "report", "--judge-sample", "10", "--judge-action", "report")))
        assert server.requests == 10
    assert "llm" not in plain and plain["origin"] == "mined (no LLM)"
    assert "LLM review" not in (tmp_path / "out" / "plain" / "README.md").read_text()
    assert not _db(tmp_path / "out" / "plain").execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('judge_verdicts', 'doc_rewrites')").fetchone()[0]

    judge = report["llm"]["judge"]
    rejected = [n for n, r in recorder.verdicts().items() if r == 0]
    assert (judge["sampled"], judge["judged"], judge["no_dependency"], judge["records_dropped"]) == (10, 10, len(rejected), 0)
    # measured only: the same pairs, the same shards, byte for byte
    assert _shard_hashes(report) == _shard_hashes(plain)
    assert report["accounting"] == plain["accounting"] and "judge_no_dependency" not in report["accounting"]["by_reason"]
    con = _db(tmp_path / "out" / "report")
    assert con.execute("SELECT count(DISTINCT judged_as), count(*) FILTER (WHERE action <> 'kept') FROM judge_verdicts").fetchone() == (10, 0)
    con.close()


def test_rewrite_replaces_docs_with_valid_answers_and_keeps_mined_docs_on_invalid_ones(
        src: Path, tmp_path: Path, recorder: Recorder, prefect_harness) -> None:
    with FakeOpenAIServer() as server:
        manifest = mine_tdi(_parse_args(_args(src, tmp_path, "rewritten", "--base-url", server.base_url, "--model", "fake",
                                              "--rewrite-docs", "1000")))
        partial = mine_tdi(_parse_args(_args(src, tmp_path, "partial", "--base-url", server.base_url, "--model", "fake",
                                             "--rewrite-docs", "5")))
    rw = manifest["llm"]["rewrite"]
    asked = [text for agent, text, _ in recorder.calls if agent == "api_doc"]
    assert rw["sampled"] == rw["available"] == len(asked) - 5 > 5
    assert (rw["rewritten"], rw["kept"], rw["kept_by_reason"]) == (rw["sampled"] - 1, 1, {"extract_schema_invalid": 1})
    assert any("def produce_0_0(x):" in t and "Produce value 0.0 from x." in t for t in asked)  # signature + docstring as code

    docs = {}
    for r in _rows(tmp_path / "out" / "rewritten"):
        for side in ("doc_a", "doc_b"):
            doc = json.loads(r[side])
            docs[doc["name"]] = doc
    assert all(schema_errors(d) == [] for d in docs.values())
    long_docs = [d for n, d in docs.items() if n.startswith("produce_xxx")]
    assert len(long_docs) == 1 and long_docs[0]["description"] == "Produce a long value from x."  # the mined doc, kept
    rewritten = {n: d for n, d in docs.items() if not n.startswith("produce_xxx")}
    assert rewritten and all(d["description"] == f"Runs {n} and returns its result." for n, d in rewritten.items())  # agent 1's
    con = _db(tmp_path / "out" / "rewritten")
    assert con.execute("SELECT status, reason, count(*) FROM doc_rewrites GROUP BY ALL ORDER BY status").fetchall() == [
        ("kept", "extract_schema_invalid", 1), ("rewritten", "rewritten", rw["sampled"] - 1)]
    assert con.execute("SELECT count(*) FROM llm_calls WHERE agent = 'extract'").fetchone()[0] == rw["sampled"]
    con.close()
    assert manifest["accounting"]["read"] == manifest["accounting"]["accepted"] + manifest["accounting"]["rejected"]
    assert "rewrote" in (tmp_path / "out" / "rewritten" / "README.md").read_text()

    # a partial sample: exactly that many docs, the rest stay mined
    assert partial["llm"]["rewrite"]["sampled"] == 5
    described = [json.loads(r[s])["description"] for r in _rows(tmp_path / "out" / "partial") for s in ("doc_a", "doc_b")]
    assert 0 < len({d for d in described if d.startswith("Runs ")}) <= 5 and any(d.startswith("Produce value") for d in described)
