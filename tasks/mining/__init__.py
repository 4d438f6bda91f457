"""mine-tdi, no LLM: API docs from signatures and docstrings, producer -> consumer data flow in real
Python code, the mined dataset's classes and hard negatives, and the optional LLM review of a sample;
``mix``: the standard library's mined pairs build-tdi adds (``--mined-per-class``).

May import: schemas/, tasks.common, tasks.sources, tasks.dataset, tasks.toolsets; tasks.llm and
tasks.agents only from ``review`` (the optional LLM pass).
"""
