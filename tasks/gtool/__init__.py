"""GTool on CPU: missing-dependency prediction over the tool graph (link prediction) and the
request-specific tool graph for tool selection.

May import: schemas/, models/, tasks.common, tasks.toolsets, tasks.retrieval.
"""
