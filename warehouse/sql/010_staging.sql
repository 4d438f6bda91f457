-- Layer 1, staging: typed TEMP views over the Parquet files the build wrote, one folder per table
-- ({inputs}/<table>/*.parquet: the datasets being built plus rows carried over from the previous
-- warehouse). Temporary on purpose: the finished warehouse file holds core tables and marts only,
-- so it is self-contained and can be copied or opened read-only anywhere.
-- Placeholders filled by warehouse/build.py: {inputs} (folder), {dim} (embedding size).

CREATE OR REPLACE TEMP VIEW stg_datasets AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(embed_style AS VARCHAR) AS embed_style,
       CAST(encoder AS VARCHAR) AS encoder,
       CAST(discriminator AS VARCHAR) AS discriminator,
       CAST(built_at AS TIMESTAMP) AS built_at
FROM read_parquet('{inputs}/datasets/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_tools AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(tool_id AS VARCHAR) AS tool_id,
       CAST(name AS VARCHAR) AS name,
       CAST(tool_group AS VARCHAR) AS tool_group,
       CAST(doc_json AS JSON) AS doc_json,
       CAST(embed_text AS VARCHAR) AS embed_text
FROM read_parquet('{inputs}/tools/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_queries AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(query_id AS VARCHAR) AS query_id,
       CAST(query_text AS VARCHAR) AS query_text,
       CAST(query_group AS VARCHAR) AS query_group
FROM read_parquet('{inputs}/queries/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_query_gold_tools AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(query_id AS VARCHAR) AS query_id,
       CAST(tool_id AS VARCHAR) AS tool_id
FROM read_parquet('{inputs}/query_gold_tools/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_edges AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(tool_group AS VARCHAR) AS tool_group,
       CAST(dependent AS VARCHAR) AS dependent,
       CAST(prerequisite AS VARCHAR) AS prerequisite,
       CAST(prob AS DOUBLE) AS prob,
       CAST(predicted_class AS TINYINT) AS predicted_class,
       CAST(source AS VARCHAR) AS source,
       CAST(p_direction AS DOUBLE) AS p_direction,
       CAST(matched_params AS VARCHAR[]) AS matched_params,
       CAST(fused_from AS VARCHAR[]) AS fused_from,
       CAST(weight AS DOUBLE) AS weight,
       CAST(n_transitions AS BIGINT) AS n_transitions
FROM read_parquet('{inputs}/edges/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_scored_pairs AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(tool_group AS VARCHAR) AS tool_group,
       CAST(tool_a AS VARCHAR) AS tool_a,
       CAST(tool_b AS VARCHAR) AS tool_b,
       CAST(p_a_depends_on_b AS DOUBLE) AS p_a_depends_on_b,
       CAST(p_no_dependency AS DOUBLE) AS p_no_dependency,
       CAST(p_b_depends_on_a AS DOUBLE) AS p_b_depends_on_a,
       CAST(predicted_class AS TINYINT) AS predicted_class
FROM read_parquet('{inputs}/scored_pairs/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_candidate_pruning AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(strategy AS VARCHAR) AS strategy,
       CAST(pairs_in_groups AS BIGINT) AS pairs_in_groups,
       CAST(pairs_kept AS BIGINT) AS pairs_kept,
       CAST(known_edges AS BIGINT) AS known_edges,
       CAST(known_edges_in_groups AS BIGINT) AS known_edges_in_groups,
       CAST(known_edges_kept AS BIGINT) AS known_edges_kept,
       CAST(known_edge_recall AS DOUBLE) AS known_edge_recall
FROM read_parquet('{inputs}/candidate_pruning/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_edge_calibration AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(discriminator AS VARCHAR) AS discriminator,
       CAST(decision_rule AS VARCHAR) AS decision_rule,
       CAST(threshold AS DOUBLE) AS threshold,
       CAST(criterion AS VARCHAR) AS criterion,
       CAST(threshold_source AS VARCHAR) AS threshold_source,
       CAST(both_orders AS BOOLEAN) AS both_orders,
       CAST(min_prob AS DOUBLE) AS min_prob,
       CAST(calibration_json AS JSON) AS calibration_json,
       CAST(pairs_scored AS BIGINT) AS pairs_scored,
       CAST(edges_kept AS BIGINT) AS edges_kept
FROM read_parquet('{inputs}/edge_calibration/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_tool_embeddings AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(tool_id AS VARCHAR) AS tool_id,
       CAST(kind AS VARCHAR) AS kind,
       CAST(embedding AS FLOAT[{dim}]) AS embedding
FROM read_parquet('{inputs}/tool_embeddings/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_query_embeddings AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(query_id AS VARCHAR) AS query_id,
       CAST(embedding AS FLOAT[{dim}]) AS embedding
FROM read_parquet('{inputs}/query_embeddings/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_retrieval_metrics AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(method AS VARCHAR) AS method,
       CAST(k AS INTEGER) AS k,
       CAST(recall AS DOUBLE) AS recall,
       CAST(ndcg AS DOUBLE) AS ndcg,
       CAST(pass_rate AS DOUBLE) AS pass_rate,
       CAST(n_queries AS INTEGER) AS n_queries,
       CAST(evaluated_at AS TIMESTAMP) AS evaluated_at,
       CAST(coalesce(query_split, 'all') AS VARCHAR) AS query_split
FROM read_parquet('{inputs}/retrieval_metrics/*.parquet', union_by_name = true);

-- ToolNet: call trajectories, the transition build, versioned dynamic weights, evaluator scores
CREATE OR REPLACE TEMP VIEW stg_trajectories AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(origin AS VARCHAR) AS origin,
       CAST(run_id AS VARCHAR) AS run_id,
       CAST(line AS BIGINT) AS line,
       CAST(source AS VARCHAR) AS source,
       CAST(query_id AS VARCHAR) AS query_id,
       CAST(success AS BOOLEAN) AS success,
       CAST(split AS VARCHAR) AS split,
       CAST(tools AS VARCHAR[]) AS tools,
       CAST(given_scores AS JSON) AS given_scores,
       CAST(stream_iteration AS BIGINT) AS stream_iteration
FROM read_parquet('{inputs}/trajectories/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_trajectory_rejections AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(origin AS VARCHAR) AS origin,
       CAST(line AS BIGINT) AS line,
       CAST(run_id AS VARCHAR) AS run_id,
       CAST(reason AS VARCHAR) AS reason
FROM read_parquet('{inputs}/trajectory_rejections/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_transition_builds AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(seed AS BIGINT) AS seed,
       CAST(split_fractions AS DOUBLE[]) AS split_fractions,
       CAST(runs_train AS BIGINT) AS runs_train,
       CAST(runs_validation AS BIGINT) AS runs_validation,
       CAST(runs_test AS BIGINT) AS runs_test,
       CAST(failed_train_runs AS BIGINT) AS failed_train_runs,
       CAST(alpha AS DOUBLE) AS alpha,
       CAST(beta AS DOUBLE) AS beta,
       CAST(evaluator AS VARCHAR) AS evaluator,
       CAST(rule_score AS BIGINT) AS rule_score,
       CAST(chosen_on AS VARCHAR) AS chosen_on,
       CAST(sweep_json AS JSON) AS sweep_json,
       CAST(stream_iterations AS BIGINT) AS stream_iterations
FROM read_parquet('{inputs}/transition_builds/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_transition_weight_versions AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(iteration AS BIGINT) AS iteration,
       CAST(prerequisite AS VARCHAR) AS prerequisite,
       CAST(dependent AS VARCHAR) AS dependent,
       CAST(weight AS DOUBLE) AS weight
FROM read_parquet('{inputs}/transition_weight_versions/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_transition_scores AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(iteration AS BIGINT) AS iteration,
       CAST(run_id AS VARCHAR) AS run_id,
       CAST(tool_id AS VARCHAR) AS tool_id,
       CAST(score AS BIGINT) AS score,
       CAST(accumulated AS DOUBLE) AS accumulated
FROM read_parquet('{inputs}/transition_scores/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_next_tool_metrics AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(method AS VARCHAR) AS method,
       CAST(k AS INTEGER) AS k,
       CAST(hit_rate AS DOUBLE) AS hit_rate,
       CAST(n_steps AS BIGINT) AS n_steps,
       CAST(query_split AS VARCHAR) AS query_split,
       CAST(evaluated_at AS TIMESTAMP) AS evaluated_at
FROM read_parquet('{inputs}/next_tool_metrics/*.parquet', union_by_name = true);

CREATE OR REPLACE TEMP VIEW stg_edge_lineage AS
SELECT CAST(dataset AS VARCHAR) AS dataset,
       CAST(source AS VARCHAR) AS source,
       CAST(producer AS VARCHAR) AS producer,
       CAST(input_files AS VARCHAR[]) AS input_files,
       CAST(input_sha256 AS VARCHAR[]) AS input_sha256,
       CAST(checkpoint AS VARCHAR) AS checkpoint,
       CAST(checkpoint_sha256 AS VARCHAR) AS checkpoint_sha256,
       CAST(tdi_manifest AS VARCHAR) AS tdi_manifest,
       CAST(tdi_manifest_sha256 AS VARCHAR) AS tdi_manifest_sha256,
       CAST(tdi_manifest_newer_than_checkpoint AS BOOLEAN) AS tdi_manifest_newer_than_checkpoint,
       CAST(threshold AS DOUBLE) AS threshold,
       CAST(params_json AS JSON) AS params_json,
       CAST(flow_run_id AS VARCHAR) AS flow_run_id,
       CAST(built_at AS TIMESTAMP) AS built_at
FROM read_parquet('{inputs}/edge_lineage/*.parquet', union_by_name = true);
