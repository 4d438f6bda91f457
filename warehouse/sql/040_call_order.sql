-- Call-order statistics of the trajectories (docs/preconditions.md), the counts of
-- tasks/toolsets/call_order.py order_statistics: for each ordered pair (tool_a, tool_b) of distinct tools
-- that occur in one successful run, by each tool's first occurrence in the run: runs with tool_a first
-- (a_before_b), with tool_b first (b_before_a), with both (n_both), and runs in which tool_b directly
-- follows tool_a at least once (n_adjacent). One row per split and one summed over the splits (split '*'):
--   SELECT * FROM call_order_pairs WHERE dataset = 'apibank' AND split = '*' AND consistency = 1 ORDER BY n_both DESC;
-- Failed runs are left out, as Eq. 5 leaves them out: their order says what an agent tried.
CREATE VIEW call_order_pairs AS
WITH first_steps AS (
    SELECT dataset, origin, run_id, split, tool_id, min(step) AS first_step
    FROM trajectory_steps
    WHERE success
    GROUP BY dataset, origin, run_id, split, tool_id
),
adjacent AS (
    SELECT DISTINCT s1.dataset, s1.origin, s1.run_id, s1.tool_id AS tool_a, s2.tool_id AS tool_b
    FROM trajectory_steps s1
    JOIN trajectory_steps s2 ON s2.dataset = s1.dataset AND s2.origin = s1.origin AND s2.run_id = s1.run_id
                            AND s2.step = s1.step + 1
    WHERE s1.success AND s1.tool_id <> s2.tool_id
),
run_pairs AS (
    SELECT a.dataset, a.origin, a.run_id, a.split, a.tool_id AS tool_a, b.tool_id AS tool_b,
           a.first_step < b.first_step AS a_first, j.run_id IS NOT NULL AS is_adjacent
    FROM first_steps a
    JOIN first_steps b ON b.dataset = a.dataset AND b.origin = a.origin AND b.run_id = a.run_id
                      AND b.tool_id <> a.tool_id
    LEFT JOIN adjacent j ON j.dataset = a.dataset AND j.origin = a.origin AND j.run_id = a.run_id
                        AND j.tool_a = a.tool_id AND j.tool_b = b.tool_id
)
SELECT dataset, CASE WHEN grouping(split) = 1 THEN '*' ELSE split END AS split, tool_a, tool_b,
       count(*) FILTER (WHERE a_first) AS a_before_b,
       count(*) FILTER (WHERE NOT a_first) AS b_before_a,
       count(*) AS n_both,
       count(*) FILTER (WHERE is_adjacent) AS n_adjacent,
       count(*) FILTER (WHERE a_first) / count(*) AS consistency
FROM run_pairs
GROUP BY GROUPING SETS ((dataset, split, tool_a, tool_b), (dataset, tool_a, tool_b));
