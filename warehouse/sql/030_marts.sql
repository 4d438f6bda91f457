-- Layer 3, marts: views and macros to query the graph. Persisted in the warehouse file.

-- Edge list for export, e.g. COPY (SELECT * FROM edge_list WHERE dataset = 'apibank') TO 'e.csv';
-- Transition edges keep their '<start>' / '<end>' ends (named as themselves).
-- kind: 'data', 'precondition' or NULL (the source does not say).
CREATE VIEW edge_list AS
SELECT e.dataset, e.source, e.tool_group,
       e.dependent, coalesce(d.name, e.dependent) AS dependent_name,
       e.prerequisite, coalesce(p.name, e.prerequisite) AS prerequisite_name,
       e.kind, e.prob, e.predicted_class, e.matched_params, e.fused_from, e.weight, e.n_transitions
FROM edges e
LEFT JOIN tools d ON d.dataset = e.dataset AND d.tool_id = e.dependent
LEFT JOIN tools p ON p.dataset = e.dataset AND p.tool_id = e.prerequisite;

-- Transitive prerequisites of every tool, per edge source. UNION (not UNION ALL) compares each new
-- row with all rows found so far, so the recursion stops on cycles; a tool on a cycle lists itself.
-- Dependency sources only: call order (transition edges, self-loops and all) is no prerequisite.
-- One row per tool and prerequisite. kind: 'data' when a chain of data edges alone reaches the
-- prerequisite (WHERE kind = 'data' is the closure over data edges, as prerequisites_of(..., kind :=
-- 'data')), else 'precondition' when a chain of precondition edges alone does, else NULL (only chains
-- that mix kinds or pass an edge of unknown kind). The exact closure over one kind: prerequisites_of.
CREATE VIEW prerequisite_closure AS
WITH RECURSIVE closure(dataset, source, tool_id, prerequisite, chain_kind) AS (
    SELECT dataset, source, dependent, prerequisite, kind FROM edges WHERE source <> 'transition'
    UNION  -- chain_kind: the kind every edge of the chain has, NULL when they differ or one is not known
    SELECT c.dataset, c.source, c.tool_id, e.prerequisite, CASE WHEN c.chain_kind = e.kind THEN c.chain_kind END
    FROM closure c
    JOIN edges e ON e.dataset = c.dataset AND e.source = c.source AND e.dependent = c.prerequisite
)
SELECT dataset, source, tool_id, prerequisite,
       CASE WHEN bool_or(chain_kind = 'data') THEN 'data'
            WHEN bool_or(chain_kind = 'precondition') THEN 'precondition' END AS kind
FROM closure
GROUP BY ALL;

-- The errors the table macros below raise for a dataset the warehouse does not hold, or a tool embedding
-- kind it has no rows of (fn: the macro's name); each names what the warehouse has instead.
CREATE MACRO unknown_dataset_error(fn, ds) AS
error(fn || ': no dataset ' || coalesce(ds, 'NULL') || ' in the warehouse (it has: '
      || coalesce((SELECT string_agg(dataset, ', ' ORDER BY dataset) FROM datasets), 'none') || ')');

-- (unknown_kind_error is about tool embedding kinds; unknown_dependency_kind_error about edges.kind.)
CREATE MACRO unknown_kind_error(fn, ds, emb_kind) AS
error(fn || ': ' || ds || ' has no tool embeddings of kind ' || coalesce(emb_kind, 'NULL')
      || ' (it has: ' || coalesce((SELECT string_agg(x, ', ' ORDER BY x) FROM (SELECT DISTINCT kind AS x
         FROM tool_embeddings WHERE dataset = ds)), 'none') || ')');

-- The error for a dependency kind (edges.kind) that is neither 'data' nor 'precondition' (NULL: every edge).
CREATE MACRO unknown_dependency_kind_error(fn, dep_kind) AS
error(fn || ': dependency kind ' || dep_kind || ' is not one of data, precondition '
      || '(or NULL: every edge, whatever its kind)');

-- The arguments of the embedding top-k macros: true, or the error for a k that is not positive, an unknown
-- dataset, or a kind the dataset has no tool embeddings of.
CREATE MACRO top_k_arguments_checked(fn, ds, emb_kind, k) AS CASE
    WHEN k IS NULL OR k <= 0
      THEN error(fn || ': k must be a positive integer, got ' || coalesce(CAST(k AS VARCHAR), 'NULL'))
    WHEN ds IS NULL OR NOT EXISTS (SELECT 1 FROM datasets d WHERE d.dataset = ds)
      THEN unknown_dataset_error(fn, ds)
    WHEN emb_kind IS NULL OR NOT EXISTS (SELECT 1 FROM tool_embeddings t WHERE t.dataset = ds AND t.kind = emb_kind)
      THEN unknown_kind_error(fn, ds, emb_kind)
    ELSE true END;

-- One tool's prerequisites with the shortest depth and one shortest call path (prerequisite
-- first). Breadth-first with a visited set (USING KEY: one row per prerequisite, a tool already
-- reached is never expanded again), so the work is bounded by the edges, not by the number of
-- simple paths: a complete 15-tool graph takes milliseconds. Ties between equally short paths go
-- to the smallest path in text order, so the answer is deterministic.
-- kind (optional, named): NULL (default) follows every edge, 'data' or 'precondition' only edges of
-- that kind: SELECT * FROM prerequisites_of('apibank', 'manual', 'AddAgenda', kind := 'data').
-- A dataset the warehouse does not have, an edge source the dataset was not built with (its edges or
-- its tgr_<source> embeddings), a tool it does not have or another kind is an error, not an empty
-- answer; a known tool without prerequisites (of that kind) has none.
CREATE MACRO prerequisites_of(ds, src, tool, kind := NULL) AS TABLE
WITH RECURSIVE check_args AS (
    SELECT CASE
        WHEN kind IS NOT NULL AND kind NOT IN ('data', 'precondition')
          THEN unknown_dependency_kind_error('prerequisites_of', kind)
        WHEN ds IS NULL OR NOT EXISTS (SELECT 1 FROM datasets d WHERE d.dataset = ds)
          THEN unknown_dataset_error('prerequisites_of', ds)
        WHEN src IS NULL OR NOT (EXISTS (SELECT 1 FROM edges e WHERE e.dataset = ds AND e.source = src)
                                 OR EXISTS (SELECT 1 FROM edge_lineage l WHERE l.dataset = ds AND l.source = src)
                                 OR EXISTS (SELECT 1 FROM tool_embeddings t WHERE t.dataset = ds AND t.kind = 'tgr_' || src))
          THEN error('prerequisites_of: ' || ds || ' has no edge source ' || coalesce(src, 'NULL') || ' (it has: '
                     || coalesce((SELECT string_agg(s, ', ' ORDER BY s) FROM (SELECT DISTINCT source AS s FROM edges
                                  WHERE dataset = ds)), 'none') || ')')
        WHEN tool IS NULL OR NOT EXISTS (SELECT 1 FROM tools t WHERE t.dataset = ds AND t.tool_id = tool)
          THEN error('prerequisites_of: ' || ds || ' has no tool ' || coalesce(tool, 'NULL'))
        ELSE true END AS ok
),
walk(prerequisite, depth, path) USING KEY (prerequisite) AS (
    SELECT e.prerequisite, 1, [tool, e.prerequisite]
    FROM check_args JOIN edges e ON check_args.ok  -- coalesce: a NULL argument must reach check_args, not fold the plan away
    WHERE e.dataset = coalesce(ds, '') AND e.source = coalesce(src, '') AND e.dependent = coalesce(tool, '')
      AND e.prerequisite <> coalesce(tool, '') AND (kind IS NULL OR e.kind = kind)
    UNION
    SELECT e.prerequisite, any_value(w.depth) + 1, arg_min(list_append(w.path, e.prerequisite), w.path::VARCHAR)
    FROM walk w
    JOIN edges e ON e.dataset = ds AND e.source = src AND e.dependent = w.prerequisite
    WHERE e.prerequisite <> tool AND (kind IS NULL OR e.kind = kind)
      AND e.prerequisite NOT IN (SELECT prerequisite FROM recurring.walk)
    GROUP BY e.prerequisite
)
SELECT prerequisite, depth, list_reverse(path) AS call_order
FROM walk;

-- Which tools can supply argument `param` of `tool`: one row per producer and source of
-- parameter_edges ('manual' gold, 'schema' name rule, 'discriminator'), with the producer's output
-- that feeds it (NULL: not known) and the probability. Best producer first (its highest
-- probability, then gold before the name rule before a model, then the smaller id), each
-- producer's rows together in that order:
--   SELECT * FROM producers_of('nestools', 'distribute_film', 'rights_agreement');
-- A dataset the warehouse does not have, a tool the dataset does not have, or a parameter the tool
-- does not take, is an error, not an empty answer.
CREATE MACRO producers_of(ds, tool, param) AS TABLE
WITH found AS (
    SELECT pe.prerequisite AS producer, coalesce(t.name, pe.prerequisite) AS producer_name, pe.source,
           pe.producer_output, pe.probability,
           CASE pe.source WHEN 'manual' THEN 0 WHEN 'schema' THEN 1 ELSE 2 END AS source_rank
    FROM (SELECT CASE
            WHEN ds IS NULL OR NOT EXISTS (SELECT 1 FROM datasets d WHERE d.dataset = ds)
              THEN unknown_dataset_error('producers_of', ds)
            WHEN tool IS NULL OR NOT EXISTS (SELECT 1 FROM tools d WHERE d.dataset = ds AND d.tool_id = tool)
              THEN error('producers_of: ' || coalesce(ds, 'NULL') || ' has no tool ' || coalesce(tool, 'NULL'))
            WHEN param IS NULL OR NOT EXISTS (SELECT 1 FROM tools d WHERE d.dataset = ds AND d.tool_id = tool
                    AND list_contains(CAST(coalesce(json_extract_string(d.doc_json, '$.input_params[*].name'), [])
                                           AS VARCHAR[]), param))
              THEN error('producers_of: ' || tool || ' takes no input parameter ' || coalesce(param, 'NULL'))
            ELSE true END AS ok) check_args
    JOIN parameter_edges pe ON check_args.ok
    LEFT JOIN tools t ON t.dataset = pe.dataset AND t.tool_id = pe.prerequisite
    WHERE pe.dataset = coalesce(ds, '') AND pe.dependent = coalesce(tool, '')
      AND pe.consumer_param = coalesce(param, '')  -- coalesce: NULLs reach check_args
),
per_producer AS (
    SELECT *, max(probability) OVER (PARTITION BY producer) AS best_probability,
           min(source_rank) OVER (PARTITION BY producer) AS best_source
    FROM found
)
SELECT producer, producer_name, source, producer_output, probability,
       row_number() OVER (ORDER BY best_probability DESC NULLS LAST, best_source, producer,
                                   probability DESC NULLS LAST, source_rank) AS rank
FROM per_producer
ORDER BY rank;

-- Table 4: share of tools with at least one edge, per group and over the whole set ('*').
-- An edge to another tool counts: ToolNet's self-loops and '<start>'/'<end>' edges do not.
CREATE VIEW graph_density AS
WITH sources AS (SELECT DISTINCT dataset, source FROM edges),
linking AS (SELECT * FROM edges WHERE dependent <> prerequisite
            AND dependent NOT IN ('<start>', '<end>') AND prerequisite NOT IN ('<start>', '<end>')),
endpoints AS (
    SELECT dataset, source, dependent AS tool_id FROM linking
    UNION
    SELECT dataset, source, prerequisite FROM linking
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
-- A k that is not positive, a dataset the warehouse does not have, a kind the dataset has no embeddings
-- of, or a query vector that is NULL, zero or holds NULL/NaN (its cosine is undefined), is an error,
-- not an empty or NaN-scored answer.
CREATE MACRO tool_top_k(ds, emb_kind, query_vec, k) AS TABLE
SELECT e.tool_id,
       array_cosine_similarity(e.embedding, CAST(query_vec AS FLOAT[{dim}])) AS score,
       row_number() OVER (ORDER BY score DESC, e.tool_id) AS rank
FROM (SELECT CASE
        WHEN NOT top_k_arguments_checked('tool_top_k', ds, emb_kind, k) THEN false
        WHEN NOT coalesce(len(list_filter(CAST(query_vec AS FLOAT[]), lambda x: x IS NULL OR isnan(x))) = 0
                          AND list_sum(list_transform(CAST(query_vec AS FLOAT[]), lambda x: x * x)) > 0, false)
          THEN error('tool_top_k: the query vector is NULL, all zeros or holds NULL/NaN values; its cosine similarity is undefined')
        ELSE true END AS ok) check_args
JOIN tool_embeddings e ON check_args.ok
WHERE e.dataset = coalesce(ds, '') AND e.kind = coalesce(emb_kind, '')  -- coalesce: NULLs reach check_args
QUALIFY rank <= coalesce(k, 0)
ORDER BY rank;

-- Top k tools for every stored query of a dataset. Errors as tool_top_k's: a k that is not positive,
-- an unknown dataset, a kind the dataset has no tool embeddings of.
CREATE MACRO query_top_k(ds, emb_kind, k) AS TABLE
SELECT q.query_id, t.tool_id,
       array_cosine_similarity(t.embedding, q.embedding) AS score,
       row_number() OVER (PARTITION BY q.query_id ORDER BY score DESC, t.tool_id) AS rank
FROM (SELECT top_k_arguments_checked('query_top_k', ds, emb_kind, k) AS ok) check_args
JOIN query_embeddings q ON check_args.ok
JOIN tool_embeddings t ON t.dataset = q.dataset
WHERE q.dataset = coalesce(ds, '') AND t.kind = coalesce(emb_kind, '')  -- coalesce: NULLs reach check_args
QUALIFY rank <= coalesce(k, 0)
ORDER BY q.query_id, rank;

-- Table-2 layout: one row per dataset, method and query split ('all', or 'test': the queries
-- whose gold run the transition graph never saw), k = 5 and 10 side by side.
CREATE VIEW retrieval_table AS
SELECT dataset, method, query_split,
       max(recall) FILTER (WHERE k = 5) AS recall_5, max(recall) FILTER (WHERE k = 10) AS recall_10,
       max(ndcg) FILTER (WHERE k = 5) AS ndcg_5, max(ndcg) FILTER (WHERE k = 10) AS ndcg_10,
       max(pass_rate) FILTER (WHERE k = 5) AS pass_rate_5,
       max(pass_rate) FILTER (WHERE k = 10) AS pass_rate_10,
       max(n_queries) AS n_queries,
       -- w of (1 - w) cos(q, x) + w cos(q, x'): 0 embedding, 1 +TGR, '(cv)' rows the cross-validated w
       max(graph_weight) AS graph_weight
FROM retrieval_metrics
GROUP BY dataset, method, query_split;

-- ToolNet -----------------------------------------------------------------------------------

-- One row per call: position 1 is the first tool of the run.
CREATE VIEW trajectory_steps AS
SELECT dataset, origin, run_id, split, success, generate_subscripts(tools, 1) AS step, unnest(tools) AS tool_id
FROM trajectories;

-- The arguments of the successor macros: true, or the error for a k that is not positive, an unknown
-- dataset, or a tool the dataset does not have ('<start>' is every dataset's).
CREATE MACRO next_tool_arguments_checked(fn, ds, tool, k) AS CASE
    WHEN k IS NULL OR k <= 0
      THEN error(fn || ': k must be a positive integer, got ' || coalesce(CAST(k AS VARCHAR), 'NULL'))
    WHEN ds IS NULL OR NOT EXISTS (SELECT 1 FROM datasets d WHERE d.dataset = ds)
      THEN unknown_dataset_error(fn, ds)
    WHEN tool IS NULL OR NOT (tool = '<start>' OR EXISTS (SELECT 1 FROM tools t WHERE t.dataset = ds AND t.tool_id = tool))
      THEN error(fn || ': ' || coalesce(ds, 'NULL') || ' has no tool ' || coalesce(tool, 'NULL'))
    ELSE true END;

-- The k most likely tools after `tool` (ToolNet's successor lookup, Eq. 5 weights; '<start>' for
-- the first call): SELECT * FROM next_tools('tmdb', 'SearchMovie', 3). '<end>' (stop) and the
-- tool itself are candidates like any other; edges of weight 0 are not listed. Ties go to the
-- larger count, then the smaller id. A dataset the warehouse does not have, a tool the dataset does
-- not have, or a k that is not positive, is an error, not an empty answer (a known tool after which
-- no run went on, or a dataset built without transitions, has no next tools).
CREATE MACRO next_tools(ds, tool, k) AS TABLE
SELECT e.dependent AS next_tool, e.weight, e.n_transitions,
       row_number() OVER (ORDER BY e.weight DESC, e.n_transitions DESC, e.dependent) AS rank
FROM (SELECT next_tool_arguments_checked('next_tools', ds, tool, k) AS ok) check_args
JOIN edges e ON check_args.ok
WHERE e.dataset = coalesce(ds, '') AND e.source = 'transition' AND e.prerequisite = coalesce(tool, '') AND e.weight > 0
QUALIFY rank <= coalesce(k, 0)  -- coalesce: a NULL argument reaches check_args instead of folding the plan away
ORDER BY rank;

-- The transition graph as it stood after iteration n of the dynamic update (Eqs. 6-8; 0 = the
-- static graph): each edge's latest version at or before n. An unknown dataset, or an n that is
-- NULL or negative, is an error.
CREATE MACRO transition_weights_at(ds, n) AS TABLE
SELECT prerequisite, dependent, arg_max(weight, iteration) AS weight, max(iteration) AS changed_at
FROM (SELECT CASE
        WHEN n IS NULL OR n < 0
          THEN error('transition_weights_at: n is an iteration >= 0 (0: the static graph), got '
                     || coalesce(CAST(n AS VARCHAR), 'NULL'))
        WHEN ds IS NULL OR NOT EXISTS (SELECT 1 FROM datasets d WHERE d.dataset = ds)
          THEN unknown_dataset_error('transition_weights_at', ds)
        ELSE true END AS ok) check_args
JOIN transition_weight_versions ON check_args.ok
WHERE dataset = coalesce(ds, '') AND iteration <= coalesce(n, -1)  -- coalesce: NULLs reach check_args
GROUP BY prerequisite, dependent;

-- next_tools with the dynamic weights after iteration n; errors as next_tools and transition_weights_at.
CREATE MACRO next_tools_at(ds, tool, k, n) AS TABLE
SELECT w.dependent AS next_tool, w.weight,
       row_number() OVER (ORDER BY w.weight DESC, w.dependent) AS rank
FROM (SELECT next_tool_arguments_checked('next_tools_at', ds, tool, k) AS ok) check_args
JOIN transition_weights_at(ds, n) w ON check_args.ok
WHERE w.prerequisite = coalesce(tool, '') AND w.weight > 0
QUALIFY rank <= coalesce(k, 0)  -- coalesce: NULLs reach check_args
ORDER BY rank;

-- Next-tool hit@1 / hit@3 side by side, per dataset and method.
CREATE VIEW next_tool_table AS
SELECT dataset, method, query_split,
       max(hit_rate) FILTER (WHERE k = 1) AS hit_1, max(hit_rate) FILTER (WHERE k = 3) AS hit_3,
       max(n_steps) AS n_steps
FROM next_tool_metrics
GROUP BY dataset, method, query_split;
