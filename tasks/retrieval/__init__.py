"""Tool retrieval: the parameter-free GCN step of TGR, BM25 / TF-IDF / embedding baselines, cosine
top-k, R/NDCG/Pass@k, and ToolRerank after any first-stage retriever.

May import: schemas/, models/, tasks.common, tasks.toolsets.
"""
