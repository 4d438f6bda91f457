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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from schemas.docs import schema_errors
from schemas.toolset import DependencyEdge, ParameterEdge, Query, Tool, ToolSet, dependency_kind_problem
from tasks.toolsets.doc_import import (ImportReport, ToolSetFormatError, make_doc,  # importers read them here too
                                       numbered_rows, optional)

log = logging.getLogger(__name__)

BENCHMARKS = ("apibank", "toolbench_stable", "ultratool", "tmdb", "nestools")
PARAM_EDGES_FILE = "param_edges.jsonl"  # parameter-level gold edges, in either folder format
DEFAULT_DATA_ROOT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "benchmarks"
GROUPINGS = ("native", "dataset")


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
# The shared benchmark layout, read by one generic importer
#
#   tools.jsonl       {"name", "description", "input_parameters"?, "output_parameters"?,
#                      "group" | "category" | "category_name" | "domain"?}   (parameters: a dict
#                      name -> {"type", "description"} or name -> type, or a list of
#                      {"name", "type"?, "description"?} objects or of names)
#   *edges*.jsonl     {"producer", "consumer", "count"?, "kind"?}   consumer depends on producer (optional;
#                     not param_edges.jsonl, which both folder formats read: read_parameter_edges)
#   queries.jsonl     {"qid" | "query_id", "query" | "text", "gold_tools": [name, ...]} (optional)
#
# The four shipped benchmarks are configurations of it (``LAYOUTS``).

GROUP_FIELDS = ("group", "category", "category_name", "domain")


def _where(file: Path, lineno: int) -> str:
    return f"{file}:{lineno}"


def _as_id(value: Any, field_name: str, where: str) -> str:
    """A tool / query id: a non-empty string or an integer (converted to str)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ToolSetFormatError(f"{where}: field {field_name!r} must be a string or an integer, "
                                 f"got {type(value).__name__}")
    text = str(value)  # not stripped: ids are matched exactly (ToolBench has names with a leading space)
    if not text.strip():
        raise ToolSetFormatError(f"{where}: field {field_name!r} is empty")
    return text


def _first_field(rec: dict, names: Sequence[str], where: str, required: bool = True) -> Any:
    for n in names:
        if n in rec and rec[n] is not None:
            return rec[n]
    if required:
        raise ToolSetFormatError(f"{where}: missing field {' or '.join(repr(n) for n in names)}")
    return None


def _param_items(value: Any, field_name: str, where: str) -> list[tuple[Any, Any, Any]]:
    if value is None:
        return []
    if isinstance(value, dict):
        items = []
        for name, spec in value.items():
            if isinstance(spec, dict):
                items.append((name, spec.get("type"), spec.get("description")))
            elif isinstance(spec, str) or spec is None:
                items.append((name, spec, None))
            else:
                raise ToolSetFormatError(f"{where}: {field_name}.{name} must be an object or a type name, "
                                         f"got {type(spec).__name__}")
        return items
    if isinstance(value, list):
        items = []
        for n, spec in enumerate(value):
            if isinstance(spec, str):
                items.append((spec, None, None))
            elif isinstance(spec, dict) and "name" in spec:
                items.append((spec["name"], spec.get("type"), spec.get("description")))
            else:
                raise ToolSetFormatError(f"{where}: {field_name}[{n}] must be a parameter name or an object "
                                         "with a 'name'")
        return items
    raise ToolSetFormatError(f"{where}: field {field_name!r} must be an object or a list, got {type(value).__name__}")


def _groups_field(rec: dict, where: str) -> list[str]:
    value = _first_field(rec, GROUP_FIELDS, where, required=False)
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    raise ToolSetFormatError(f"{where}: group field must be a string or a list of strings, got {value!r}")


def generic_tool(rec: Any, where: str, report: ImportReport) -> tuple[str, list[str], dict]:
    """(tool_id, candidate groups, doc) of one tools.jsonl row of the shared layout."""
    if not isinstance(rec, dict):
        raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    tool_id = _as_id(_first_field(rec, ("name",), where), "name", where)
    description = _first_field(rec, ("description", "api_description"), where, required=False)
    if description is not None and not isinstance(description, str):
        raise ToolSetFormatError(f"{where}: field 'description' must be a string, got {type(description).__name__}")
    doc = make_doc(tool_id, description, _param_items(rec.get("input_parameters"), "input_parameters", where),
                   _param_items(rec.get("output_parameters"), "output_parameters", where), report)
    return tool_id, _groups_field(rec, where), doc


def toolbench_tool(rec: Any, where: str, report: ImportReport) -> tuple[str, list[str], dict]:
    """ToolBench: required + optional parameters, outputs = top-level keys of template_response."""
    if not isinstance(rec, dict):
        raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    tool_id = _as_id(_first_field(rec, ("name",), where), "name", where)
    inputs = [(p.get("name"), p.get("type"), p.get("description")) for p in rec.get("required_parameters") or []]
    inputs += [
        (p.get("name"), p.get("type"), optional(p.get("description") or ""))
        for p in rec.get("optional_parameters") or []
    ]
    template = rec.get("template_response")
    outputs = [(k, _type_of_example(v), "") for k, v in template.items()] if isinstance(template, dict) else []
    doc = make_doc(tool_id, rec.get("api_description"), inputs, outputs, report)
    return tool_id, _groups_field(rec, where), doc


@dataclass(frozen=True)
class BenchmarkLayout:
    """How one folder in the shared layout is read; the defaults are the generic importer."""

    tool_reader: Callable[[Any, str, ImportReport], tuple[str, list[str], dict]] = generic_tool
    edge_file: str | None = None  # None: the one ``*edges*.jsonl`` file of the folder, if any
    default_group: str | None = None  # group of tools without one; None: the dataset name
    # the dependency kind of every edge of the edge file whose line names none (None: not known)
    edge_kind: str | None = None


LAYOUTS: dict[str, BenchmarkLayout] = {
    # every API-Bank pair is "value of producer output reused as consumer input in gold dialogue": data flow
    "apibank": BenchmarkLayout(edge_file="dependency_edges.jsonl", edge_kind="data"),
    "toolbench_stable": BenchmarkLayout(tool_reader=toolbench_tool),
    # UltraTool/TMDB links follow the gold call order: data flow and preconditions mixed, so no kind
    "ultratool": BenchmarkLayout(edge_file="dependency_edges_from_gold_links.jsonl", default_group="Other"),
    "tmdb": BenchmarkLayout(edge_file="dependency_edges_from_gold_links.jsonl"),
}


def choose_groups(candidates: dict[str, list[str]], edges: list[tuple[str, str, int]]) -> dict[str, str]:
    """One group per tool when tools list several (UltraTool: 1..14 domains), keeping dependency
    partners together.

    A Tool has one group and pairs are only built inside a group. Start from the first listed
    group, then (3 passes, deterministic order) move each tool to the listed group holding most of
    its dependency partners; ties keep the earlier-listed group. On UltraTool this keeps 454 of
    598 edges inside a group (first domain only: 334).
    """
    partners: dict[str, list[str]] = defaultdict(list)
    for producer, consumer, _ in edges:
        if producer in candidates and consumer in candidates and producer != consumer:
            partners[producer].append(consumer)
            partners[consumer].append(producer)
    group = {name: gs[0] for name, gs in candidates.items()}
    for _ in range(3):
        for name, gs in candidates.items():
            score = {g: sum(group[p] == g for p in partners[name]) for g in gs}
            group[name] = max(gs, key=lambda g: (score[g], -gs.index(g)))
    return group


# ---------------------------------------------------------------------------------------------
# Edges and queries


def resolve_edges(
    raw: list[tuple[str, str, int]], group_of: dict[str, str], report: ImportReport,
    kinds: dict[tuple[str, str], str] | None = None,
) -> list[DependencyEdge]:
    """producer -> consumer records to DependencyEdge(dependent=consumer, prerequisite=producer), with the
    dependency kind ``kinds`` gives the (producer, consumer) pair (absent: None, not known).

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
        edges.append(DependencyEdge(group=group_of[consumer], dependent=consumer, prerequisite=producer, source="manual",
                                    kind=(kinds or {}).get((producer, consumer))))
    return edges


def _edge_kind(row: dict, where: str) -> str | None:
    """The optional ``kind`` of an edge line: "data", "precondition", or absent / null (not known)."""
    kind = row.get("kind")
    problem = dependency_kind_problem(kind)
    if problem:
        raise ToolSetFormatError(f"{where}: field 'kind': {problem}")
    return kind


def with_parameter_kinds(edges: Sequence[DependencyEdge], parameter_edges: Sequence[ParameterEdge],
                         report: ImportReport) -> list[DependencyEdge]:
    """Edges of unknown kind whose two tools have a parameter-level gold edge become "data" (the producer's
    output feeds an argument of the consumer). A kind the edge line names stays; one that says
    "precondition" although a parameter edge says data flows is kept and noted in ``report.fixes``."""
    fed = {(e.dependent, e.prerequisite) for e in parameter_edges}
    out = []
    for e in edges:
        if (e.dependent, e.prerequisite) in fed:
            if e.kind is None:
                e = replace(e, kind="data")
            elif e.kind != "data":
                report.fixes.append(f"edge {e.prerequisite}->{e.dependent}: kind {e.kind!r} as its line says, "
                                    f"though {PARAM_EDGES_FILE} has a parameter edge between them")
        out.append(e)
    return out


def _raw_edges(file: Path, default_kind: str | None = None) -> tuple[list[tuple[str, str, int]],
                                                                     dict[tuple[str, str], str]]:
    """(producer, consumer, count) per line, and (producer, consumer) -> dependency kind: the line's
    ``kind``, else ``default_kind`` (the layout's); lines of one pair that name different kinds stop the read."""
    raw, kinds, kind_line = [], {}, {}
    for lineno, rec in numbered_rows(file):
        where = _where(file, lineno)
        if not isinstance(rec, dict):
            raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        producer = _as_id(_first_field(rec, ("producer",), where), "producer", where)
        consumer = _as_id(_first_field(rec, ("consumer",), where), "consumer", where)
        count = rec.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ToolSetFormatError(f"{where}: field 'count' must be a positive integer, got {count!r}")
        kind = _edge_kind(rec, where)
        if kind is not None and kinds.get((producer, consumer), kind) != kind:
            raise ToolSetFormatError(f"{where}: edge {producer}->{consumer} has kind {kind!r} here, "
                                     f"{kinds[producer, consumer]!r} on line {kind_line[producer, consumer]}; "
                                     "one pair has one kind")
        if kind is not None:
            kinds[(producer, consumer)], kind_line[(producer, consumer)] = kind, lineno
        raw.append((producer, consumer, count))
    if default_kind is not None:
        kinds = {(p, c): kinds.get((p, c), default_kind) for p, c, _ in raw}
    return raw, kinds


def _queries(file: Path, known: set[str], report: ImportReport) -> list[Query]:
    queries, seen = [], {}
    for lineno, rec in numbered_rows(file):
        where = _where(file, lineno)
        if not isinstance(rec, dict):
            raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        qid = _as_id(_first_field(rec, ("qid", "query_id"), where), "qid", where)
        text = _first_field(rec, ("query", "text"), where)
        if not isinstance(text, str) or not text.strip():
            raise ToolSetFormatError(f"{where}: query text must be a non-empty string")
        gold_raw = _first_field(rec, ("gold_tools",), where)
        if not isinstance(gold_raw, list):
            raise ToolSetFormatError(f"{where}: field 'gold_tools' must be a list, got {type(gold_raw).__name__}")
        if qid in seen:
            raise ToolSetFormatError(f"{where}: duplicate query id {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        gold = [_as_id(t, "gold_tools", where) for t in gold_raw]
        unknown = [t for t in gold if t not in known]
        if unknown:
            report.rejected.append(f"query {qid}: unknown gold tools {unknown} removed")
        kept = tuple(t for t in gold if t in known)
        if not kept:
            report.rejected.append(f"query {qid}: no known gold tool, query dropped")
            continue
        queries.append(Query(query_id=qid, text=text.strip(), gold_tools=kept))
    return queries


def _edge_file(folder: Path, layout: BenchmarkLayout) -> Path | None:
    if layout.edge_file:
        return folder / layout.edge_file if (folder / layout.edge_file).exists() else None
    found = sorted(p for p in folder.glob("*edges*.jsonl") if p.name != PARAM_EDGES_FILE)
    if len(found) > 1:
        raise ToolSetFormatError(f"{folder}: several edge files {[p.name for p in found]}; keep one "
                                 "(or pass a BenchmarkLayout with edge_file)")
    return found[0] if found else None


def _resolve_folder(path_or_name: str | Path, data_root: Path | None) -> tuple[Path, str, BenchmarkLayout]:
    spec = str(path_or_name)
    if spec in BENCHMARKS and data_root is not None and (Path(data_root) / spec).is_dir():
        return Path(data_root) / spec, spec, LAYOUTS.get(spec, BenchmarkLayout())
    folder = Path(path_or_name)
    if folder.is_dir():
        name = folder.resolve().name
        return folder, name, LAYOUTS.get(name, BenchmarkLayout())
    if spec in BENCHMARKS:
        from tasks.toolsets.availability import missing_benchmark

        raise FileNotFoundError(missing_benchmark(spec, Path(data_root or ".") / spec))
    raise ValueError(f"unknown benchmark {spec!r}: neither a known name ({', '.join(BENCHMARKS)}) nor a folder")


def load_benchmark_with_report(
    path_or_name: str | Path, data_root: Path | None = None, grouping: str = "native",
    layout: BenchmarkLayout | None = None,
) -> tuple[ToolSet, ImportReport]:
    """Import a folder in the shared layout: a benchmark name (read from ``data_root/<name>/``,
    data_root being ``../shared/data/benchmarks``) or a folder path.

    grouping="native": the tools' group field (API-Bank group, ToolBench category, UltraTool
    domain chosen by ``choose_groups`` when several are listed); tools without one share a group
    named after the dataset (TMDB). grouping="dataset": every tool in one group named after the
    dataset (keeps every edge; useful for a whole-dataset graph). Bad rows raise
    ``ToolSetFormatError`` naming file and line; usable-but-odd records go to the report.
    A folder in the project's own format (NesTools) is read by ``read_toolset_dir_with_report``.
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"unknown grouping {grouping!r}; known: {', '.join(GROUPINGS)}")
    folder, name, default_layout = _resolve_folder(path_or_name, data_root)
    if layout is None and is_toolset_dir(folder):
        toolset, report = read_toolset_dir_with_report(folder, name)
        if grouping == "dataset":
            toolset.tools = [replace(t, group=name) for t in toolset.tools]
            toolset.edges = [replace(e, group=name) for e in toolset.edges]
        return toolset, report
    layout = layout or default_layout
    tools_file = folder / "tools.jsonl"
    if not tools_file.exists():
        raise FileNotFoundError(f"{tools_file} not found (expected the shared benchmark layout)")
    report = ImportReport(dataset=name)
    edge_file = _edge_file(folder, layout)
    raw_edges, edge_kinds = _raw_edges(edge_file, layout.edge_kind) if edge_file else ([], {})

    docs: dict[str, dict] = {}
    candidates: dict[str, list[str]] = {}
    for lineno, rec in numbered_rows(tools_file):
        tool_id, groups, doc = layout.tool_reader(rec, _where(tools_file, lineno), report)
        if tool_id in docs:
            report.rejected.append(f"tool {tool_id}: duplicate name, later record dropped")
            continue
        docs[tool_id] = doc
        candidates[tool_id] = groups or [layout.default_group or name]
    if not docs:
        raise ToolSetFormatError(f"{tools_file}: no tools")
    if grouping == "dataset":
        group_of = {t: name for t in docs}
    elif any(len(gs) > 1 for gs in candidates.values()):
        group_of = choose_groups(candidates, raw_edges)
    else:
        group_of = {t: gs[0] for t, gs in candidates.items()}
    tools = [Tool(tool_id=t, group=group_of[t], doc=doc) for t, doc in docs.items()]
    edges = resolve_edges(raw_edges, group_of, report, edge_kinds)
    queries_file = folder / "queries.jsonl"
    queries = _queries(queries_file, set(group_of), report) if queries_file.exists() else []
    param_file = folder / PARAM_EDGES_FILE
    param_edges = read_parameter_edges(param_file, tools, report) if param_file.exists() else ()
    edges = with_parameter_kinds(edges, param_edges, report)
    return ToolSet(name=name, tools=tools, edges=edges, queries=queries, parameter_edges=param_edges), report


def load_benchmark(path_or_name: str | Path, data_root: Path | None = None, grouping: str = "native") -> ToolSet:
    """Like ``load_benchmark_with_report``; the report's rejections go to the log."""
    toolset, report = load_benchmark_with_report(path_or_name, data_root or DEFAULT_DATA_ROOT, grouping)
    if report.rejected:  # one line, not hundreds: the full list is in the report
        log.warning("%s; first rejections: %s", report.summary(), "; ".join(report.rejected[:3]))
    else:
        log.info(report.summary())
    return toolset


def is_toolset_dir(folder: Path) -> bool:
    """Whether ``folder`` is in the project's tool set format (tools.jsonl rows with tool_id and doc)
    rather than the shared benchmark layout (rows with name and description)."""
    tools_file = Path(folder) / "tools.jsonl"
    if not tools_file.exists():
        return False
    for _, row in numbered_rows(tools_file):
        return isinstance(row, dict) and "tool_id" in row and "doc" in row
    return False


def load_toolset_spec(spec: str | Path, data_root: Path | None = None) -> ToolSet:
    """A benchmark name, a folder in the project format (``read_toolset_dir``), a folder in the
    shared benchmark layout (``load_benchmark``), or a file of an agent's tool definitions (OpenAI,
    Anthropic, Gemini or MCP: ``tasks.toolsets.tool_specs``)."""
    from tasks.toolsets.availability import TOOL_SPEC_SUFFIXES, is_tool_spec_file
    from tasks.toolsets.tool_specs import read_tool_specs

    if str(spec) in BENCHMARKS and (Path(data_root or DEFAULT_DATA_ROOT) / str(spec)).is_dir():
        return load_benchmark(str(spec), Path(data_root or DEFAULT_DATA_ROOT))
    folder = Path(spec)
    if folder.is_dir():
        return read_toolset_dir(folder) if is_toolset_dir(folder) else load_benchmark(folder)
    if is_tool_spec_file(folder):
        toolset, report = read_tool_specs(folder)
        log.info(f"{report.summary()}" + (f"; first fixes: {'; '.join(report.fixes[:3])}" if report.fixes else ""))
        return toolset
    raise ValueError(f"{spec!r} is neither a benchmark ({', '.join(BENCHMARKS)}) under "
                     f"{data_root or DEFAULT_DATA_ROOT}, a tool set folder nor a file of tool definitions "
                     f"({', '.join(TOOL_SPEC_SUFFIXES)})")


# ---------------------------------------------------------------------------------------------
# The documented user format (schemas/toolset.py, docs/toolsets.md)


class _Id:
    """Marker for ``_require``: a tool / query id, a string or an integer (converted to str)."""


def _require(row: Any, keys: dict[str, type], where: str) -> dict:
    """Check ``row`` has ``keys`` of the given kinds; returns the row with ids as strings."""
    if not isinstance(row, dict):
        raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    out = dict(row)
    for key, kind in keys.items():
        if key not in row:
            raise ToolSetFormatError(f"{where}: missing field {key!r}")
        if kind is _Id:
            out[key] = _as_id(row[key], key, where)
            continue
        if not isinstance(row[key], kind):
            raise ToolSetFormatError(f"{where}: field {key!r} must be {kind.__name__}")
        if kind is str and not row[key].strip():
            raise ToolSetFormatError(f"{where}: field {key!r} is empty")
    return out


def read_toolset_dir(path: Path, name: str | None = None) -> ToolSet:
    """Like ``read_toolset_dir_with_report``; rejected param_edges.jsonl lines go to the log."""
    toolset, report = read_toolset_dir_with_report(path, name)
    if report.rejected:
        log.warning("%s; first rejections: %s", report.summary(), "; ".join(report.rejected[:3]))
    return toolset


def read_toolset_dir_with_report(path: Path, name: str | None = None) -> tuple[ToolSet, ImportReport]:
    """Read tools.jsonl, edges.jsonl (optional), queries.jsonl (optional) and param_edges.jsonl
    (optional, ``read_parameter_edges``: its unusable lines go to the report) from ``path``.

    Bad lines raise ``ToolSetFormatError`` naming file and line: invalid JSON, missing fields,
    docs that fail the API doc schema, duplicate tool ids, edges naming unknown tools, crossing
    groups, looping on one tool, repeated, or contradicting an earlier edge (A->B and B->A: one
    ordered pair holds one direction), gold tools that are not in the set, empty gold sets and
    duplicate query ids. Integer ids (tool_id, dependent, prerequisite, query_id, gold tools) are
    read as strings, as the benchmark importer does.
    """
    path = Path(path)
    tools_file = path / "tools.jsonl"
    if not tools_file.exists():
        raise ToolSetFormatError(f"{tools_file}: missing (a tool set folder needs tools.jsonl)")
    tools: list[Tool] = []
    group_of: dict[str, str] = {}
    for lineno, row in numbered_rows(tools_file):
        where = f"{tools_file}:{lineno}"
        row = _require(row, {"tool_id": _Id, "group": str, "doc": dict}, where)
        errors = schema_errors(row["doc"])
        if errors:
            raise ToolSetFormatError(f"{where}: doc of {row['tool_id']!r} fails the API doc schema: {errors}")
        if row["tool_id"] in group_of:
            raise ToolSetFormatError(f"{where}: duplicate tool_id {row['tool_id']!r}")
        group_of[row["tool_id"]] = row["group"]
        nothing = row.get("returns_nothing", False)
        if not isinstance(nothing, bool):
            raise ToolSetFormatError(f"{where}: returns_nothing must be true or false, got {nothing!r}")
        if nothing and row["doc"]["output_params"]:
            raise ToolSetFormatError(f"{where}: {row['tool_id']!r} returns nothing but its doc declares outputs")
        tools.append(Tool(tool_id=row["tool_id"], group=row["group"], doc=row["doc"], returns_nothing=nothing))
    if not tools:
        raise ToolSetFormatError(f"{tools_file}: no tools (a tool set needs at least one line)")

    edges: list[DependencyEdge] = []
    edge_line: dict[tuple[str, str], int] = {}
    edges_file = path / "edges.jsonl"
    if edges_file.exists():
        for lineno, row in numbered_rows(edges_file):
            where = f"{edges_file}:{lineno}"
            row = _require(row, {"group": str, "dependent": _Id, "prerequisite": _Id}, where)
            for key in ("dependent", "prerequisite"):
                if row[key] not in group_of:
                    raise ToolSetFormatError(f"{where}: {key} {row[key]!r} is not a tool in tools.jsonl")
                if group_of[row[key]] != row["group"]:
                    raise ToolSetFormatError(
                        f"{where}: {key} {row[key]!r} is in group {group_of[row[key]]!r}, not {row['group']!r}"
                    )
            dep, pre = row["dependent"], row["prerequisite"]
            if dep == pre:
                raise ToolSetFormatError(f"{where}: a tool cannot depend on itself ({dep!r})")
            if (dep, pre) in edge_line:
                raise ToolSetFormatError(f"{where}: duplicate edge {dep!r} -> {pre!r} (first on line {edge_line[dep, pre]})")
            if (pre, dep) in edge_line:
                raise ToolSetFormatError(
                    f"{where}: mutual edges: {dep!r} depends on {pre!r} here, but line {edge_line[pre, dep]} says "
                    f"{pre!r} depends on {dep!r}; one ordered pair holds one direction (label 0 or 2), keep one"
                )
            edge_line[(dep, pre)] = lineno
            edges.append(DependencyEdge(row["group"], dep, pre, str(row.get("source", "manual")),
                                        _edge_kind(row, where)))

    queries: list[Query] = []
    query_line: dict[str, int] = {}
    queries_file = path / "queries.jsonl"
    if queries_file.exists():
        for lineno, row in numbered_rows(queries_file):
            where = f"{queries_file}:{lineno}"
            row = _require(row, {"query_id": _Id, "text": str, "gold_tools": list}, where)
            if row["query_id"] in query_line:
                raise ToolSetFormatError(
                    f"{where}: duplicate query_id {row['query_id']!r} (first on line {query_line[row['query_id']]})")
            query_line[row["query_id"]] = lineno
            if not row["gold_tools"]:
                raise ToolSetFormatError(f"{where}: empty gold_tools for query {row['query_id']!r}; a query needs "
                                         "at least one gold tool to be evaluated")
            gold = tuple(_as_id(t, "gold_tools", where) for t in row["gold_tools"])
            unknown = [t for t in gold if t not in group_of]
            if unknown:
                raise ToolSetFormatError(f"{where}: gold tools not in tools.jsonl: {unknown}")
            queries.append(Query(row["query_id"], row["text"], gold))
    report = ImportReport(dataset=name or path.name)
    param_file = path / PARAM_EDGES_FILE
    param_edges = read_parameter_edges(param_file, tools, report) if param_file.exists() else ()
    edges = with_parameter_kinds(edges, param_edges, report)
    return ToolSet(name=name or path.name, tools=tools, edges=edges, queries=queries,
                   parameter_edges=param_edges), report


def read_parameter_edges(file: Path, tools: Sequence[Tool], report: ImportReport) -> tuple[ParameterEdge, ...]:
    """param_edges.jsonl: one parameter-level dependency a line, ``{"producer", "consumer",
    "consumer_param", "producer_field"?, "group"?, "source"?}`` (other fields are ignored): the
    producer's output ``producer_field`` (null or absent: not known) feeds the consumer's input
    ``consumer_param``.

    Lines that break the format raise ``ToolSetFormatError`` naming file and line (invalid JSON, not
    an object, a missing, empty or mistyped field), as every reader does. Lines that are well formed
    but unusable are left out and recorded in ``report.rejected`` with file, line and reason: an
    unknown tool, a self loop, tools in different groups (pairs are built per group), a ``group``
    that is not the tools' group, a parameter the consumer does not take, an output the producer
    does not declare, and a repeat of an earlier line (same consumer, parameter, producer, source).
    """
    by_id = {t.tool_id: t for t in tools}
    edges: list[ParameterEdge] = []
    first: dict[tuple[str, str, str, str], int] = {}
    for lineno, row in numbered_rows(file):
        where = f"{file}:{lineno}"
        row = _require(row, {"producer": _Id, "consumer": _Id, "consumer_param": str}, where)
        for key in ("producer_field", "group", "source"):
            value = row.get(key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ToolSetFormatError(f"{where}: field {key!r} must be a non-empty string (or absent)")
        pre, dep, param, output = row["producer"], row["consumer"], row["consumer_param"], row.get("producer_field")
        source = row.get("source") or "manual"
        what = f"{where}: parameter edge {pre}.{output or '?'} -> {dep}({param})"
        missing = [t for t in (pre, dep) if t not in by_id]
        if missing:
            report.rejected.append(f"{what}: unknown tool(s) {missing}")
            continue
        producer, consumer = by_id[pre], by_id[dep]
        if pre == dep:
            reason = "self loop"
        elif producer.group != consumer.group:
            reason = f"crosses groups {producer.group!r}/{consumer.group!r}"
        elif row.get("group") is not None and row["group"] != consumer.group:
            reason = f"group {row['group']!r}, but both tools are in {consumer.group!r}"
        elif param not in {p["name"] for p in consumer.doc.get("input_params") or []}:
            reason = f"{dep!r} has no input parameter {param!r}"
        elif output is not None and output not in {p["name"] for p in producer.doc.get("output_params") or []}:
            reason = f"{pre!r} declares no output {output!r}"
        elif (key := (source, dep, param, pre)) in first:
            reason = f"repeats line {first[key]} (same consumer, parameter, producer and source)"
        else:
            first[key] = lineno
            edges.append(ParameterEdge(dep, pre, param, output, source))
            continue
        report.rejected.append(f"{what}: {reason}")
    return tuple(edges)


def write_toolset_dir(toolset: ToolSet, path: Path) -> Path:
    """Write ``toolset`` in the documented format; ``read_toolset_dir`` reads it back equal."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    def dump(file: str, rows: Iterable[dict]) -> None:
        with (path / file).open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")

    dump("tools.jsonl", ({"tool_id": t.tool_id, "group": t.group, "doc": t.doc}
                         | ({"returns_nothing": True} if t.returns_nothing else {}) for t in toolset.tools))
    dump("edges.jsonl", ({"group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
                          "source": e.source} | ({"kind": e.kind} if e.kind is not None else {})
                         for e in toolset.edges))
    if toolset.queries:
        dump("queries.jsonl", ({"query_id": q.query_id, "text": q.text, "gold_tools": list(q.gold_tools)}
                               for q in toolset.queries))
    if toolset.parameter_edges:
        dump(PARAM_EDGES_FILE, ({"producer": e.prerequisite, "producer_field": e.producer_output,
                                 "consumer": e.dependent, "consumer_param": e.consumer_param, "source": e.source}
                                for e in toolset.parameter_edges))
    return path
