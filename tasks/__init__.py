"""The pipeline's steps (pure functions and Prefect tasks), one package per stage, composed by flows/.

Layer order, lowest first (a package imports only packages before it; docs/architecture.md, checked
by tests/test_layers.py): common, sources, dataset, llm, agents, toolsets, mining, training, graph,
retrieval, toolnet, gtool. Below all of tasks/: schemas/ and models/; warehouse/ sits between
tasks.common and the stage packages.
"""
