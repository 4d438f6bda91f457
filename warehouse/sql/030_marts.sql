-- Layer 3, marts: views and macros to query the graph. Persisted in the warehouse file.

-- Edge list for export, e.g. COPY (SELECT * FROM edge_list WHERE dataset = 'apibank') TO 'e.csv';
CREATE VIEW edge_list AS
SELECT e.dataset, e.source, e.tool_group,
       e.dependent, d.name AS dependent_name,
       e.prerequisite, p.name AS prerequisite_name,
       e.prob, e.predicted_class, e.matched_params, e.fused_from
FROM edges e
JOIN tools d ON d.dataset = e.dataset AND d.tool_id = e.dependent
JOIN tools p ON p.dataset = e.dataset AND p.tool_id = e.prerequisite;

-- Transitive prerequisites of every tool, per edge source. UNION (not UNION ALL) compares each new
-- row with all rows found so far, so the recursion stops on cycles; a tool on a cycle lists itself.
CREATE VIEW prerequisite_closure AS
WITH RECURSIVE closure(dataset, source, tool_id, prerequisite) AS (
    SELECT dataset, source, dependent, prerequisite FROM edges
    UNION
    SELECT c.dataset, c.source, c.tool_id, e.prerequisite
    FROM closure c
    JOIN edges e ON e.dataset = c.dataset AND e.source = c.source AND e.dependent = c.prerequisite
)
SELECT * FROM closure;

-- One tool's prerequisites with the shortest depth and one shortest call path (prerequisite
-- first). Breadth-first with a visited set (USING KEY: one row per prerequisite, a tool already
-- reached is never expanded again), so the work is bounded by the edges, not by the number of
-- simple paths: a complete 15-tool graph takes milliseconds. Ties between equally short paths go
-- to the smallest path in text order, so the answer is deterministic.
CREATE MACRO prerequisites_of(ds, src, tool) AS TABLE
WITH RECURSIVE walk(prerequisite, depth, path) USING KEY (prerequisite) AS (
    SELECT prerequisite, 1, [tool, prerequisite]
    FROM edges WHERE dataset = ds AND source = src AND dependent = tool AND prerequisite <> tool
    UNION
    SELECT e.prerequisite, any_value(w.depth) + 1, arg_min(list_append(w.path, e.prerequisite), w.path::VARCHAR)
    FROM walk w
    JOIN edges e ON e.dataset = ds AND e.source = src AND e.dependent = w.prerequisite
    WHERE e.prerequisite <> tool
      AND e.prerequisite NOT IN (SELECT prerequisite FROM recurring.walk)
    GROUP BY e.prerequisite
)
SELECT prerequisite, depth, list_reverse(path) AS call_order
FROM walk;

-- Table 4: share of tools with at least one edge, per group and over the whole set ('*').
CREATE VIEW graph_density AS
WITH sources AS (SELECT DISTINCT dataset, source FROM edges),
endpoints AS (
    SELECT dataset, source, dependent AS tool_id FROM edges
    UNION
    SELECT dataset, source, prerequisite FROM edges
),
per_tool AS (
    SELECT t.dataset, s.source, t.tool_group, t.tool_id, x.tool_id IS NOT NULL AS connected
    FROM tools t
    JOIN sources s ON s.dataset = t.dataset
    LEFT JOIN endpoints x ON x.dataset = t.dataset AND x.source = s.source AND x.tool_id = t.tool_id
)
SELECT dataset, source, coalesce(tool_group, '*') AS tool_group,
       count(*) AS n_tools,
       count(*) FILTER (WHERE connected) AS n_connected,
       round(count(*) FILTER (WHERE connected) / count(*), 3) AS connected_share
FROM per_tool
GROUP BY GROUPING SETS ((dataset, source, tool_group), (dataset, source));

-- Top k tools for one query embedding: SELECT * FROM tool_top_k('apibank', 'tgr_manual', <vec>, 5).
-- kind: 'base' | 'tgr_discriminator' | 'tgr_manual' | 'tgr_schema' | 'tgr_fused'. Ties go to the smaller tool_id.
-- A k that is not positive, or a query vector that is NULL, zero or holds NULL/NaN (its cosine is
-- undefined), is an error, not an empty or NaN-scored answer.
CREATE MACRO tool_top_k(ds, emb_kind, query_vec, k) AS TABLE
SELECT tool_id,
       array_cosine_similarity(embedding, CAST(query_vec AS FLOAT[{dim}])) AS score,
       row_number() OVER (ORDER BY score DESC, tool_id) AS rank
FROM tool_embeddings
WHERE dataset = ds AND kind = emb_kind
  AND CASE
        WHEN NOT coalesce(len(list_filter(CAST(query_vec AS FLOAT[]), lambda x: x IS NULL OR isnan(x))) = 0
                          AND list_sum(list_transform(CAST(query_vec AS FLOAT[]), lambda x: x * x)) > 0, false)
          THEN error('tool_top_k: the query vector is NULL, all zeros or holds NULL/NaN values; its cosine similarity is undefined')
        ELSE true
      END
QUALIFY rank <= CASE WHEN k IS NULL OR k <= 0
                     THEN error('tool_top_k: k must be a positive integer, got ' || coalesce(CAST(k AS VARCHAR), 'NULL'))
                     ELSE k END
ORDER BY rank;

-- Top k tools for every stored query of a dataset.
CREATE MACRO query_top_k(ds, emb_kind, k) AS TABLE
SELECT q.query_id, t.tool_id,
       array_cosine_similarity(t.embedding, q.embedding) AS score,
       row_number() OVER (PARTITION BY q.query_id ORDER BY score DESC, t.tool_id) AS rank
FROM query_embeddings q
JOIN tool_embeddings t ON t.dataset = q.dataset
WHERE q.dataset = ds AND t.kind = emb_kind
QUALIFY rank <= k
ORDER BY q.query_id, rank;

-- Table-2 layout: one row per dataset and method, k = 5 and 10 side by side.
CREATE VIEW retrieval_table AS
SELECT dataset, method,
       max(recall) FILTER (WHERE k = 5) AS recall_5, max(recall) FILTER (WHERE k = 10) AS recall_10,
       max(ndcg) FILTER (WHERE k = 5) AS ndcg_5, max(ndcg) FILTER (WHERE k = 10) AS ndcg_10,
       max(pass_rate) FILTER (WHERE k = 5) AS pass_rate_5,
       max(pass_rate) FILTER (WHERE k = 10) AS pass_rate_10,
       max(n_queries) AS n_queries
FROM retrieval_metrics
GROUP BY dataset, method;
