"""Quality gate over written TDI shards: a great-expectations suite; a failure fails the flow."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from schemas.docs import schema_errors
from schemas.parameters import input_param_names, output_param_names
from schemas.tdi import DEPENDENCY_KINDS, ID2LABEL, KIND_PRECONDITION, TDI_PAIR_SCHEMA
from tasks.common.progress import CountProgress
from tasks.dataset.accounting import sql_string

logger = logging.getLogger(__name__)

# build-tdi's LLM pairs (validated/swapped/shuffled) and mine-tdi's mined pairs and negatives
ORIGINS = ("validated", "swapped", "shuffled", "mined", "mined_swapped", "hard_negative", "mined_shuffled")


@dataclass
class QualityReport:
    success: bool
    checks: list[dict[str, Any]] = field(default_factory=list)

    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["success"]]


class QualityGateError(RuntimeError):
    pass


def _check_frames(shard_glob: str) -> dict[str, pd.DataFrame]:
    """The pairs themselves plus small derived frames for the set-level rules."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW pairs AS SELECT * FROM read_parquet({sql_string(shard_glob)})")
    # The doc texts as their md5 (NULL stays NULL, for the not-null checks): each distinct text is checked
    # once below, and leaving ~1 KB a row out of pandas keeps the gate's memory small at TDI300K.
    pairs = con.execute("SELECT * REPLACE (md5(doc_a) AS doc_a, md5(doc_b) AS doc_b) FROM pairs").df()
    balance = con.execute(
        """
        SELECT split,
               count(*) FILTER (WHERE label = 0) AS n_a_depends_on_b,
               count(*) FILTER (WHERE label = 1) AS n_no_dependency,
               count(*) FILTER (WHERE label = 2) AS n_b_depends_on_a
        FROM pairs GROUP BY split
        """
    ).df()
    leaked = con.execute(
        """
        WITH tool_split AS (
            SELECT tool_a_id AS tool_id, split FROM pairs UNION SELECT tool_b_id, split FROM pairs)
        SELECT tool_id FROM tool_split GROUP BY tool_id HAVING count(DISTINCT split) > 1
        """
    ).df()
    none_but_dependent = con.execute(
        """
        SELECT n.pair_id FROM pairs n JOIN pairs d
          ON d.label <> 1 AND n.label = 1
         AND least(n.tool_a_id, n.tool_b_id) = least(d.tool_a_id, d.tool_b_id)
         AND greatest(n.tool_a_id, n.tool_b_id) = greatest(d.tool_a_id, d.tool_b_id)
        """
    ).df()
    # row-wise rules as queries that return the offending rows (great-expectations' pandas versions of
    # these two loop in Python: 26 s at 100k rows)
    self_pairs = con.execute("SELECT pair_id, tool_a_id FROM pairs WHERE tool_a_id = tool_b_id").df()
    label_names = ", ".join(f"({k}, {sql_string(v)})" for k, v in ID2LABEL.items())
    mislabelled = con.execute(
        f"""SELECT pair_id, label, label_name FROM pairs
            WHERE (label, label_name) NOT IN (SELECT (k, v) FROM (VALUES {label_names}) t(k, v))""").df()
    # Each distinct doc once (a doc sits in many pairs), against one compiled validator: great-expectations'
    # own json-schema expectation re-checks the schema itself for every value (14 ms a doc, 5 minutes at 23k docs).
    docs = [d for (d,) in con.execute("SELECT doc_a AS d FROM pairs UNION SELECT doc_b FROM pairs").fetchall() if d is not None]
    invalid = [(d, error) for d in docs if (error := doc_error(d))]
    invalid_docs = pd.DataFrame(invalid, columns=["doc", "error"])
    parameter_frames = _parameter_frames(con)
    kind_frames = _kind_frames(con)
    con.close()
    return {"pairs": pairs, "self_pairs": self_pairs, "mislabelled": mislabelled, "invalid_docs": invalid_docs, "balance": balance, "leaked_tools": leaked,
            "none_but_dependent": none_but_dependent, **parameter_frames, **kind_frames}


def _parameter_frames(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    """The rows whose parameter-level columns break the schema's rules (schemas/tdi.py): set on a
    'no dependency' row; a ``consumer_param`` that is no input of the consumer doc (doc_a for label 0,
    doc_b for label 2); a ``producer_output`` that is no output of the producer doc (declared, or the
    name-derived one when it declares none). Each distinct (doc, name) is checked once. Shards
    without these columns get empty frames here: the column-set check reports them."""
    present = {d[0] for d in con.execute("SELECT * FROM pairs LIMIT 0").description}
    if not {"consumer_param", "producer_output"} <= present:
        return {"parameters_on_none": pd.DataFrame(columns=["pair_id", "consumer_param", "producer_output"]),
                "bad_consumer_param": pd.DataFrame(columns=["pair_id", "consumer_param", "consumer_inputs"]),
                "bad_producer_output": pd.DataFrame(columns=["pair_id", "producer_output", "producer_outputs"])}
    on_none = con.execute("""SELECT pair_id, consumer_param, producer_output FROM pairs
                             WHERE label = 1 AND (consumer_param IS NOT NULL OR producer_output IS NOT NULL)""").df()
    found: dict[str, list[tuple[str, str, str]]] = {}
    for column, side, names_of in (("consumer_param", "consumer", input_param_names), ("producer_output", "producer", output_param_names)):
        # label 0: doc_a depends on doc_b; label 2: doc_b depends on doc_a
        doc = "doc_a" if side == "consumer" else "doc_b"
        other = "doc_b" if side == "consumer" else "doc_a"
        groups = con.execute(f"""
            SELECT CASE WHEN label = 0 THEN {doc} ELSE {other} END AS doc, {column} AS name, min(pair_id) AS pair_id
            FROM pairs WHERE label <> 1 AND {column} IS NOT NULL GROUP BY ALL""").fetchall()
        bad = []
        for doc_json, name, pair_id in groups:
            if doc_json is None:
                continue  # a missing doc fails the not-null check
            try:
                names = names_of(json.loads(doc_json))
            except (TypeError, ValueError, KeyError, AttributeError):
                names = []  # an invalid doc fails invalid_docs too; here it has no such parameter
            if name not in names:
                bad.append((pair_id, name, json.dumps(names)[:200]))
        found[column] = bad
    return {"parameters_on_none": on_none,
            "bad_consumer_param": pd.DataFrame(found["consumer_param"], columns=["pair_id", "consumer_param", "consumer_inputs"]),
            "bad_producer_output": pd.DataFrame(found["producer_output"], columns=["pair_id", "producer_output", "producer_outputs"])}


def _kind_frames(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    """The rows whose dependency kind columns break the schema's rules (schemas/tdi.py, version 3): a
    dependent row (label 0 or 2) whose ``kind`` is not one of DEPENDENCY_KINDS (null included); a 'no
    dependency' row with a ``kind`` or ``support``; a precondition row that names a ``consumer_param`` or
    ``producer_output`` (it passes no value); a ``support`` below 1. Shards without these columns get
    empty frames here: the column-set check reports them."""
    present = {d[0] for d in con.execute("SELECT * FROM pairs LIMIT 0").description}
    if not {"kind", "support", "consumer_param", "producer_output"} <= present:
        return {"bad_kind": pd.DataFrame(columns=["pair_id", "label", "kind"]),
                "kind_on_none": pd.DataFrame(columns=["pair_id", "kind", "support"]),
                "parameters_on_precondition": pd.DataFrame(columns=["pair_id", "consumer_param", "producer_output"]),
                "bad_support": pd.DataFrame(columns=["pair_id", "support"])}
    kinds = ", ".join(sql_string(k) for k in DEPENDENCY_KINDS)
    return {
        "bad_kind": con.execute(f"""SELECT pair_id, label, kind FROM pairs
                                    WHERE label <> 1 AND (kind IS NULL OR kind NOT IN ({kinds}))""").df(),
        "kind_on_none": con.execute("""SELECT pair_id, kind, support FROM pairs
                                       WHERE label = 1 AND (kind IS NOT NULL OR support IS NOT NULL)""").df(),
        "parameters_on_precondition": con.execute(f"""SELECT pair_id, consumer_param, producer_output FROM pairs
            WHERE kind = {sql_string(KIND_PRECONDITION)} AND (consumer_param IS NOT NULL OR producer_output IS NOT NULL)""").df(),
        "bad_support": con.execute("SELECT pair_id, support FROM pairs WHERE support < 1").df(),
    }


def doc_error(doc_json: str) -> str | None:
    """The first reason a shard's doc text is no valid API doc, or None."""
    try:
        doc = json.loads(doc_json)
    except json.JSONDecodeError as e:
        return f"not JSON: {e}"
    errors = schema_errors(doc, "api_doc")
    return errors[0] if errors else None


def _suites(gx: Any) -> dict[str, list[Any]]:
    E = gx.expectations
    columns = ["pair_id", "doc_a", "doc_b", "tool_a_id", "tool_b_id", "label", "label_name", "split", "origin", "source_a", "source_b"]
    # parameter level (schema version 2): null where unknown; kind and support (version 3): null on label 1
    nullable = ["consumer_param", "producer_output", "kind", "support"]
    assert columns + nullable == TDI_PAIR_SCHEMA.names, "the gate's columns follow schemas/tdi.py"
    return {
        "pairs": [
            E.ExpectTableColumnsToMatchSet(column_set=columns + nullable, exact_match=True),
            *(E.ExpectColumnValuesToNotBeNull(column=c) for c in columns),
            E.ExpectColumnValuesToBeInSet(column="label", value_set=list(ID2LABEL)),
            E.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "validation"]),
            E.ExpectColumnValuesToBeInSet(column="origin", value_set=list(ORIGINS)),
            E.ExpectColumnValuesToBeUnique(column="pair_id"),
            E.ExpectCompoundColumnsToBeUnique(column_list=["tool_a_id", "tool_b_id"]),
        ],
        "self_pairs": [E.ExpectTableRowCountToEqual(value=0)],  # a tool never pairs with itself
        "mislabelled": [E.ExpectTableRowCountToEqual(value=0)],  # label_name is the name of label
        "invalid_docs": [E.ExpectTableRowCountToEqual(value=0)],  # every doc valid against schemas/api_doc
        "balance": [
            E.ExpectColumnPairValuesToBeEqual(column_A="n_a_depends_on_b", column_B="n_no_dependency"),
            E.ExpectColumnPairValuesToBeEqual(column_A="n_no_dependency", column_B="n_b_depends_on_a"),
        ],
        "leaked_tools": [E.ExpectTableRowCountToEqual(value=0)],  # no doc in two splits
        "none_but_dependent": [E.ExpectTableRowCountToEqual(value=0)],
        "parameters_on_none": [E.ExpectTableRowCountToEqual(value=0)],  # class 1 has no consumer parameter
        "bad_consumer_param": [E.ExpectTableRowCountToEqual(value=0)],  # an input of the consumer doc
        "bad_producer_output": [E.ExpectTableRowCountToEqual(value=0)],  # an output of the producer doc
        "bad_kind": [E.ExpectTableRowCountToEqual(value=0)],  # labels 0 and 2: data or precondition
        "kind_on_none": [E.ExpectTableRowCountToEqual(value=0)],  # label 1: no kind, no support
        "parameters_on_precondition": [E.ExpectTableRowCountToEqual(value=0)],  # a precondition passes no value
        "bad_support": [E.ExpectTableRowCountToEqual(value=0)],  # >= 1 where counted
    }


def validate_shards(shard_dir: Path, progress: CountProgress | None = None) -> QualityReport:
    """Run the suite over every shard in ``shard_dir``; never raises on data problems. ``progress``: its total
    set to the checks once the suites are made (before the shards are read), advanced by each frame's checks as
    they are validated; its detail says while the shards are read."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    suites = _suites(gx)
    if progress is not None:
        progress.set_total(sum(len(e) for e in suites.values()))
        progress.detail = "reading the shards"
    frames = _check_frames(str(shard_dir / "*.parquet"))
    if progress is not None:
        progress.detail = ""
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)  # keep flow logs readable
    source = context.data_sources.add_pandas("tdi")
    report = QualityReport(success=True)
    for frame_name, expectations in suites.items():
        asset = source.add_dataframe_asset(frame_name)
        batch = asset.add_batch_definition_whole_dataframe(f"{frame_name}_all").get_batch(
            batch_parameters={"dataframe": frames[frame_name]}
        )
        suite = context.suites.add(gx.ExpectationSuite(name=f"tdi_{frame_name}"))
        for expectation in expectations:
            suite.add_expectation(expectation)
        result = batch.validate(suite)
        for r in result.results:
            cfg = r.expectation_config
            check = {
                "frame": frame_name,
                "expectation": cfg.type,
                "kwargs": {k: v for k, v in cfg.kwargs.items() if k != "batch_id"},
                "success": bool(r.success),
                "unexpected_count": (r.result or {}).get("unexpected_count"),
                "observed_value": (r.result or {}).get("observed_value"),
            }
            if not r.success and cfg.type == "expect_table_row_count_to_equal":  # the offending rows, say which
                check["examples"] = [{k: str(v)[:300] for k, v in row.items()}
                                     for row in frames[frame_name].head(3).to_dict("records")]
            report.checks.append(check)
            report.success &= check["success"]
        if progress is not None:
            progress.advance(len(expectations))
    return report
