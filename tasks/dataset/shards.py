"""Seeded, shuffled zstd Parquet shards with an explicit schema, a manifest and a dataset card."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.tdi import DEPENDENCY_KINDS, ID2LABEL, LABEL_A_DEPENDS_ON_B, TDI_PAIR_SCHEMA
from tasks.common.atomic import replace_dir
from tasks.common.checksums import sha256_file
from tasks.common.progress import CountProgress
from tasks.dataset.plots import MIX_PLOT

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class ShardConfig:
    rows_per_shard: int = 50_000
    seed: int = 13
    compression: str = "zstd"
    compression_level: int = 6


@dataclass(frozen=True)
class ShardInfo:
    file: str  # relative to the dataset folder
    split: str
    rows: int
    sha256: str
    label_counts: dict[str, int]
    # dependent pairs per kind: the shard's class-0 rows by ``kind`` (each pair is one class-0 row; its
    # class-2 swap has the same kind and may sit in another shard of the split)
    kind_counts: dict[str, int] = field(default_factory=dict)
    # rows per class and origin: {label_name: {origin: rows}} (validated/swapped/shuffled from the LLM,
    # mined/mined_swapped/hard_negative from the code; schemas/tdi.py)
    origin_counts: dict[str, dict[str, int]] = field(default_factory=dict)


def _origin_counts(labels: Sequence[int], origins: Sequence[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (label, origin), n in sorted(Counter(zip(labels, origins)).items()):
        out.setdefault(ID2LABEL[label], {})[origin] = n
    return out


def _kind_counts(labels: Sequence[int], kinds: Sequence[str | None]) -> dict[str, int]:
    found = Counter(k for label, k in zip(labels, kinds) if label == LABEL_A_DEPENDS_ON_B)
    return {k: found.get(k, 0) for k in DEPENDENCY_KINDS}


def write_shards(rows: Sequence[dict], out_dir: Path, cfg: ShardConfig,
                 progress: CountProgress | None = None) -> list[ShardInfo]:
    """Write ``rows`` as ``shards/<split>-NNNNN-of-MMMMM.parquet``; returns one info per shard. ``progress``
    advances by the rows of each shard written.

    Rows are sorted by pair_id before the seeded shuffle, so the bytes depend only on the row set
    and the seed, not on the order the rows arrived in.
    """
    tmp_dir = out_dir / "shards.tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    infos: list[ShardInfo] = []
    rng = np.random.default_rng(cfg.seed)
    for split in SPLITS:
        split_rows = sorted((r for r in rows if r["split"] == split), key=lambda r: r["pair_id"])
        if not split_rows:
            continue
        table = pa.Table.from_pylist(split_rows, schema=TDI_PAIR_SCHEMA)
        table = table.take(pa.array(rng.permutation(table.num_rows)))
        n_shards = max(1, -(-table.num_rows // cfg.rows_per_shard))
        for k in range(n_shards):
            part = table.slice(k * cfg.rows_per_shard, cfg.rows_per_shard)
            name = f"{split}-{k:05d}-of-{n_shards:05d}.parquet"
            pq.write_table(
                part,
                tmp_dir / name,
                compression=cfg.compression,
                compression_level=cfg.compression_level,
                write_statistics=True,
            )
            labels = Counter(part.column("label").to_pylist())
            infos.append(
                ShardInfo(
                    file=f"shards/{name}",
                    split=split,
                    rows=part.num_rows,
                    sha256=sha256_file(tmp_dir / name),
                    label_counts={ID2LABEL[k]: labels.get(k, 0) for k in sorted(ID2LABEL)},
                    kind_counts=_kind_counts(part.column("label").to_pylist(), part.column("kind").to_pylist()),
                    origin_counts=_origin_counts(part.column("label").to_pylist(), part.column("origin").to_pylist()),
                )
            )
            if progress is not None:
                progress.advance(part.num_rows)
    _swap_in(out_dir, tmp_dir)
    return infos


def _swap_in(out_dir: Path, tmp_dir: Path) -> None:
    """Swap in the whole folder at once: readers never see a mix of two runs' shards."""
    replace_dir(tmp_dir, out_dir / "shards")


class _DocLookup:
    """The selected docs' JSON by doc id, indexed once: each row group takes its docs by position
    instead of joining against every selected doc (two joins per row group were a third of the time)."""

    def __init__(self, docs: Any) -> None:
        self.position = {doc_id: k for k, doc_id in enumerate(docs["id"].to_list())}
        self.json = docs["json"].to_arrow()

    def take(self, ids: list[str]) -> pa.Array:
        try:
            return self.json.take(pa.array([self.position[i] for i in ids], type=pa.int64()))
        except KeyError as exc:
            raise ValueError(f"a planned row names a doc that is in no chunk's validated.parquet: {exc.args[0]}") from None


def _plan_table(plan: Any, rows: Any, docs: _DocLookup) -> pa.Table:
    """``rows`` of a ``tasks.dataset.balance.BalancePlan`` as a TDI_PAIR_SCHEMA table."""
    a_src, b_src = rows["a_src"].to_numpy(), rows["b_src"].to_numpy()
    a_ids, b_ids = plan.source_doc_ids(a_src), plan.source_doc_ids(b_src)
    labels = rows["label"].to_list()
    columns = {
        "pair_id": rows["pair_id"].to_arrow(),
        "doc_a": docs.take(a_ids),
        "doc_b": docs.take(b_ids),
        "tool_a_id": pa.array(a_ids, pa.string()),
        "tool_b_id": pa.array(b_ids, pa.string()),
        "label": pa.array(labels),
        "label_name": pa.array([ID2LABEL[label] for label in labels], pa.string()),
        "split": rows["split"].to_arrow(),
        "origin": rows["origin"].to_arrow(),
        "source_a": pa.array(plan.source_names(a_src), pa.string()),
        "source_b": pa.array(plan.source_names(b_src), pa.string()),
        "consumer_param": rows["consumer_param"].to_arrow(),
        "producer_output": rows["producer_output"].to_arrow(),
        "kind": rows["kind"].to_arrow(),
        "support": rows["support"].to_arrow(),
    }
    return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in TDI_PAIR_SCHEMA], schema=TDI_PAIR_SCHEMA)


def _piece_table(plan: Any, piece: Any, docs: _DocLookup, extra: pa.Table | None) -> pa.Table:
    """``piece`` (plan rows, and rows of ``extra`` where its ``extra`` column is set) as a TDI_PAIR_SCHEMA
    table in the piece's order."""
    if extra is None:
        return _plan_table(plan, piece, docs)
    import polars as pl

    is_extra = piece["extra"].is_not_null().to_numpy()
    planned = _plan_table(plan, piece.filter(~pl.Series(is_extra)), docs)
    added = extra.take(pa.array(piece["extra"].drop_nulls().to_numpy(), pa.int64()))
    position = np.empty(piece.height, np.int64)  # where each piece row is in planned + added
    position[~is_extra] = np.arange(planned.num_rows)
    position[is_extra] = planned.num_rows + np.arange(added.num_rows)
    return pa.concat_tables([planned, added]).take(pa.array(position))


def _write_planned_shard(plan: Any, piece: Any, path: Path, docs: _DocLookup, cfg: ShardConfig, row_group_rows: int,
                         extra: pa.Table | None = None) -> str:
    with pq.ParquetWriter(path, TDI_PAIR_SCHEMA, compression=cfg.compression,
                          compression_level=cfg.compression_level, write_statistics=True) as writer:
        for start in range(0, piece.height, row_group_rows):
            writer.write_table(_piece_table(plan, piece.slice(start, row_group_rows), docs, extra))
    return sha256_file(path)


def _with_extra_rows(plan_rows: Any, extra: pa.Table) -> Any:
    """The plan's rows followed by ``extra``'s (TDI_PAIR_SCHEMA rows, as build-tdi's mined pairs), each of
    those with its index in ``extra`` (column ``extra``; null on plan rows) and no plan source."""
    import polars as pl

    columns = ["split", "label", "origin", "consumer_param", "producer_output", "kind", "support", "pair_id"]
    added = pl.from_arrow(extra.select(columns)).with_columns(
        a_src=pl.lit(None, pl.UInt32), b_src=pl.lit(None, pl.UInt32), extra=pl.int_range(extra.num_rows, dtype=pl.UInt32))
    planned = plan_rows.with_columns(extra=pl.lit(None, pl.UInt32))
    return pl.concat([planned, added.select(planned.columns).cast(planned.schema)])


def write_planned_shards(plan: Any, out_dir: Path, cfg: ShardConfig, row_group_rows: int = 10_000,
                         workers: int | None = None, extra_rows: Sequence[dict] = ()) -> list[ShardInfo]:
    """``write_shards`` for a ``tasks.dataset.balance.BalancePlan``: the same file names, sort, seeded shuffle,
    schema and manifest entries, but rows are assembled ``row_group_rows`` at a time (one Parquet
    row group each) from columns and the selected docs, so memory does not follow the shard size.
    The bytes depend only on the planned rows, the docs and the seed; ``workers`` threads (default:
    the CPU count) write different shards at once (compression releases the GIL). ``extra_rows``
    (TDI_PAIR_SCHEMA dicts: build-tdi's mined pairs, a few thousand at most) are shuffled into their
    splits with the plan's rows."""
    from concurrent.futures import ThreadPoolExecutor

    import polars as pl

    from tasks.dataset.balance import selected_docs

    tmp_dir = out_dir / "shards.tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    docs = _DocLookup(selected_docs(plan))
    extra = pa.Table.from_pylist(list(extra_rows), schema=TDI_PAIR_SCHEMA) if extra_rows else None
    rows = plan.rows if extra is None else _with_extra_rows(plan.rows, extra)
    jobs: list[tuple[str, str, Any]] = []  # (split, file name, rows), in manifest order
    rng = np.random.default_rng(cfg.seed)
    for split in SPLITS:
        part = rows.filter(pl.col("split") == split).sort("pair_id")
        if not part.height:
            continue
        part = part[rng.permutation(part.height)]
        n_shards = max(1, -(-part.height // cfg.rows_per_shard))
        for k in range(n_shards):
            jobs.append((split, f"{split}-{k:05d}-of-{n_shards:05d}.parquet",
                         part.slice(k * cfg.rows_per_shard, cfg.rows_per_shard)))
    with ThreadPoolExecutor(max_workers=max(1, workers or os.cpu_count() or 1)) as pool:
        digests = list(pool.map(lambda job: _write_planned_shard(plan, job[2], tmp_dir / job[1], docs, cfg, row_group_rows,
                                                                 extra), jobs))
    infos = []
    for (split, name, piece), digest in zip(jobs, digests):
        labels = Counter(piece["label"].to_list())
        infos.append(ShardInfo(file=f"shards/{name}", split=split, rows=piece.height, sha256=digest,
                               label_counts={ID2LABEL[lab]: labels.get(lab, 0) for lab in sorted(ID2LABEL)},
                               kind_counts=_kind_counts(piece["label"].to_list(), piece["kind"].to_list()),
                               origin_counts=_origin_counts(piece["label"].to_list(), piece["origin"].to_list())))
    _swap_in(out_dir, tmp_dir)
    return infos


def count_table(infos: Sequence[ShardInfo]) -> dict[str, dict[str, int]]:
    """{split: {label_name: rows}} summed over shards."""
    out: dict[str, dict[str, int]] = {}
    for info in infos:
        per = out.setdefault(info.split, {name: 0 for name in ID2LABEL.values()})
        for name, n in info.label_counts.items():
            per[name] += n
    return out


def kind_table(infos: Sequence[ShardInfo]) -> dict[str, dict[str, int]]:
    """{split: {kind: dependent pairs}} summed over shards (schemas.tdi.DEPENDENCY_KINDS)."""
    out: dict[str, dict[str, int]] = {}
    for info in infos:
        per = out.setdefault(info.split, {kind: 0 for kind in DEPENDENCY_KINDS})
        for kind, n in info.kind_counts.items():
            per[kind] += n
    return out


def origin_table(infos: Sequence[ShardInfo]) -> dict[str, dict[str, dict[str, int]]]:
    """{split: {label_name: {origin: rows}}} summed over shards: which part of the data each class comes from."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for info in infos:
        per = out.setdefault(info.split, {})
        for label, origins in info.origin_counts.items():
            for origin, n in origins.items():
                per.setdefault(label, {})[origin] = per.setdefault(label, {}).get(origin, 0) + n
    return out


def build_manifest(dataset: str, infos: Sequence[ShardInfo], extra: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a dataset made of ``infos`` (JSON types); ``tasks.dataset.publish`` writes it last."""
    manifest = {
        "dataset": dataset,
        "schema": {"fields": [f.name for f in TDI_PAIR_SCHEMA], "arrow": TDI_PAIR_SCHEMA.to_string(show_schema_metadata=False)},
        "labels": ID2LABEL,
        "counts": count_table(infos),
        "dependent_pairs_by_kind": kind_table(infos),  # {split: {"data": n, "precondition": n}}
        "rows_by_class_and_origin": origin_table(infos),  # {split: {label_name: {origin: rows}}}
        "total_rows": sum(i.rows for i in infos),
        "shards": [asdict(i) for i in infos],
        **extra,
    }
    return json.loads(json.dumps(manifest, default=str))


def write_manifest(out_dir: Path, infos: Sequence[ShardInfo], extra: dict[str, Any]) -> dict[str, Any]:
    """Write ``manifest.json`` atomically; returns the manifest as written (JSON types)."""
    manifest = build_manifest(out_dir.name, infos, extra)
    path = out_dir / "manifest.json"
    tmp = path.with_suffix(".json.tmp")
    text = json.dumps(manifest, indent=2, sort_keys=False, default=str)
    tmp.write_text(text)
    os.replace(tmp, path)
    return json.loads(text)


def load_snippet(out_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """The card's loading code: ``datasets.load_dataset(<folder>)`` (the card's YAML ``configs`` name the
    splits' shards and its ``dataset_info`` the features, so both splits load with ``label`` a ClassLabel),
    plus the hub repo when the run pushes there (``--push-to-hub``)."""
    folder = json.dumps(str(out_dir))  # a string literal whatever the path holds (quotes, spaces)
    repo = (manifest.get("config") or {}).get("push_to_hub")
    return ["```python", "import datasets, polars as pl",
            f"ds = datasets.load_dataset({folder})  # splits {', '.join(manifest['counts'])}; label: ClassLabel{tuple(ID2LABEL.values())}",
            *([f'# from the hub: datasets.load_dataset("{repo}")'] if repo else []),
            f"df = pl.read_parquet({json.dumps(str(out_dir / 'shards' / '*.parquet'))})", "```"]


# Hugging Face hub card metadata (the YAML block a card starts with). The source data's licenses vary by
# source, so the card says "other" and explains in its License section (LICENSE_NOTES).
HUB_LICENSE_NAME = "mixed-source-licenses"
HUB_TASK = "text-classification"
_SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                    (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))
MINED_LICENSE_NOTE = (
    "No single license: every doc is built from the signature and docstring of a function in the files "
    "`sources.json` lists (package, version, sha256), and those keep their own licenses: the Python standard "
    "library's are under the PSF License Agreement (PSF-2.0), each site-packages package's under its own "
    "(its dist-info metadata), a source tree's under its project's. The pairs and labels are derived by "
    "tgr-pipeline. Check the sources' licenses before redistributing.")
LLM_LICENSE_NOTE = (
    "No single license: every doc is written by an LLM from a function of the source (Provenance), so it derives "
    "from code under that code's license (the Python standard library: PSF-2.0; CodeSearchNet: each function's "
    "repository license) and from a model's output under that model's terms of use. The pairs and labels are "
    "derived by tgr-pipeline. Check both before redistributing.")


def size_category(rows: int) -> str:
    """The hub's ``size_categories`` bucket of ``rows``."""
    return next((name for limit, name in _SIZE_CATEGORIES if rows < limit), "n>1T" if rows >= 10**12 else "1B<n<10B")


def hub_features() -> list[dict[str, Any]]:
    """The shard schema as the card's ``dataset_info.features`` (``datasets``' YAML form): ``label`` a
    ClassLabel of schemas.tdi.ID2LABEL in id order, every other column its Arrow type."""
    features: list[dict[str, Any]] = []
    for f in TDI_PAIR_SCHEMA:
        dtype: Any = ({"class_label": {"names": {str(k): ID2LABEL[k] for k in sorted(ID2LABEL)}}}
                      if f.name == "label" else str(f.type))  # string, int8, int32: datasets' Value names
        features.append({"name": f.name, "dtype": dtype})
    return features


def hub_card_data(manifest: dict[str, Any], pretty_name: str) -> Any:
    """The card's hub metadata (a ``huggingface_hub.DatasetCardData``): license, task, size, pretty name,
    one ``default`` config whose ``data_files`` are each split's shard glob (so ``load_dataset(<folder>)``
    reads only the shards, not manifest.json or quality.json), and ``dataset_info`` with the typed features."""
    from huggingface_hub import DatasetCardData

    return DatasetCardData(
        license="other", license_name=HUB_LICENSE_NAME, task_categories=[HUB_TASK],
        size_categories=[size_category(manifest["total_rows"])], pretty_name=pretty_name,
        configs=[{"config_name": "default",
                  "data_files": [{"split": split, "path": f"shards/{split}-*.parquet"} for split in manifest["counts"]]}],
        # no ``splits``: datasets wants their num_bytes (the Arrow size, unknown here) or ignores the entry
        dataset_info={"config_name": "default", "features": hub_features()},
    )


# The card's words on the parameter-level columns (schema version 2), shared by both flows' cards.
PARAMETER_COLUMNS_CARD = [
    "## Parameter-level columns (schema version 2)",
    "- `consumer_param`: the dependent tool's input parameter that takes the other tool's output, as its doc "
    "spells it. The dependent (consumer) is `doc_a` for label 0 and `doc_b` for label 2; null for label 1.",
    "- `producer_output`: the prerequisite's output that feeds that parameter, as its doc spells it (a declared "
    "output, or the one its name says it returns when it declares none); null where not known.",
    "- The quality gate checks that each names a parameter of the right doc. Version 1 shards lack both columns.",
]

# The card's words on the dependency kind (schema version 3), shared by both flows' cards.
KIND_COLUMNS_CARD = [
    "## Dependency kind (schema version 3)",
    "- `kind` on labels 0 and 2 (null on label 1): `data` when an output of the prerequisite feeds an input "
    "parameter of the dependent; `precondition` when the prerequisite must be called first (a check, a lookup of "
    "state, authentication, a confirmation) and passes no value: `consumer_param` and `producer_output` are then null.",
    "- `support`: how many distinct functions or runs show the dependency (>= 1); null where not counted (LLM pairs) "
    "and on label 1. Shards of versions 1 and 2 lack both columns and held only `data` pairs.",
]


def kind_card_lines(manifest: dict[str, Any]) -> list[str]:
    """The card's table of dependent pairs per kind and split (empty for a manifest written before kinds)."""
    table = manifest.get("dependent_pairs_by_kind")
    if not table:
        return []
    return ["", "## Dependent pairs by kind",
            "Each dependent pair is one label-0 row and its label-2 swap.", "",
            "| split | " + " | ".join(DEPENDENCY_KINDS) + " |", "|---|" + "---|" * len(DEPENDENCY_KINDS),
            *(f"| {split} | " + " | ".join(str(per.get(k, 0)) for k in DEPENDENCY_KINDS) + " |" for split, per in table.items())]


def origin_card_lines(manifest: dict[str, Any]) -> list[str]:
    """The card's table of rows per class and origin, per split (empty for a manifest written before it)."""
    table = manifest.get("rows_by_class_and_origin")
    if not table:
        return []
    lines = ["", "## Rows by class and origin",
             "`validated` / `swapped` / `shuffled`: the LLM's pairs (classes 0 / 2 / 1); `mined` / `mined_swapped` / "
             "`hard_negative` (`mined_shuffled`: a cross-package negative where a split had too few same-package "
             "ones): pairs mined from code.", "", "| split | class | rows by origin |", "|---|---|---|"]
    for split, per in table.items():
        for label in ID2LABEL.values():
            origins = per.get(label, {})
            lines.append(f"| {split} | {label} | " + ", ".join(f"`{o}` {n}" for o, n in origins.items()) + " |")
    return lines


def write_dataset_card(out_dir: Path, manifest: dict[str, Any], folder: Path | None = None) -> Path:
    """``README.md`` for the dataset at ``out_dir``, written into ``folder`` (default ``out_dir``;
    a staging folder before publishing)."""
    counts = manifest["counts"]
    lines = [
        f"# {manifest['dataset']}: TDI tool-dependency pairs",
        "",
        "Pairs of tool API documents labelled for the Tool Graph Retriever dependency "
        "discriminator, built by the `build-tdi` flow of tgr-pipeline: CodeSearchNet-style "
        "function records -> agent 1 writes the API doc -> agent 2 writes a dependent API -> "
        "agent 3 checks the dependency -> swap and reshuffle into three balanced classes.",
        "",
        "## Labels",
        "| id | name | meaning |",
        "|---|---|---|",
        "| 0 | a_depends_on_b | t_a needs t_b's output (or t_b's verification) |",
        "| 1 | no_dependency | independent tools (pairs reshuffled within a split) |",
        "| 2 | b_depends_on_a | t_b depends on t_a (class 0 swapped) |",
        "",
        *PARAMETER_COLUMNS_CARD,
        "- Here agent 2 names both with the dependent API, and a deterministic check rejects the answer before agent 3 "
        "is asked when `consumer_param` is no input of the dependent doc (`generate_bad_consumer_param`), "
        "`producer_output` is no output of the prerequisite (`generate_bad_producer_output`) or their declared types "
        "disagree (`generate_type_mismatch`), or the new API is the given one again or renamed (`generate_echoed_input`). "
        "Mined rows carry the mined code's names (mine-tdi).",
        "",
        *KIND_COLUMNS_CARD,
        "",
        "## Counts",
        "| split | " + " | ".join(ID2LABEL.values()) + " |",
        "|---|" + "---|" * len(ID2LABEL),
    ]
    for split, per in counts.items():
        lines.append(f"| {split} | " + " | ".join(str(per[n]) for n in ID2LABEL.values()) + " |")
    lines += kind_card_lines(manifest)
    lines += origin_card_lines(manifest)
    acc = manifest.get("accounting", {})
    lines += [
        "",
        "## Provenance",
        f"- source: `{json.dumps(manifest.get('config', {}).get('source', {}))}`",
        f"- LLM: `{manifest.get('llm', {}).get('model', '?')}` at `{manifest.get('llm', {}).get('base_url', '?')}`",
        f"- prompt versions: {', '.join(manifest.get('prompt_versions', {}).values())}",
        f"- records read {acc.get('read', '?')}{_read_parts(manifest)}, accepted {acc.get('accepted', '?')}, rejected "
        f"{acc.get('rejected', '?')} (reasons in `records.duckdb`, table `record_outcomes`)",
        f"- seed {manifest.get('config', {}).get('balance', {}).get('seed', '?')}; no tool doc appears in two splits",
        *_mined_card_lines(manifest.get("mined")),
    ]
    return write_card(out_dir, counts, lines, folder, manifest=manifest, license_note=LLM_LICENSE_NOTE,
                      limits="Documents are written by an LLM from real functions; the dependency judgement is an "
                             "LLM's, so labels carry that model's errors. Quality checks (great-expectations) "
                             "guarantee the structure, not the semantics.")


def _read_parts(manifest: dict[str, Any]) -> str:
    """What the books' records read are when mined pairs were mixed in: function records and mined pairs."""
    mined, read = manifest.get("mined"), manifest.get("accounting", {}).get("read")
    if not mined or not isinstance(read, int):
        return ""
    return f" ({read - mined['pairs_read']} function records, {mined['pairs_read']} mined pairs)"


def _mined_card_lines(mined: dict[str, Any] | None) -> list[str]:
    if not mined:
        return []
    return [f"- mined pairs mixed in (`--mined-per-class` {mined['per_class_target']}): {mined['per_class']} per class from "
            f"this interpreter's {mined['source']} ({mined['files_read']} files, {mined['candidates']} candidates, "
            f"{mined['data_flow_pairs']} data-flow and {mined['precondition_pairs_kept']} precondition pairs), mined in "
            f"{mined['seconds']} s; of {mined['pairs_read']} mined pairs {mined['pairs_in_dataset']} are in the dataset, "
            f"the others rejected by reason `{json.dumps(mined['pairs_rejected_by_reason'])}` (`records.duckdb`, "
            "record ids `mined:...`)"]


def write_card(out_dir: Path, counts: dict[str, Any], lines: list[str], folder: Path | None, limits: str,
               manifest: dict[str, Any] | None = None, license_note: str = LLM_LICENSE_NOTE) -> Path:
    """A card: the hub's YAML metadata (:func:`hub_card_data`), the body ``lines`` (its first line the
    ``# title``, also the card's ``pretty_name``), then the sections every card ends with (License, Load,
    Limits); written as ``README.md`` into ``folder`` (default ``out_dir``)."""
    from huggingface_hub import DatasetCard

    manifest = manifest if manifest is not None else {"counts": counts, "total_rows": sum(
        n for per in counts.values() for n in per.values())}
    plot = (["", f"![classes, origins and dependent pairs per kind, per split]({MIX_PLOT})"]
            if (folder or out_dir).joinpath(MIX_PLOT).is_file() else [])  # staged before the card (mine-tdi)
    lines = [*lines, *plot, "", "## License", license_note, "", "## Load", *load_snippet(out_dir, manifest), "",
             "## Limits", limits]
    card_data = hub_card_data(manifest, pretty_name=lines[0].lstrip("# "))
    card = DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")
    path = (folder or out_dir) / "README.md"
    path.write_text(str(card))  # DatasetCard parsed the YAML back: the metadata is valid for the hub
    return path
