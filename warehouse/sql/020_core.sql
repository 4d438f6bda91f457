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
-- when both found it; fused_from says which sources found it, matched_params the schema rule's),
-- 'transition' (ToolNet Eq. 5, tasks/transitions.py: `prerequisite` is called right before
-- `dependent`; weight = prob = #(prerequisite then dependent) / #(prerequisite) over the training
-- runs, n_transitions the numerator; nodes '<start>' and '<end>' included, a self-loop on every
-- tool; tool_group '*' when the two ends are not tools of one group).
CREATE TABLE edges (
    dataset         VARCHAR NOT NULL,
    tool_group      VARCHAR NOT NULL,
    dependent       VARCHAR NOT NULL,
    prerequisite    VARCHAR NOT NULL,
    prob            DOUBLE NOT NULL CHECK (prob BETWEEN 0 AND 1),
    predicted_class TINYINT NOT NULL CHECK (predicted_class IN (0, 2)),  -- class on the pair <a, b>
    source          VARCHAR NOT NULL CHECK (source IN ('discriminator', 'manual', 'schema', 'fused', 'transition')),
    p_direction     DOUBLE CHECK (p_direction BETWEEN 0 AND 1),
    matched_params  VARCHAR[],
    fused_from      VARCHAR[],
    weight          DOUBLE CHECK (weight BETWEEN 0 AND 1),   -- transition edges: Eq. 5 weight
    n_transitions   BIGINT CHECK (n_transitions >= 0),       -- transition edges: its count
    PRIMARY KEY (dataset, source, dependent, prerequisite),
    CHECK ((source = 'transition') = (weight IS NOT NULL AND n_transitions IS NOT NULL))
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
    kind      VARCHAR NOT NULL CHECK (kind IN ('base', 'tgr_discriminator', 'tgr_manual', 'tgr_schema', 'tgr_fused',
                                         'tgr_transition')),
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
    -- 'all' queries, or 'test': the queries whose gold run is in the trajectories' test split
    -- (methods built from the training runs are scored there only)
    query_split  VARCHAR NOT NULL DEFAULT 'all' CHECK (query_split IN ('all', 'test')),
    PRIMARY KEY (dataset, method, k, query_split)
);
INSERT INTO retrieval_metrics SELECT * FROM stg_retrieval_metrics;

-- ToolNet. One row per run read (tasks/trajectories.py): a benchmark's gold call order
-- (source 'gold', run_id = query_id) or a run of a user file ('user'); the seeded split; for
-- the test runs, the iteration at which the run updated the dynamic weights.
CREATE TABLE trajectories (
    dataset          VARCHAR NOT NULL,
    origin           VARCHAR NOT NULL,      -- the file read
    run_id           VARCHAR NOT NULL,
    line             BIGINT NOT NULL,       -- line in origin
    source           VARCHAR NOT NULL CHECK (source IN ('gold', 'user')),
    query_id         VARCHAR,
    success          BOOLEAN NOT NULL,      -- Eq. 5 counts successful training runs only
    split            VARCHAR NOT NULL CHECK (split IN ('train', 'validation', 'test')),
    tools            VARCHAR[] NOT NULL CHECK (len(tools) > 0),
    given_scores     JSON,                  -- evaluator scores that came with the run
    stream_iteration BIGINT,                -- test runs: iteration n of the dynamic update
    PRIMARY KEY (dataset, origin, run_id)
);
INSERT INTO trajectories SELECT * FROM stg_trajectories;

-- Runs that were well-formed but unusable (unknown tools, empty, reserved ids), by file and line.
CREATE TABLE trajectory_rejections (
    dataset VARCHAR NOT NULL,
    origin  VARCHAR NOT NULL,
    line    BIGINT NOT NULL,
    run_id  VARCHAR,
    reason  VARCHAR NOT NULL,
    PRIMARY KEY (dataset, origin, line)
);
INSERT INTO trajectory_rejections SELECT * FROM stg_trajectory_rejections;

-- How the transition graph and its dynamic weights were made, one row per dataset.
CREATE TABLE transition_builds (
    dataset           VARCHAR PRIMARY KEY,
    seed              BIGINT NOT NULL,      -- of the split and the stream order
    split_fractions   DOUBLE[] NOT NULL,    -- train, validation, test
    runs_train        BIGINT NOT NULL,
    runs_validation   BIGINT NOT NULL,
    runs_test         BIGINT NOT NULL,
    failed_train_runs BIGINT NOT NULL,      -- training runs with success = false, not in Eq. 5
    alpha             DOUBLE NOT NULL,      -- Eq. 8 (the paper gives none: chosen on validation)
    beta              DOUBLE NOT NULL CHECK (beta BETWEEN 0 AND 1),  -- Eq. 6
    evaluator         VARCHAR NOT NULL,
    rule_score        BIGINT NOT NULL,
    chosen_on         VARCHAR NOT NULL,     -- how alpha and beta were chosen
    sweep_json        JSON,                 -- every (alpha, beta) tried with its validation hit@1/@3
    stream_iterations BIGINT NOT NULL       -- test runs that updated the weights
);
INSERT INTO transition_builds SELECT * FROM stg_transition_builds;

-- Versioned dynamic weights (Eqs. 6-8): iteration 0 is the static graph (every transition edge);
-- iteration n holds only the edges whose weight changed with the n-th run of the test stream.
-- The weight of an edge at iteration n is its row with the largest iteration <= n
-- (macro transition_weights_at).
CREATE TABLE transition_weight_versions (
    dataset      VARCHAR NOT NULL,
    iteration    BIGINT NOT NULL CHECK (iteration >= 0),
    prerequisite VARCHAR NOT NULL,
    dependent    VARCHAR NOT NULL,
    weight       DOUBLE NOT NULL CHECK (weight BETWEEN 0 AND 1),
    PRIMARY KEY (dataset, iteration, prerequisite, dependent)
);
INSERT INTO transition_weight_versions SELECT * FROM stg_transition_weight_versions;

-- The evaluator's score of each tool a test-stream run called, and the accumulated s_i^(n) (Eq. 7).
CREATE TABLE transition_scores (
    dataset     VARCHAR NOT NULL,
    iteration   BIGINT NOT NULL CHECK (iteration >= 1),
    run_id      VARCHAR NOT NULL,
    tool_id     VARCHAR NOT NULL,
    score       BIGINT NOT NULL CHECK (score BETWEEN -3 AND 3),
    accumulated DOUBLE NOT NULL,
    PRIMARY KEY (dataset, iteration, tool_id)
);
INSERT INTO transition_scores SELECT * FROM stg_transition_scores;

-- Next-tool hit@k on held-out trajectories (eval-retrieval).
CREATE TABLE next_tool_metrics (
    dataset      VARCHAR NOT NULL,
    method       VARCHAR NOT NULL,
    k            INTEGER NOT NULL,
    hit_rate     DOUBLE NOT NULL CHECK (hit_rate BETWEEN 0 AND 1),
    n_steps      BIGINT NOT NULL,
    query_split  VARCHAR NOT NULL,
    evaluated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (dataset, method, k, query_split)
);
INSERT INTO next_tool_metrics SELECT * FROM stg_next_tool_metrics;

-- Lineage: what produced the edges of each (dataset, source); every edge joins to one row
-- (build check "edge sources without a lineage row").
CREATE TABLE edge_lineage (
    dataset             VARCHAR NOT NULL,
    source              VARCHAR NOT NULL,
    producer            VARCHAR NOT NULL,   -- what made them, in words
    input_files         VARCHAR[],          -- edge files, trajectories files
    input_sha256        VARCHAR[],          -- one per input file
    checkpoint          VARCHAR,            -- discriminator checkpoint folder
    checkpoint_sha256   VARCHAR,            -- of its files (sorted names and contents)
    tdi_manifest        VARCHAR,            -- manifest.json of the TDI data it was pretrained on
    tdi_manifest_sha256 VARCHAR,
    tdi_manifest_newer_than_checkpoint BOOLEAN,  -- the TDI was rewritten after training
    threshold           DOUBLE,             -- discriminator edge threshold (NULL: argmax)
    params_json         JSON,               -- the producer's settings
    flow_run_id         VARCHAR,            -- the Prefect run of build-graph
    built_at            TIMESTAMP NOT NULL,
    PRIMARY KEY (dataset, source)
);
INSERT INTO edge_lineage SELECT * FROM stg_edge_lineage;
