"""Tools for a request, read from the warehouse: the encoder's top k, and what each of them needs first.

    python -m warehouse.retrieve --dataset my_agent "merge my pull request once its checks pass"
    python -m warehouse.retrieve --warehouse W --dataset apibank --k 5 --embedding tgr_fused --json "..."

The request is encoded by the encoder the dataset was built with (``datasets.encoder``) and ranked by the
``tool_top_k`` macro over ``--embedding`` (``base``, the default: the encoder's own embeddings; ``tgr_<source>``:
TGR's, which eval-retrieval measures against it). Each hit's prerequisites come from the ``--graph`` edges through
``prerequisites_of`` (up to ``--depth`` calls back): the tools a call of the hit needs first, which a semantic search
alone leaves out. Those outside the top k are listed after the hits, each with the hits that need it, and where
the tools' docs state a need (a ``stated`` edge), the sentence that says so. Read-only.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import duckdb

from warehouse.shell import DEFAULT_WAREHOUSE

GRAPH_PREFERENCE = ("fused", "discriminator", "schema", "manual")  # --graph auto: the first the dataset has


@dataclass
class Prerequisite:
    tool_id: str
    depth: int  # calls back from the hit: 1 = the hit's own prerequisite
    kind: str | None  # of the edge it feeds: data, precondition, or None (the source does not say)
    then: list[str] = field(default_factory=list)  # the tools called after it and before the hit, in order
    said: str | None = None  # where the docs state this need (a 'stated' edge): the sentence that says so


@dataclass
class Hit:
    rank: int
    tool_id: str
    score: float
    prerequisites: list[Prerequisite] = field(default_factory=list)


@dataclass
class Retrieved:
    dataset: str
    query: str
    encoder: str
    embedding: str
    graph: str | None
    hits: list[Hit]
    also_needed: dict[str, list[str]]  # a prerequisite outside the top k -> the hits that need it, best hit first


def chosen_graph(con: duckdb.DuckDBPyConnection, dataset: str, graph: str) -> str | None:
    """``graph`` itself, or for ``auto`` the first of GRAPH_PREFERENCE the dataset has edges of (None: no edges)."""
    if graph != "auto":
        return graph
    have = {s for (s,) in con.execute("SELECT DISTINCT source FROM edges WHERE dataset = ?", [dataset]).fetchall()}
    return next((s for s in GRAPH_PREFERENCE if s in have), None)


def retrieve(con: duckdb.DuckDBPyConnection, dataset: str, query: str, k: int = 5, embedding: str = "base",
             graph: str = "auto", depth: int = 2, encode=None) -> Retrieved:
    """The top ``k`` tools of ``dataset`` for ``query`` and their prerequisites (module doc). ``encode``: texts ->
    unit rows, by default the dataset's own encoder (loaded here)."""
    if not query.strip():
        raise ValueError("the request is empty")
    if depth < 1:
        raise ValueError(f"--depth {depth}: at least 1 (the hits' own prerequisites)")
    row = con.execute("SELECT encoder FROM datasets WHERE dataset = ?", [dataset]).fetchone()
    if row is None:
        have = [d for (d,) in con.execute("SELECT dataset FROM datasets ORDER BY dataset").fetchall()]
        raise ValueError(f"--dataset {dataset!r}: not in this warehouse (it has: {', '.join(have) or 'none'})")
    (encoder,) = row
    if encode is None:
        from models.sentence_encoder import EncoderConfig, SentenceEncoder

        encode = SentenceEncoder(EncoderConfig(model_name_or_path=encoder, engine="auto")).encode  # as build-graph
    vector = [float(x) for x in encode([query])[0]]
    ranked = con.execute("SELECT tool_id, score, rank FROM tool_top_k(?, ?, ?, ?)",
                         [dataset, embedding, vector, k]).fetchall()
    hits = [Hit(int(r), t, float(s)) for t, s, r in ranked]
    source = chosen_graph(con, dataset, graph)
    also: dict[str, list[str]] = {}
    if source is not None:
        in_top = {h.tool_id for h in hits}
        for hit in hits:
            # call_order runs from the prerequisite to the hit: its second tool is the one the edge feeds
            rows = con.execute(
                "SELECT p.prerequisite, p.depth, e.kind, p.call_order, s.evidence FROM prerequisites_of(?, ?, ?) p "
                "LEFT JOIN edges e ON e.dataset = ? AND e.source = ? AND e.prerequisite = p.prerequisite "
                "AND e.dependent = p.call_order[2] "
                "LEFT JOIN edges s ON s.dataset = ? AND s.source = 'stated' AND s.prerequisite = p.prerequisite "
                "AND s.dependent = p.call_order[2] WHERE p.depth <= ? ORDER BY p.depth, p.prerequisite",
                [dataset, source, hit.tool_id, dataset, source, dataset, depth]).fetchall()
            hit.prerequisites = [Prerequisite(t, int(d), kind, list(order[1:-1]), said)
                                 for t, d, kind, order, said in rows]
            for p in hit.prerequisites:
                if p.tool_id not in in_top:
                    also.setdefault(p.tool_id, []).append(hit.tool_id)
    return Retrieved(dataset, query, encoder, embedding, source, hits, also)


def as_text(r: Retrieved) -> str:
    graph = f"prerequisites from the {r.graph} edges" if r.graph else "no edges in this dataset: no prerequisites"
    lines = [f"{r.dataset}: {r.query!r} (encoder {r.encoder}, embedding {r.embedding}; {graph})"]
    width = max([len(h.tool_id) for h in r.hits] + [4])
    for h in r.hits:
        needs = ", ".join(p.tool_id + (f" (then {', '.join(p.then)})" if p.then else "") for p in h.prerequisites)
        lines.append(f"{h.rank:>3}  {h.tool_id:<{width}}  {h.score:.3f}" + (f"  needs first: {needs}" if needs else ""))
    if r.also_needed:
        lines.append(f"not in the top {len(r.hits)}, but needed first:")
        lines += [f"     {t:<{width}}  by {', '.join(by)}" for t, by in r.also_needed.items()]
    said = {(h.tool_id, p.tool_id): p.said for h in r.hits for p in h.prerequisites if p.said and p.depth == 1}
    if said:
        lines.append("as the docs say:")
        lines += [f"     {hit} needs {tool}: {shorter(text)!r}" for (hit, tool), text in said.items()]
    return "\n".join(lines)


def shorter(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warehouse.retrieve", description=__doc__.splitlines()[0])
    p.add_argument("query", help="the request, in words")
    p.add_argument("--dataset", required=True, help="a dataset the warehouse holds (a tool set build-graph built)")
    p.add_argument("--warehouse", default=DEFAULT_WAREHOUSE, help="the DuckDB file build-graph wrote")
    p.add_argument("--k", type=int, default=5, help="how many tools to rank")
    p.add_argument("--embedding", default="base", help="base (the encoder's) or tgr_<source> (TGR's, e.g. tgr_fused)")
    p.add_argument("--graph", default="auto", help="the edge source prerequisites come from; auto: the first of "
                   + ", ".join(GRAPH_PREFERENCE) + " the dataset has")
    p.add_argument("--depth", type=int, default=2, help="how many calls back prerequisites are followed")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    try:
        con = duckdb.connect(args.warehouse, read_only=True)
    except duckdb.Error as err:
        p.error(f"--warehouse {args.warehouse}: {err}")
    try:
        result = retrieve(con, args.dataset, args.query, args.k, args.embedding, args.graph, args.depth)
    except (ValueError, duckdb.Error) as err:
        print(f"python -m warehouse.retrieve: {err}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result), indent=2) if args.json else as_text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
