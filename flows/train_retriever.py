"""Prefect flow ``train-retriever``: the dependency retriever, a bi-encoder trained contrastively so that each
consumer input ("name: description (input of tool)") finds the producers whose output it takes; build-graph's
``retrieval`` pruning rule uses it (``--retrieval-encoder``) to choose the pairs the discriminator scores.

    python -m flows.train_retriever                       # make train-retriever
    python -m flows.train_retriever --tdi none --toolset nestools --max-steps 50   # tool sets only, a quick run

1. Examples: each dependent row of a mined TDI v2 dataset (``--tdi``; its ``consumer_param``) and each gold
   edge of the train groups of the ``--toolset`` sets (parameter edges; tool edges where the consumer
   declares no inputs), each with a same-group tool it does not take as a hard negative
   (tasks/training/retriever.py). The sets' groups are split train / validation / test, seeded.
2. Training: in-batch contrastive loss; the checkpoint kept is the one with the best candidate recall at k=3 on
   the validation groups, ties broken by the recall curve (k=1..10; the untrained encoder counts as step 0, so
   training never makes it worse).
3. Report: candidate recall of gold edges and the share of ordered same-group pairs kept, per k, on the
   test groups of the ``--toolset`` sets and on the whole ``--heldout`` sets, untrained beside trained
   (``metrics.json``, ``report.md``).
"""
from __future__ import annotations

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from tasks.common.cli import checking_inputs, parse_config
from tasks.training.retriever_config import RetrieverConfig

def parse_args(argv: list[str] | None = None) -> RetrieverConfig:
    return parse_config(RetrieverConfig, argv, PROG, __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, torch) are paid for
PROG = "python -m flows.train_retriever"
CLI = FlowCLI.start(__name__, checking_inputs(parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow  # noqa: E402

from tasks.graph.retriever_run import run_retriever  # noqa: E402


@flow(name="train-retriever", log_prints=True)
def train_retriever_flow(cfg: RetrieverConfig | None = None) -> dict:
    """The run (tasks/graph/retriever_run.py): examples and group split, training with the best validation
    checkpoint, the parameter head (and with --reranker the reranker), the report."""
    return run_retriever(cfg or RetrieverConfig())


if __name__ == "__main__":
    CLI.run(train_retriever_flow)
