-- Layer 2, core: typed tables with keys and checks, filled from staging.
-- Edge direction everywhere: `dependent` depends on `prerequisite` (paper: t_a -> t_b, label 0
-- on the ordered pair <dependent, prerequisite>).

CREATE TABLE datasets (
    dataset       VARCHAR PRIMARY KEY,
    embed_style   VARCHAR NOT NULL CHECK (embed_style IN ('structured', 'description')),
    encoder       VARCHAR NOT NULL,
    discriminator VARCHAR,               -- checkpoint folder, NULL when built with manual edges only
    built_at      TIMESTAMP NOT NULL
);
INSERT INTO datasets SELECT * FROM stg_datasets;

CREATE TABLE tools (
    dataset    VARCHAR NOT NULL,
    tool_id    VARCHAR NOT NULL,
    name       VARCHAR NOT NULL,
    tool_group VARCHAR NOT NULL,          -- API-Bank level folder, ToolBench category
    doc_json   JSON NOT NULL,             -- schemas.docs.canonical_doc_json
    embed_text VARCHAR NOT NULL,          -- the text the sentence encoder saw
    PRIMARY KEY (dataset, tool_id)
);
INSERT INTO tools SELECT * FROM stg_tools;

CREATE TABLE queries (
    dataset     VARCHAR NOT NULL,
    query_id    VARCHAR NOT NULL,
    query_text  VARCHAR NOT NULL,
    query_group VARCHAR,
    PRIMARY KEY (dataset, query_id)
);
INSERT INTO queries SELECT * FROM stg_queries;

CREATE TABLE query_gold_tools (
    dataset  VARCHAR NOT NULL,
    query_id VARCHAR NOT NULL,
    tool_id  VARCHAR NOT NULL,
    PRIMARY KEY (dataset, query_id, tool_id)
);
INSERT INTO query_gold_tools SELECT DISTINCT * FROM stg_query_gold_tools;

-- Sources: 'manual' (gold, prob 1), 'discriminator' (prob = p(a->b) + p(b->a), the probability
-- of some dependency, given to the chosen direction; p_direction = that direction's class
-- probability alone), 'schema' (the parameter-match rule, prob 1, matched_params = the normalised
-- names through which the prerequisite's outputs feed the dependent's inputs), 'fused' (one edge
-- per pair found by the discriminator or the schema rule; the schema rule's direction and prob 1
-- when both found it; fused_from says which sources found it, matched_params the schema rule's).
CREATE TABLE edges (
    dataset         VARCHAR NOT NULL,
    tool_group      VARCHAR NOT NULL,
    dependent       VARCHAR NOT NULL,
    prerequisite    VARCHAR NOT NULL,
    prob            DOUBLE NOT NULL CHECK (prob BETWEEN 0 AND 1),
    predicted_class TINYINT NOT NULL CHECK (predicted_class IN (0, 2)),  -- class on the pair <a, b>
    source          VARCHAR NOT NULL CHECK (source IN ('discriminator', 'manual', 'schema', 'fused')),
    p_direction     DOUBLE CHECK (p_direction BETWEEN 0 AND 1),
    matched_params  VARCHAR[],
    fused_from      VARCHAR[],
    PRIMARY KEY (dataset, source, dependent, prerequisite)
);
INSERT INTO edges SELECT * FROM stg_edges;

-- Every pair the discriminator scored (after candidate pruning), edges or not.
CREATE TABLE scored_pairs (
    dataset          VARCHAR NOT NULL,
    tool_group       VARCHAR NOT NULL,
    tool_a           VARCHAR NOT NULL,
    tool_b           VARCHAR NOT NULL,
    p_a_depends_on_b DOUBLE NOT NULL,
    p_no_dependency  DOUBLE NOT NULL,
    p_b_depends_on_a DOUBLE NOT NULL,
    predicted_class  TINYINT NOT NULL CHECK (predicted_class IN (0, 1, 2)),  -- by the edge rule (edge_calibration)
    PRIMARY KEY (dataset, tool_a, tool_b)
);
INSERT INTO scored_pairs SELECT * FROM stg_scored_pairs;

CREATE TABLE candidate_pruning (
    dataset               VARCHAR NOT NULL,
    strategy              VARCHAR NOT NULL,
    pairs_in_groups       BIGINT NOT NULL,   -- unordered same-group pairs before pruning
    pairs_kept            BIGINT NOT NULL,
    known_edges           BIGINT NOT NULL,   -- manual edges of the set (0 when it has none)
    known_edges_in_groups BIGINT NOT NULL,   -- of those, both ends in one group
    known_edges_kept      BIGINT NOT NULL,   -- of those, still a candidate after pruning
    known_edge_recall     DOUBLE CHECK (known_edge_recall BETWEEN 0 AND 1),  -- kept / in_groups; NULL: no known edges
    PRIMARY KEY (dataset, strategy)
);
INSERT INTO candidate_pruning SELECT * FROM stg_candidate_pruning;

-- How discriminator probabilities became edges: one row per dataset scored by a discriminator.
CREATE TABLE edge_calibration (
    dataset          VARCHAR PRIMARY KEY,
    discriminator    VARCHAR NOT NULL,      -- checkpoint folder
    decision_rule    VARCHAR NOT NULL CHECK (decision_rule IN ('threshold', 'argmax')),
    threshold        DOUBLE CHECK (threshold BETWEEN 0 AND 1),  -- on p(a->b) + p(b->a); NULL for argmax
    criterion        VARCHAR,               -- how the threshold was chosen (calibration.json), or '--threshold'
    threshold_source VARCHAR NOT NULL,      -- 'calibration.json' | '--threshold' | 'argmax (no calibration.json)'
    both_orders      BOOLEAN NOT NULL,      -- symmetric scoring: <a,b> averaged with the label-swapped <b,a>
    min_prob         DOUBLE NOT NULL,       -- further cut on an edge's prob
    calibration_json JSON,                  -- the checkpoint's calibration.json as read
    pairs_scored     BIGINT NOT NULL,
    edges_kept       BIGINT NOT NULL,
    CHECK ((decision_rule = 'argmax') = (threshold IS NULL))
);
INSERT INTO edge_calibration SELECT * FROM stg_edge_calibration;

CREATE TABLE tool_embeddings (
    dataset   VARCHAR NOT NULL,
    tool_id   VARCHAR NOT NULL,
    kind      VARCHAR NOT NULL CHECK (kind IN ('base', 'tgr_discriminator', 'tgr_manual', 'tgr_schema', 'tgr_fused')),
    embedding FLOAT[{dim}] NOT NULL,
    PRIMARY KEY (dataset, kind, tool_id)
);
INSERT INTO tool_embeddings SELECT * FROM stg_tool_embeddings;

CREATE TABLE query_embeddings (
    dataset   VARCHAR NOT NULL,
    query_id  VARCHAR NOT NULL,
    embedding FLOAT[{dim}] NOT NULL,
    PRIMARY KEY (dataset, query_id)
);
INSERT INTO query_embeddings SELECT * FROM stg_query_embeddings;

CREATE TABLE retrieval_metrics (
    dataset      VARCHAR NOT NULL,
    method       VARCHAR NOT NULL,
    k            INTEGER NOT NULL,
    recall       DOUBLE NOT NULL,
    ndcg         DOUBLE NOT NULL,
    pass_rate    DOUBLE NOT NULL,
    n_queries    INTEGER NOT NULL,
    evaluated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (dataset, method, k)
);
INSERT INTO retrieval_metrics SELECT * FROM stg_retrieval_metrics;
