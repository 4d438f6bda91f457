"""Tool retrieval: the parameter-free GCN step of TGR (``gcn``), BM25 / TF-IDF (``lexical``) and
embedding baselines, cosine top-k (``ranking``), R/NDCG/Pass@k (``metrics``), what the encoder sees of
a tool (``tool_text``), ToolRerank after any first-stage retriever (``rerank``), and what evaluation
reads of a built warehouse (``inputs``).

May import: schemas/, models/, tasks.common, warehouse/ (``inputs`` reads it), tasks.toolsets.
"""
