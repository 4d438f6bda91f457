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
from schemas.tdi import ID2LABEL
from tasks.dataset.accounting import sql_string

logger = logging.getLogger(__name__)

# build-tdi's LLM pairs (validated/swapped/shuffled) and mine-tdi's mined pairs and negatives
ORIGINS = ("validated", "swapped", "shuffled", "mined", "mined_swapped", "hard_negative")


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
    con.close()
    invalid = [(d, error) for d in docs if (error := doc_error(d))]
    invalid_docs = pd.DataFrame(invalid, columns=["doc", "error"])
    return {"pairs": pairs, "self_pairs": self_pairs, "mislabelled": mislabelled, "invalid_docs": invalid_docs, "balance": balance, "leaked_tools": leaked,
            "none_but_dependent": none_but_dependent}


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
    return {
        "pairs": [
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
    }


def validate_shards(shard_dir: Path) -> QualityReport:
    """Run the suite over every shard in ``shard_dir``; never raises on data problems."""
    import great_expectations as gx

    frames = _check_frames(str(shard_dir / "*.parquet"))
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)  # keep flow logs readable
    source = context.data_sources.add_pandas("tdi")
    report = QualityReport(success=True)
    for frame_name, expectations in _suites(gx).items():
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
    return report
