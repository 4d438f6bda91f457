"""Tool sets: importers for the real annotated benchmarks and the documented on-disk format.

Every importer converts a benchmark's tools into the project's API doc shape
(schemas/api_doc.schema.json) so that finetuning, test and retrieval data look like the
pretraining docs. Nothing is silently lost: every truncation, fallback, rejected edge and
unknown gold tool is written to an ``ImportReport`` (see docs/toolsets.md for the choices).
"""
from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from schemas.docs import load_schema, schema_errors
from schemas.toolset import DependencyEdge, Query, Tool, ToolSet

log = logging.getLogger(__name__)

BENCHMARKS = ("apibank", "toolbench_stable", "ultratool", "tmdb")
GROUPINGS = ("native", "dataset")

_SCHEMA = load_schema("api_doc")
MAX_NAME = _SCHEMA["properties"]["name"]["maxLength"]
MAX_DESCRIPTION = _SCHEMA["properties"]["description"]["maxLength"]
MAX_PARAMS = _SCHEMA["properties"]["input_params"]["maxItems"]
MAX_PARAM_NAME = _SCHEMA["$defs"]["param"]["properties"]["name"]["maxLength"]
MAX_PARAM_TYPE = _SCHEMA["$defs"]["param"]["properties"]["type"]["maxLength"]
MAX_PARAM_DESCRIPTION = _SCHEMA["$defs"]["param"]["properties"]["description"]["maxLength"]


class ToolSetFormatError(ValueError):
    """A tool set file breaks the documented format; the message names file and line."""


@dataclass
class ImportReport:
    """What an importer changed or left out, one readable line per event."""

    dataset: str
    fixes: list[str] = field(default_factory=list)  # truncations and fallbacks, the tool is kept
    rejected: list[str] = field(default_factory=list)  # edges / gold tools that could not be used

    def summary(self) -> str:
        return f"{self.dataset}: {len(self.fixes)} doc fixes, {len(self.rejected)} rejected records"


# ---------------------------------------------------------------------------------------------
# Doc building helpers (deterministic truncation, every change recorded)


def _clip(text: str, limit: int, what: str, report: ImportReport) -> str:
    if len(text) <= limit:
        return text
    report.fixes.append(f"{what}: truncated from {len(text)} to {limit} characters")
    return text[: limit - 3].rstrip() + "..."


def _param(name: Any, ptype: Any, description: Any, what: str, report: ImportReport) -> dict | None:
    name = str(name or "").strip()
    if not name:
        report.fixes.append(f"{what}: parameter without a name dropped")
        return None
    ptype = str(ptype or "").strip()
    if not ptype:
        report.fixes.append(f"{what}.{name}: empty type replaced by 'string'")
        ptype = "string"
    return {
        "name": _clip(name, MAX_PARAM_NAME, f"{what}.{name} name", report),
        "type": _clip(ptype, MAX_PARAM_TYPE, f"{what}.{name} type", report),
        "description": _clip(str(description or "").strip(), MAX_PARAM_DESCRIPTION, f"{what}.{name} description", report),
    }


def _params(items: Iterable[tuple[Any, Any, Any]], what: str, report: ImportReport) -> list[dict]:
    params = [p for p in (_param(n, t, d, what, report) for n, t, d in items) if p is not None]
    if len(params) > MAX_PARAMS:
        dropped = [p["name"] for p in params[MAX_PARAMS:]]
        report.fixes.append(f"{what}: kept the first {MAX_PARAMS} of {len(params)} parameters, dropped {dropped}")
        params = params[:MAX_PARAMS]
    return params


def make_doc(
    name: str,
    description: str | None,
    input_params: Iterable[tuple[Any, Any, Any]],
    output_params: Iterable[tuple[Any, Any, Any]],
    report: ImportReport,
) -> dict[str, Any]:
    """A schema-valid API doc; overlong fields are cut, an empty description falls back to the name."""
    description = (description or "").strip()
    if not description:
        report.fixes.append(f"{name}: empty description replaced by the tool name")
        description = name
    doc = {
        "name": _clip(name, MAX_NAME, f"{name} name", report),
        "description": _clip(description, MAX_DESCRIPTION, f"{name} description", report),
        "input_params": _params(input_params, f"{name} input", report),
        "output_params": _params(output_params, f"{name} output", report),
    }
    errors = schema_errors(doc)
    if errors:  # the clipping above should make this unreachable; fail loudly if it is not
        raise ValueError(f"{name}: converted doc is still invalid: {errors}")
    return doc


def _type_of_example(value: Any) -> str:
    """ToolBench template_response values are type names ("str") or nested examples."""
    if isinstance(value, str):
        return value or "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# Per-benchmark tool converters: raw record -> (tool_id, group, doc)


def _apibank_tool(rec: dict, report: ImportReport) -> tuple[str, str, dict]:
    def items(params: dict | None):
        return [(n, (p or {}).get("type"), (p or {}).get("description")) for n, p in (params or {}).items()]

    doc = make_doc(rec["name"], rec.get("description"), items(rec.get("input_parameters")),
                   items(rec.get("output_parameters")), report)
    return rec["name"], rec["group"], doc


def _toolbench_tool(rec: dict, report: ImportReport) -> tuple[str, str, dict]:
    inputs = [(p.get("name"), p.get("type"), p.get("description")) for p in rec.get("required_parameters") or []]
    inputs += [
        (p.get("name"), p.get("type"), ("(optional) " + (p.get("description") or "")).strip())
        for p in rec.get("optional_parameters") or []
    ]
    template = rec.get("template_response")
    outputs = [(k, _type_of_example(v), "") for k, v in template.items()] if isinstance(template, dict) else []
    doc = make_doc(rec["name"], rec.get("api_description"), inputs, outputs, report)
    return rec["name"], rec["category_name"], doc


def _name_description_tool(rec: dict, report: ImportReport) -> tuple[str, str, dict]:
    return rec["name"], "", make_doc(rec["name"], rec.get("description"), [], [], report)


def _ultratool_groups(records: list[dict], edges: list[tuple[str, str, int]]) -> dict[str, str]:
    """One domain per tool, chosen to keep dependency partners together.

    UltraTool lists 1..14 domains per tool, but a Tool has one group and pairs are only built
    inside a group. Start from the first listed domain, then (3 passes, deterministic order)
    move each tool to the listed domain holding most of its dependency partners; ties keep the
    earlier-listed domain. On the shipped data this keeps 454 of 598 edges inside a group
    (first domain only: 334).
    """
    domains = {r["name"]: list(r.get("domain") or ["Other"]) for r in records}
    partners: dict[str, list[str]] = defaultdict(list)
    for producer, consumer, _ in edges:
        if producer in domains and consumer in domains and producer != consumer:
            partners[producer].append(consumer)
            partners[consumer].append(producer)
    group = {name: ds[0] for name, ds in domains.items()}
    for _ in range(3):
        for name, ds in domains.items():
            score = {d: sum(group[p] == d for p in partners[name]) for d in ds}
            group[name] = max(ds, key=lambda d: (score[d], -ds.index(d)))
    return group


# ---------------------------------------------------------------------------------------------
# Edges and queries


def resolve_edges(
    raw: list[tuple[str, str, int]], group_of: dict[str, str], report: ImportReport
) -> list[DependencyEdge]:
    """producer -> consumer records to DependencyEdge(dependent=consumer, prerequisite=producer).

    Rejected with a reason: unknown tools, self loops, edges across groups (pairs are built per
    group), and opposite-direction pairs with equal evidence counts. When both directions occur
    (UltraTool links follow call order), the direction seen more often wins, because the
    3-class label of one ordered pair can hold only one direction.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for producer, consumer, count in raw:
        missing = [t for t in (producer, consumer) if t not in group_of]
        if missing:
            report.rejected.append(f"edge {producer}->{consumer}: unknown tool(s) {missing}")
        elif producer == consumer:
            report.rejected.append(f"edge {producer}->{consumer}: self loop")
        elif group_of[producer] != group_of[consumer]:
            report.rejected.append(
                f"edge {producer}->{consumer}: crosses groups {group_of[producer]!r}/{group_of[consumer]!r}"
            )
        else:
            counts[(producer, consumer)] += max(int(count), 1)
    edges = []
    for (producer, consumer), n in sorted(counts.items()):
        reverse = counts.get((consumer, producer), 0)
        if reverse > n:
            report.rejected.append(f"edge {producer}->{consumer} (count {n}): reverse direction seen {reverse} times")
            continue
        if reverse == n:
            report.rejected.append(f"edge {producer}->{consumer} (count {n}): reverse seen equally often, direction unknown")
            continue
        edges.append(DependencyEdge(group=group_of[consumer], dependent=consumer, prerequisite=producer, source="manual"))
    return edges


def _queries(records: list[dict], known: set[str], report: ImportReport) -> list[Query]:
    queries = []
    for rec in records:
        gold = [str(t) for t in rec.get("gold_tools") or []]
        unknown = [t for t in gold if t not in known]
        if unknown:
            report.rejected.append(f"query {rec['qid']}: unknown gold tools {unknown} removed")
        kept = tuple(t for t in gold if t in known)
        if not kept:
            report.rejected.append(f"query {rec['qid']}: no known gold tool, query dropped")
            continue
        queries.append(Query(query_id=str(rec["qid"]), text=str(rec["query"]).strip(), gold_tools=kept))
    return queries


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ToolSetFormatError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
    return rows


_CONVERTERS: dict[str, Callable[[dict, ImportReport], tuple[str, str, dict]]] = {
    "apibank": _apibank_tool,
    "toolbench_stable": _toolbench_tool,
    "ultratool": _name_description_tool,
    "tmdb": _name_description_tool,
}
_EDGE_FILES = {
    "apibank": "dependency_edges.jsonl",
    "ultratool": "dependency_edges_from_gold_links.jsonl",
    "tmdb": "dependency_edges_from_gold_links.jsonl",
}


def load_benchmark_with_report(
    name: str, data_root: Path, grouping: str = "native"
) -> tuple[ToolSet, ImportReport]:
    """Import ``data_root/<name>/`` (data_root is ``../shared/data/benchmarks``).

    grouping="native": ToolBench category, API-Bank group field, UltraTool domain (see
    ``_ultratool_groups``), TMDB one group. grouping="dataset": every tool in one group named
    after the dataset (keeps every edge; useful for a whole-dataset graph).
    """
    if name not in _CONVERTERS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    if grouping not in GROUPINGS:
        raise ValueError(f"unknown grouping {grouping!r}; known: {', '.join(GROUPINGS)}")
    folder = Path(data_root) / name
    if not (folder / "tools.jsonl").exists():
        raise FileNotFoundError(f"{folder / 'tools.jsonl'} not found (expected the shared benchmark layout)")
    report = ImportReport(dataset=name)
    records = _read_jsonl(folder / "tools.jsonl")

    raw_edges: list[tuple[str, str, int]] = []
    if name in _EDGE_FILES:
        raw_edges = [(str(e["producer"]), str(e["consumer"]), int(e.get("count", 1)))
                     for e in _read_jsonl(folder / _EDGE_FILES[name])]

    tools: list[Tool] = []
    seen: set[str] = set()
    for rec in records:
        tool_id, group, doc = _CONVERTERS[name](rec, report)
        if tool_id in seen:
            report.rejected.append(f"tool {tool_id}: duplicate name, later record dropped")
            continue
        seen.add(tool_id)
        tools.append(Tool(tool_id=tool_id, group=group, doc=doc))

    if grouping == "dataset":
        tools = [Tool(t.tool_id, name, t.doc) for t in tools]
    elif name == "ultratool":
        groups = _ultratool_groups(records, raw_edges)
        tools = [Tool(t.tool_id, groups[t.tool_id], t.doc) for t in tools]
    elif name == "tmdb":
        tools = [Tool(t.tool_id, "tmdb", t.doc) for t in tools]

    group_of = {t.tool_id: t.group for t in tools}
    edges = resolve_edges(raw_edges, group_of, report)
    queries = _queries(_read_jsonl(folder / "queries.jsonl"), set(group_of), report) \
        if (folder / "queries.jsonl").exists() else []
    return ToolSet(name=name, tools=tools, edges=edges, queries=queries), report


def load_benchmark(name: str, data_root: Path, grouping: str = "native") -> ToolSet:
    """Like ``load_benchmark_with_report``; the report's rejections go to the log."""
    toolset, report = load_benchmark_with_report(name, data_root, grouping)
    if report.rejected:  # one line, not hundreds: the full list is in the report
        log.warning("%s; first rejections: %s", report.summary(), "; ".join(report.rejected[:3]))
    else:
        log.info(report.summary())
    return toolset


# ---------------------------------------------------------------------------------------------
# The documented user format (schemas/toolset.py, docs/toolsets.md)


def _require(row: Any, keys: dict[str, type], where: str) -> None:
    if not isinstance(row, dict):
        raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key, kind in keys.items():
        if key not in row:
            raise ToolSetFormatError(f"{where}: missing field {key!r}")
        if not isinstance(row[key], kind):
            raise ToolSetFormatError(f"{where}: field {key!r} must be {kind.__name__}")
        if kind is str and not row[key].strip():
            raise ToolSetFormatError(f"{where}: field {key!r} is empty")


def read_toolset_dir(path: Path, name: str | None = None) -> ToolSet:
    """Read tools.jsonl, edges.jsonl (optional) and queries.jsonl (optional) from ``path``.

    Bad lines raise ``ToolSetFormatError`` naming file and line: invalid JSON, missing fields,
    docs that fail the API doc schema, duplicate tool ids, edges naming unknown tools or
    crossing groups, and gold tools that are not in the set.
    """
    path = Path(path)
    tools_file = path / "tools.jsonl"
    if not tools_file.exists():
        raise ToolSetFormatError(f"{tools_file}: missing (a tool set folder needs tools.jsonl)")
    tools: list[Tool] = []
    group_of: dict[str, str] = {}
    for lineno, row in _numbered_rows(tools_file):
        where = f"{tools_file}:{lineno}"
        _require(row, {"tool_id": str, "group": str, "doc": dict}, where)
        errors = schema_errors(row["doc"])
        if errors:
            raise ToolSetFormatError(f"{where}: doc of {row['tool_id']!r} fails the API doc schema: {errors}")
        if row["tool_id"] in group_of:
            raise ToolSetFormatError(f"{where}: duplicate tool_id {row['tool_id']!r}")
        group_of[row["tool_id"]] = row["group"]
        tools.append(Tool(tool_id=row["tool_id"], group=row["group"], doc=row["doc"]))

    edges: list[DependencyEdge] = []
    edges_file = path / "edges.jsonl"
    if edges_file.exists():
        for lineno, row in _numbered_rows(edges_file):
            where = f"{edges_file}:{lineno}"
            _require(row, {"group": str, "dependent": str, "prerequisite": str}, where)
            for key in ("dependent", "prerequisite"):
                if row[key] not in group_of:
                    raise ToolSetFormatError(f"{where}: {key} {row[key]!r} is not a tool in tools.jsonl")
                if group_of[row[key]] != row["group"]:
                    raise ToolSetFormatError(
                        f"{where}: {key} {row[key]!r} is in group {group_of[row[key]]!r}, not {row['group']!r}"
                    )
            if row["dependent"] == row["prerequisite"]:
                raise ToolSetFormatError(f"{where}: a tool cannot depend on itself ({row['dependent']!r})")
            edges.append(DependencyEdge(row["group"], row["dependent"], row["prerequisite"], str(row.get("source", "manual"))))

    queries: list[Query] = []
    queries_file = path / "queries.jsonl"
    if queries_file.exists():
        for lineno, row in _numbered_rows(queries_file):
            where = f"{queries_file}:{lineno}"
            _require(row, {"query_id": str, "text": str, "gold_tools": list}, where)
            unknown = [t for t in row["gold_tools"] if t not in group_of]
            if unknown:
                raise ToolSetFormatError(f"{where}: gold tools not in tools.jsonl: {unknown}")
            queries.append(Query(row["query_id"], row["text"], tuple(row["gold_tools"])))
    return ToolSet(name=name or path.name, tools=tools, edges=edges, queries=queries)


def _numbered_rows(file: Path) -> Iterable[tuple[int, Any]]:
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ToolSetFormatError(f"{file}:{lineno}: not valid JSON ({exc.msg})") from exc


def write_toolset_dir(toolset: ToolSet, path: Path) -> Path:
    """Write ``toolset`` in the documented format; ``read_toolset_dir`` reads it back equal."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    def dump(file: str, rows: Iterable[dict]) -> None:
        with (path / file).open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")

    dump("tools.jsonl", ({"tool_id": t.tool_id, "group": t.group, "doc": t.doc} for t in toolset.tools))
    dump("edges.jsonl", ({"group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
                          "source": e.source} for e in toolset.edges))
    if toolset.queries:
        dump("queries.jsonl", ({"query_id": q.query_id, "text": q.text, "gold_tools": list(q.gold_tools)}
                               for q in toolset.queries))
    return path
