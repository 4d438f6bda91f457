"""The core tables of the warehouse, each declared once (docs/warehouse.md, "Adding a column").

This file is the one place a core table's layout lives: column, DuckDB type, NOT NULL (the default;
``null=True`` allows NULL), CHECK, DEFAULT, primary key and comment. The build generates from it the
Arrow schema of the staged Parquet, the ``CREATE TABLE`` with its constraints and the
``INSERT ... BY NAME`` (warehouse/spec.py), and checks every row dict the flows make against it.
To add a column, add a ``Column`` to its table below: nothing else changes.
``python -m warehouse.tables`` prints the generated SQL.

Edge direction everywhere: ``dependent`` depends on ``prerequisite`` (paper: t_a -> t_b, label 0 on
the ordered pair <dependent, prerequisite>).
"""
from __future__ import annotations

from warehouse.spec import EMBEDDING, Column, Table

CORE_TABLES: tuple[Table, ...] = (
    Table("datasets", "One row per tool set built into the warehouse.", (
        Column("dataset", "VARCHAR"),
        Column("embed_style", "VARCHAR", check="embed_style IN ('structured', 'description')"),
        Column("encoder", "VARCHAR"),
        Column("discriminator", "VARCHAR", null=True,
               comment="checkpoint folder, NULL when built with manual edges only"),
        Column("built_at", "TIMESTAMP"),
    ), primary_key=("dataset",)),

    Table("tools", "The tools of each tool set.", (
        Column("dataset", "VARCHAR"),
        Column("tool_id", "VARCHAR"),
        Column("name", "VARCHAR"),
        Column("tool_group", "VARCHAR", comment="API-Bank level folder, ToolBench category"),
        Column("doc_json", "JSON", comment="schemas.docs.canonical_doc_json"),
        Column("embed_text", "VARCHAR", comment="the text the sentence encoder saw"),
        Column("returns_nothing", "BOOLEAN", default="false",
               comment="the catalog says it returns no value (an OpenAPI 204): no data edge starts at it"),
    ), primary_key=("dataset", "tool_id")),

    Table("queries", "The queries of each tool set.", (
        Column("dataset", "VARCHAR"),
        Column("query_id", "VARCHAR"),
        Column("query_text", "VARCHAR"),
        Column("query_group", "VARCHAR", null=True),
    ), primary_key=("dataset", "query_id")),

    Table("query_gold_tools", "The gold tools of each query (a tool listed twice for a query is one row).", (
        Column("dataset", "VARCHAR"),
        Column("query_id", "VARCHAR"),
        Column("tool_id", "VARCHAR"),
    ), primary_key=("dataset", "query_id", "tool_id"), select="SELECT DISTINCT * FROM staged"),

    Table("edges", "Dependency and transition edges. Sources: 'manual' (gold, prob 1), 'discriminator' "
          "(prob = p(a->b) + p(b->a), the probability of some dependency, given to the chosen direction; "
          "p_direction = that direction's class probability alone), 'schema' (the parameter-match rule, "
          "prob 1, matched_params = the normalised names through which the prerequisite's outputs feed the "
          "dependent's inputs), 'fused' (one edge per pair found by the discriminator or the schema rule; the "
          "schema rule's direction and prob 1 when both found it; fused_from says which sources found it, "
          "matched_params the schema rule's), 'transition' (ToolNet Eq. 5, tasks/toolnet/transitions.py: `prerequisite` "
          "is called right before `dependent`; weight = prob = #(prerequisite then dependent) / #(prerequisite) "
          "over the training runs, n_transitions the numerator; nodes '<start>' and '<end>' included, a "
          "self-loop on every tool; tool_group '*' when the two ends are not tools of one group), 'predicted' "
          "(GTool's missing-dependency predictor, flows/gtool.py: edges the completed graph adds to its base "
          "graph, prob = the predictor's p(dependent depends on prerequisite), each >= the threshold validated "
          "in edge_lineage; one direction per tool pair, none where the base graph has the pair), 'call_order' "
          "(build-graph: precondition candidates from the call order of the training runs only, "
          "tasks/graph/call_order_edges.py: `prerequisite` came first in at least the min_consistency share of the "
          "joint training runs, prob = that share, kind 'precondition'; thresholds and counts in edge_lineage, "
          "support per pair in the view call_order_pairs, split 'train'), 'stated' (build-graph: the dependent's docs "
          "name the prerequisite, tasks/graph/stated.py: an input's description as its value's source, or its own "
          "description as a step to take first; prob 1, evidence = the sentence; the discriminator's edges take "
          "them too). kind: what the "
          "dependency is, 'data' (an output of the prerequisite feeds an input of the dependent) or 'precondition' "
          "(the prerequisite must run first, no value passed); NULL when the source does not say (gold links that "
          "follow call order, a tool-level discriminator edge, transition and predicted edges).", (
        Column("dataset", "VARCHAR"),
        Column("tool_group", "VARCHAR"),
        Column("dependent", "VARCHAR"),
        Column("prerequisite", "VARCHAR"),
        Column("prob", "DOUBLE", check="prob BETWEEN 0 AND 1"),
        Column("predicted_class", "TINYINT", check="predicted_class IN (0, 2)", comment="class on the pair <a, b>"),
        Column("source", "VARCHAR", check="source IN ('discriminator', 'manual', 'schema', 'fused', 'transition', "
                                            "'predicted', 'call_order', 'stated')"),
        Column("kind", "VARCHAR", null=True, check="kind IN ('data', 'precondition')",
               comment="dependency kind (schemas.toolset.DEPENDENCY_KINDS); NULL: not known"),
        Column("p_direction", "DOUBLE", null=True, check="p_direction BETWEEN 0 AND 1"),
        Column("matched_params", "VARCHAR[]", null=True),
        Column("fused_from", "VARCHAR[]", null=True),
        Column("weight", "DOUBLE", null=True, check="weight BETWEEN 0 AND 1", comment="transition edges: Eq. 5 weight"),
        Column("n_transitions", "BIGINT", null=True, check="n_transitions >= 0", comment="transition edges: its count"),
        Column("evidence", "VARCHAR", null=True,
               comment="stated edges: the sentence of the dependent's docs that names the prerequisite; "
                       "discriminator edges whose direction the names' lifecycle gave: which stages of which object"),
    ), primary_key=("dataset", "source", "dependent", "prerequisite"),
        checks=("(source = 'transition') = (weight IS NOT NULL AND n_transitions IS NOT NULL)",)),

    Table("parameter_edges", "Parameter-level dependencies: the input `consumer_param` of `dependent` takes a value "
          "that `prerequisite` produces (its output `producer_output`). Sources: 'manual' (gold, the tool set's "
          "param_edges.jsonl, probability 1), 'schema' (the parameter-match rule behind the 'schema' edges: one row per "
          "input of the dependent whose normalised name is one of the edge's matched_params, probability 1; "
          "producer_output NULL when the prerequisite declares no outputs and the rule matched the output its name "
          "implies), 'discriminator' (the parameter-level scorer, build-graph --param-discriminator: each input whose "
          "p(takes the prerequisite's output) reaches the calibrated cut, probability = that p; producer_output NULL), "
          "'stated' (the input's description names the prerequisite as its value's source, probability 1). Macro "
          "producers_of.", (
        Column("dataset", "VARCHAR"),
        Column("dependent", "VARCHAR", comment="the consumer (tool_id)"),
        Column("prerequisite", "VARCHAR", comment="the producer (tool_id)"),
        Column("consumer_param", "VARCHAR", comment="the dependent's input parameter, as its doc names it"),
        Column("producer_output", "VARCHAR", null=True,
               comment="the prerequisite's output, as its doc names it; NULL: not known or not declared"),
        Column("probability", "DOUBLE", null=True, check="probability BETWEEN 0 AND 1"),
        Column("source", "VARCHAR", check="source IN ('manual', 'schema', 'discriminator', 'stated')"),
    ), primary_key=("dataset", "source", "dependent", "prerequisite", "consumer_param")),

    Table("scored_pairs", "Every pair the tool-level cross-encoder scored (after candidate pruning; with two levels only the "
          "pairs with a tool that declares no inputs), edges or not.", (
        Column("dataset", "VARCHAR"),
        Column("tool_group", "VARCHAR"),
        Column("tool_a", "VARCHAR"),
        Column("tool_b", "VARCHAR"),
        Column("p_a_depends_on_b", "DOUBLE"),
        Column("p_no_dependency", "DOUBLE"),
        Column("p_b_depends_on_a", "DOUBLE"),
        Column("predicted_class", "TINYINT", check="predicted_class IN (0, 1, 2)",
               comment="by the edge rule (edge_calibration)"),
        Column("direction_from_names", "BOOLEAN", default="false",
               comment="both tools declare no inputs and their names' lifecycle orders them (a search first, "
                       "then create, change, remove: tasks/graph/lifecycle.py): the two directions' probabilities "
                       "are the cross-encoder's, swapped where it said the other way"),
    ), primary_key=("dataset", "tool_a", "tool_b")),

    Table("candidate_pruning", "What candidate pruning kept, per dataset and strategy, with the gold-edge recall.", (
        Column("dataset", "VARCHAR"),
        Column("strategy", "VARCHAR"),
        Column("pairs_in_groups", "BIGINT", comment="unordered same-group pairs before pruning"),
        Column("pairs_kept", "BIGINT"),
        Column("known_edges", "BIGINT", comment="manual edges of the set (0 when it has none)"),
        Column("known_edges_in_groups", "BIGINT", comment="of those, both ends in one group"),
        Column("known_edges_kept", "BIGINT",
               comment="of those, still a candidate after pruning, in their own direction (prerequisite, dependent)"),
        Column("known_edge_recall", "DOUBLE", null=True, check="known_edge_recall BETWEEN 0 AND 1",
               comment="kept / in_groups; NULL: no known edges"),
        Column("ordered_pairs_in_groups", "BIGINT", null=True, comment="ordered same-group pairs: 2 * pairs_in_groups"),
        Column("ordered_pairs_kept", "BIGINT", null=True,
               comment="ordered pairs kept: both orders of a pair a symmetric rule keeps, the (producer, consumer) "
                       "order of one only the 'retrieval' rule keeps"),
        Column("ordered_share_kept", "DOUBLE", null=True, check="ordered_share_kept BETWEEN 0 AND 1",
               comment="ordered_pairs_kept / ordered_pairs_in_groups: the share of pairs kept"),
    ), primary_key=("dataset", "strategy")),

    Table("edge_calibration", "How discriminator probabilities became edges: one row per dataset scored by a "
          "discriminator.", (
        Column("dataset", "VARCHAR"),
        Column("discriminator", "VARCHAR", comment="checkpoint folder"),
        Column("decision_rule", "VARCHAR", check="decision_rule IN ('threshold', 'argmax')"),
        Column("threshold", "DOUBLE", null=True, check="threshold BETWEEN 0 AND 1",
               comment="on p(a->b) + p(b->a); NULL for argmax"),
        Column("criterion", "VARCHAR", null=True,
               comment="how the threshold was chosen (calibration.json), or '--threshold'"),
        Column("threshold_source", "VARCHAR",
               comment="'calibration.json' | '--threshold' | 'argmax (no calibration.json)'"),
        Column("both_orders", "BOOLEAN",
               comment="symmetric scoring: <a,b> averaged with the label-swapped <b,a>"),
        Column("min_prob", "DOUBLE", comment="further cut on an edge's prob"),
        Column("calibration_json", "JSON", null=True, comment="the checkpoint's calibration.json as read"),
        Column("pairs_scored", "BIGINT"),
        Column("edges_kept", "BIGINT"),
    ), primary_key=("dataset",), checks=("(decision_rule = 'argmax') = (threshold IS NULL)",)),

    Table("tool_embeddings", "Tool embeddings: the encoder's ('base') and TGR's per graph (Eq. 3).", (
        Column("dataset", "VARCHAR"),
        Column("tool_id", "VARCHAR"),
        Column("kind", "VARCHAR", check="kind IN ('base', 'tgr_discriminator', 'tgr_manual', 'tgr_schema', "
                                        "'tgr_fused', 'tgr_transition', 'tgr_completed', 'tgr_schema_call_order', "
                                        "'tgr_discriminator_call_order', 'tgr_fused_call_order', "
                                        "'tgr_discriminator_data')",
               comment="tgr_completed: Eq. 3 over GTool's completed graph (base graph + 'predicted' edges); "
                       "tgr_discriminator_data: the discriminator graph without the edges its kind head calls "
                       "preconditions; "
                       "tgr_<source>_call_order: over that data graph and the 'call_order' precondition edges "
                       "(built from the training runs: scored on the test queries only)"),
        Column("embedding", EMBEDDING),
    ), primary_key=("dataset", "kind", "tool_id")),

    Table("query_embeddings", "Query embeddings (the encoder's).", (
        Column("dataset", "VARCHAR"),
        Column("query_id", "VARCHAR"),
        Column("embedding", EMBEDDING),
    ), primary_key=("dataset", "query_id")),

    Table("retrieval_metrics", "Retrieval Recall@k, NDCG@k and Pass Rate@k per method (eval-retrieval).", (
        Column("dataset", "VARCHAR"),
        Column("method", "VARCHAR"),
        Column("k", "INTEGER"),
        Column("recall", "DOUBLE"),
        Column("ndcg", "DOUBLE"),
        Column("pass_rate", "DOUBLE"),
        Column("n_queries", "INTEGER"),
        Column("evaluated_at", "TIMESTAMP"),
        Column("query_split", "VARCHAR", default="'all'", check="query_split IN ('all', 'test')",
               comment="'all' queries, or 'test': the queries whose gold run is in the trajectories' test split "
                       "(methods built from the training runs are scored there only)"),
        Column("graph_weight", "DOUBLE", null=True, check="graph_weight BETWEEN 0 AND 1",
               comment="w of the score (1 - w) cos(q, x) + w cos(q, x'): 0 for embedding, 1 for +TGR rows; "
                       "'(cv)' rows (tasks/retrieval/fusion.py): the w cross-validation chooses on all queries"),
        Column("graph_weight_folds", "DOUBLE[]", null=True,
               comment="'(cv)' rows: the w chosen on the other folds, per fold (each fold's queries are ranked with it)"),
    ), primary_key=("dataset", "method", "k", "query_split")),

    # ToolNet ---------------------------------------------------------------------------------------
    Table("trajectories", "ToolNet. One row per run read (tasks/toolsets/trajectories.py): a benchmark's gold call order "
          "(source 'gold', run_id = query_id) or a run of a user file ('user'); the seeded split; for the test "
          "runs, the iteration at which the run updated the dynamic weights.", (
        Column("dataset", "VARCHAR"),
        Column("origin", "VARCHAR", comment="the file read"),
        Column("run_id", "VARCHAR"),
        Column("line", "BIGINT", comment="line in origin"),
        Column("source", "VARCHAR", check="source IN ('gold', 'user')"),
        Column("query_id", "VARCHAR", null=True),
        Column("success", "BOOLEAN", comment="Eq. 5 counts successful training runs only"),
        Column("split", "VARCHAR", check="split IN ('train', 'validation', 'test')"),
        Column("tools", "VARCHAR[]", check="len(tools) > 0"),
        Column("given_scores", "JSON", null=True, comment="evaluator scores that came with the run"),
        Column("stream_iteration", "BIGINT", null=True, comment="test runs: iteration n of the dynamic update"),
    ), primary_key=("dataset", "origin", "run_id")),

    Table("trajectory_rejections", "Runs that were well-formed but unusable (unknown tools, empty, reserved ids), "
          "by file and line.", (
        Column("dataset", "VARCHAR"),
        Column("origin", "VARCHAR"),
        Column("line", "BIGINT"),
        Column("run_id", "VARCHAR", null=True),
        Column("reason", "VARCHAR"),
    ), primary_key=("dataset", "origin", "line")),

    Table("transition_builds", "How the transition graph and its dynamic weights were made, one row per dataset.", (
        Column("dataset", "VARCHAR"),
        Column("seed", "BIGINT", comment="of the split and the stream order"),
        Column("split_fractions", "DOUBLE[]", comment="train, validation, test"),
        Column("runs_train", "BIGINT"),
        Column("runs_validation", "BIGINT"),
        Column("runs_test", "BIGINT"),
        Column("failed_train_runs", "BIGINT", comment="training runs with success = false, not in Eq. 5"),
        Column("alpha", "DOUBLE", comment="Eq. 8 (the paper gives none: chosen on validation)"),
        Column("beta", "DOUBLE", check="beta BETWEEN 0 AND 1", comment="Eq. 6"),
        Column("evaluator", "VARCHAR"),
        Column("rule_score", "BIGINT"),
        Column("chosen_on", "VARCHAR", comment="how alpha and beta were chosen"),
        Column("sweep_json", "JSON", null=True,
               comment="every (alpha, beta) tried with its validation hit@1/@3"),
        Column("stream_iterations", "BIGINT", comment="test runs that updated the weights"),
    ), primary_key=("dataset",)),

    Table("transition_weight_versions", "Versioned dynamic weights (Eqs. 6-8): iteration 0 is the static graph "
          "(every transition edge); iteration n holds only the edges whose weight changed with the n-th run of "
          "the test stream. The weight of an edge at iteration n is its row with the largest iteration <= n "
          "(macro transition_weights_at).", (
        Column("dataset", "VARCHAR"),
        Column("iteration", "BIGINT", check="iteration >= 0"),
        Column("prerequisite", "VARCHAR"),
        Column("dependent", "VARCHAR"),
        Column("weight", "DOUBLE", check="weight BETWEEN 0 AND 1"),
    ), primary_key=("dataset", "iteration", "prerequisite", "dependent")),

    Table("transition_scores", "The evaluator's score of each tool a test-stream run called, and the accumulated "
          "s_i^(n) (Eq. 7).", (
        Column("dataset", "VARCHAR"),
        Column("iteration", "BIGINT", check="iteration >= 1"),
        Column("run_id", "VARCHAR"),
        Column("tool_id", "VARCHAR"),
        Column("score", "BIGINT", check="score BETWEEN -3 AND 3"),
        Column("accumulated", "DOUBLE"),
    ), primary_key=("dataset", "iteration", "tool_id")),

    Table("next_tool_metrics", "Next-tool hit@k on held-out trajectories (eval-retrieval).", (
        Column("dataset", "VARCHAR"),
        Column("method", "VARCHAR"),
        Column("k", "INTEGER"),
        Column("hit_rate", "DOUBLE", check="hit_rate BETWEEN 0 AND 1"),
        Column("n_steps", "BIGINT"),
        Column("query_split", "VARCHAR"),
        Column("evaluated_at", "TIMESTAMP"),
    ), primary_key=("dataset", "method", "k", "query_split")),

    Table("edge_lineage", "Lineage: what produced the edges of each (dataset, source); every edge and every "
          "parameter edge joins to one row (build checks 'edge sources without a lineage row', 'parameter edge "
          "sources without a lineage row').", (
        Column("dataset", "VARCHAR"),
        Column("source", "VARCHAR"),
        Column("producer", "VARCHAR", comment="what made them, in words"),
        Column("input_files", "VARCHAR[]", null=True, comment="edge files, trajectories files"),
        Column("input_sha256", "VARCHAR[]", null=True, comment="one per input file"),
        Column("checkpoint", "VARCHAR", null=True, comment="discriminator checkpoint folder"),
        Column("checkpoint_sha256", "VARCHAR", null=True, comment="of its files (sorted names and contents)"),
        Column("tdi_manifest", "VARCHAR", null=True, comment="manifest.json of the TDI data it was pretrained on"),
        Column("tdi_manifest_sha256", "VARCHAR", null=True),
        Column("tdi_manifest_newer_than_checkpoint", "BOOLEAN", null=True,
               comment="the TDI was rewritten after training"),
        Column("threshold", "DOUBLE", null=True, comment="discriminator edge threshold (NULL: argmax)"),
        Column("params_json", "JSON", null=True, comment="the producer's settings"),
        Column("flow_run_id", "VARCHAR", null=True, comment="the Prefect run of build-graph"),
        Column("built_at", "TIMESTAMP"),
    ), primary_key=("dataset", "source")),
)
