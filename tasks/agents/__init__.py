"""build-tdi's three agents: their prompts, each agent's requests and how its answers become docs,
dependent pairs or rejections, and the streaming chunk pipeline that runs them over the records.

May import: schemas/, models/, tasks.common, tasks.sources, tasks.dataset, tasks.llm.
"""
