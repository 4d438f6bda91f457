"""ToolNet: the weighted tool graph from trajectories (static transitions, the dynamic update) and its
evaluator, by rule or through the LLM layer.

May import: schemas/, models/, tasks.common, tasks.llm, tasks.toolsets, tasks.retrieval.
"""
