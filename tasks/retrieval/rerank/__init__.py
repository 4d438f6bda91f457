"""ToolRerank (Zheng et al., LREC-COLING 2024, arXiv 2403.06551) after any first-stage retriever.

Pipeline per query (docs/retrieval.md):

1. first stage (BM25, TF-IDF, embeddings, embeddings + TGR, ...): a ranked candidate list C;
2. **adaptive truncation**: an API of a *seen* tool is kept down to rank ``m_s``, an API of an
   *unseen* tool down to rank ``m_u`` (``adaptive_truncation``); without it, a fixed cut ``m``;
3. the **pair model** scores every kept (query, API) pair in [0, 1] and sorts them: R;
4. a **classifier** (logistic regression on the query embedding) says single- or multi-tool;
5. **hierarchy-aware reranking**: Alg. 1 for single-tool queries (``single_tool_rerank``: the APIs of
   the tools of r_1 and of every API scoring above ``tau_s`` lead; the unseen ones among those tools
   bring all their library APIs along), Alg. 2 for multi-tool queries (``multi_tool_rerank``: in each
   group of same-tool or near-duplicate (doc cosine > ``tau_m``) APIs only the ``n`` best lead).

One module per job: ``hierarchy`` (the tool of each API), ``algorithms`` (steps 2 and 5 on a list),
``library`` (a data set's tools), ``pair_model`` (step 3 and its training pairs), ``classifier``
(step 4), ``split`` (the seeded split into seen and held-out tools), ``query`` (one query's final list;
a trained ``ToolReranker``), ``experiment`` (training, the grid search on validation, the test rows)
and ``tables`` (the Markdown report).

May import: schemas/, models/, tasks.common, tasks.toolsets, and tasks.retrieval's other modules.
"""
