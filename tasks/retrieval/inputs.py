"""What retrieval evaluation reads from a built warehouse, per dataset: its tools (texts, groups, docs),
tool embeddings of every kind, and queries with their embeddings and gold tools (eval-retrieval, gtool)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE

from warehouse.build import connect, rows_of


@dataclass
class EvalInputs:
    dataset: str
    tool_ids: list[str]  # sorted, so index order = SQL tie-break order (tool_id)
    texts: list[str]
    embeddings: dict[str, np.ndarray]  # kind -> (n_tools, dim)
    query_ids: list[str]
    query_texts: list[str]
    query_embeddings: np.ndarray
    golds: list[set[str]]
    groups: list[str] = field(default_factory=list)  # tools.tool_group, tool_id order
    descriptions: list[str] = field(default_factory=list)
    encoder: str = ""  # datasets.encoder
    query_groups: list[str | None] = field(default_factory=list)  # queries.query_group (ToolBench G1_tool, ...)

    def gold_indices(self) -> list[set[int]]:
        """Each query's gold tools as indices into ``tool_ids`` (the rankings' rows)."""
        index = {t: i for i, t in enumerate(self.tool_ids)}
        return [{index[t] for t in g} for g in self.golds]


@task(cache_policy=NO_CACHE)
def load_inputs(warehouse: str, dataset: str) -> EvalInputs:
    con = connect(warehouse)
    try:
        tools = rows_of(con, """SELECT tool_id, embed_text, tool_group, doc_json->>'description' AS description
                               FROM tools WHERE dataset = ? ORDER BY tool_id""", [dataset])
        (encoder,) = con.execute("SELECT encoder FROM datasets WHERE dataset = ?", [dataset]).fetchone() or ("",)
        embeddings = {}
        for (kind,) in con.execute("SELECT DISTINCT kind FROM tool_embeddings WHERE dataset = ?", [dataset]).fetchall():
            rows = con.execute("SELECT embedding FROM tool_embeddings WHERE dataset = ? AND kind = ? ORDER BY tool_id",
                               [dataset, kind]).fetchall()
            embeddings[kind] = np.array([r[0] for r in rows], dtype=np.float32)
        queries = rows_of(con, """
            SELECT q.query_id, q.query_text, q.query_group, e.embedding, list(g.tool_id ORDER BY g.tool_id) AS gold
            FROM queries q JOIN query_embeddings e USING (dataset, query_id)
            JOIN query_gold_tools g USING (dataset, query_id)
            WHERE q.dataset = ? GROUP BY ALL ORDER BY q.query_id""", [dataset])
    finally:
        con.close()
    return EvalInputs(dataset, [t["tool_id"] for t in tools], [t["embed_text"] for t in tools], embeddings,
                      [q["query_id"] for q in queries], [q["query_text"] for q in queries],
                      np.array([q["embedding"] for q in queries], dtype=np.float32), [set(q["gold"]) for q in queries],
                      [t["tool_group"] for t in tools], [t["description"] or "" for t in tools], encoder,
                      [q["query_group"] for q in queries])
