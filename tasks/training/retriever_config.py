"""The dependency retriever's one config surface (train-retriever's Prefect parameter and command line, and what
train-discriminator's parameter level passes): light on purpose, so ``--help`` and usage errors cost no Prefect or
torch import."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from models.discriminator_defaults import POOLINGS, check_pooling, check_train_precision
from models.encoder_path import OFFLINE_DEFAULT
from tasks.common.cli import Flag, Help

DEFAULT_TDI = "artifacts/tdi/tdi-mined"
DEFAULT_BENCHMARKS = "../shared/data/benchmarks"
# (k, share cap) of the retrieval rule in the report: top-k per input, then (share) the best-scored pairs up to
# that share of each group's ordered pairs; 5% is the budget
REPORT_SETTINGS = ((1, None), (3, None), (5, None), (10, None), (10, 0.05), (10, 0.03))
VALIDATION_K = 3  # the k of build-graph's default --retrieval-k: the checkpoint is chosen there
VALIDATION_TIE_KS = tuple(range(1, 11))  # its ties are broken by the mean recall at these k (the recall curve)

# the parameter level's group split (train-discriminator's passes these defaults), so its test groups are known to
# the runs that must leave them out (train-discriminator --finetune-extra)
GROUP_SPLIT = (0.6, 0.2, 0.2)
GROUP_SPLIT_SEED = 0


@dataclass
class RetrieverConfig:
    """The one config surface of train-retriever (Prefect parameter and, generated from it, the command line)."""

    tdi: Annotated[str | None, Help("mined TDI v2 dataset folder (rows with consumer_param); none: tool sets only")] = \
        DEFAULT_TDI
    toolsets: Annotated[tuple[str, ...], Help(
        "tool sets with gold edges to train on (their train groups), validate on and test on (their held-out "
        "groups); repeat or comma-separate")] = field(default=("nestools", "ultratool"),
                                                       metadata={"cli": Flag("toolset", repeat=True)})
    heldout: Annotated[tuple[str, ...], Help("tool sets measured whole, never trained on")] = ("apibank", "tmdb")
    benchmarks_root: Annotated[str, Help("where tool-set names are looked up")] = DEFAULT_BENCHMARKS
    output: Annotated[str, Help("run folder: best/ (the retriever), metrics.json, report.md")] = \
        "artifacts/retriever/dependency-retriever"
    split_fractions: Annotated[tuple[float, float, float], Help(
        "train,validation,test shares of each --toolset set's groups")] = field(
        default=GROUP_SPLIT, metadata={"cli": Flag("split")})
    split_seed: Annotated[int, Help("seed of the group split")] = GROUP_SPLIT_SEED
    base_model: Annotated[str, Help("encoder to start from (offline-minilm, a hub id or a folder)")] = OFFLINE_DEFAULT
    num_layers: Annotated[int | None, Help("keep the first N transformer layers (none: all)")] = None
    epochs: Annotated[float, Help("passes over the training examples")] = 1.0
    max_steps: Annotated[int | None, Help("stop after N steps (none: all epochs)")] = None
    batch_size: Annotated[int, Help("queries per step (with their positives and hard negatives)")] = 32
    learning_rate: Annotated[float, Help("peak AdamW learning rate")] = 5e-5
    max_length: Annotated[int, Help("word pieces per text, in training and (recorded in the folder) at use")] = 64
    name_dropout: Annotated[float, Help("share of training queries shown by description only (no parameter name)")] = 0.3
    output_dropout: Annotated[float, Help(
        "share of tool-set examples whose producers (positive and negative) are shown without their declared "
        "outputs, so that ranking holds where a tool set documents none")] = 0.3
    max_tdi_examples: Annotated[int | None, Help(
        "seeded cap on mined examples (none: all); more mined rows pulled validation recall down (bench/RESULTS.md)")] = 1500
    evals: Annotated[int, Help("validations (best-checkpoint saves) over the run")] = 4
    seed: Annotated[int, Help("seed of sampling, shuffling and negatives")] = 42
    threads: Annotated[int | None, Help("torch CPU threads (none: torch's default)")] = None
    train_precision: Annotated[str, Help(
        "the training loops' arithmetic (both run on the CPU): auto (bf16 mixed precision on CPUs with bf16 matrix "
        "units, AMX tiles or AVX512-BF16, where a retriever step takes 0.6x to 0.7x the time and a reranker step "
        "0.75x; fp32 elsewhere), fp32 or bf16; validation, the parameter head and every score stay fp32")] = "auto"
    reranker: Annotated[bool, Help(
        "also train the parameter reranker: a cross-encoder over the retriever's candidate units (top-k producers "
        "of each input, or a name-rule match), stacked with the parameter head; build-graph --param-discriminator "
        "uses it from <run>/best/param_reranker")] = False
    reranker_layers: Annotated[int, Help("transformer layers of the reranker, from the retriever's")] = 6
    reranker_epochs: Annotated[int, Help("reranker passes over the positives (negatives drawn afresh each)")] = 2
    reranker_k: Annotated[int, Help("reranker candidates: each input's top-k producers by the retriever")] = 5
    reranker_max_steps: Annotated[int | None, Help("stop the reranker after N steps (none: all epochs)")] = None
    reranker_loss: Annotated[str, Help(
        "reranker training loss: listwise (per consumer input, a softmax over its candidates and 'none') or "
        "pointwise (balanced binary cross-entropy per unit)")] = "listwise"
    reranker_pooling: Annotated[str, Help(
        "what the reranker classifies: mean (of the pair's tokens, as the retriever it starts from was trained), "
        "cls (BERT's pooler over [CLS], as earlier rerankers were trained) or auto (mean for a BERT-family "
        "retriever)")] = field(default="auto", metadata={"choices": POOLINGS})
    checkpoint: Annotated[str | None, Help(
        "a trained retriever folder (<run>/best): measure it on the test groups and sets, train nothing")] = None

    def __post_init__(self) -> None:
        if not self.toolsets and not self.tdi:
            raise ValueError("--toolset and --tdi: name at least one source of training examples")
        fractions = self.split_fractions
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9 or fractions[1] <= 0:
            raise ValueError(f"--split {','.join(map(str, fractions))}: three non-negative fractions summing to 1, "
                             "validation above 0 (it chooses the checkpoint)")
        for flag, value in (("--num-layers", self.num_layers), ("--max-steps", self.max_steps),
                            ("--batch-size", self.batch_size), ("--max-length", self.max_length),
                            ("--max-tdi-examples", self.max_tdi_examples), ("--evals", self.evals),
                            ("--threads", self.threads), ("--reranker-layers", self.reranker_layers),
                            ("--reranker-epochs", self.reranker_epochs), ("--reranker-k", self.reranker_k),
                            ("--reranker-max-steps", self.reranker_max_steps)):
            if value is not None and value < 1:
                raise ValueError(f"{flag} {value}: must be at least 1")
        check_train_precision(self.train_precision)
        if self.reranker_loss not in ("listwise", "pointwise"):
            raise ValueError(f"--reranker-loss {self.reranker_loss}: listwise or pointwise")
        check_pooling(self.reranker_pooling, "--reranker-pooling")
        if not 0.0 <= self.name_dropout <= 1.0:
            raise ValueError(f"--name-dropout {self.name_dropout}: must lie in [0, 1]")
        if not 0.0 <= self.output_dropout <= 1.0:
            raise ValueError(f"--output-dropout {self.output_dropout}: must lie in [0, 1]")
        if self.epochs <= 0 or self.learning_rate <= 0:
            raise ValueError("--epochs and --learning-rate must be positive")

    def check_inputs(self) -> None:
        """Every folder the run reads exists (called first by the flow, before any work)."""
        if self.checkpoint and not Path(self.checkpoint, "config.json").is_file():
            raise ValueError(f"--checkpoint {self.checkpoint}: no config.json there (a train-retriever <run>/best)")
        for name in (*self.toolsets, *self.heldout):
            if not (Path(name).is_dir() or (Path(self.benchmarks_root) / name).is_dir()):
                raise ValueError(f"tool set {name!r}: not a folder, nor a benchmark under {self.benchmarks_root} "
                                 "(../shared/data/README.md says where each comes from)")
        if not self.checkpoint and self.tdi and not (Path(self.tdi) / "shards").is_dir():
            raise ValueError(f"--tdi {self.tdi}: no shards/ folder there (make mine-tdi, or --tdi none)")

    def trains_in_bf16(self) -> bool:
        from tasks.training.precision import train_in_bf16

        return train_in_bf16(self.train_precision, cuda=False)

    def arguments(self):
        from tasks.training.retriever import RetrieverArguments

        return RetrieverArguments(self.base_model, self.num_layers, self.epochs, self.batch_size, self.learning_rate,
                                  max_length=self.max_length, max_steps=self.max_steps or -1, evals=self.evals,
                                  seed=self.seed, bf16=self.trains_in_bf16())


    def reranker_arguments(self):
        from tasks.training.param_reranker import RerankerArguments

        return RerankerArguments(layers=self.reranker_layers, epochs=self.reranker_epochs, candidate_k=self.reranker_k,
                                 seed=self.seed, max_steps=self.reranker_max_steps or -1, loss=self.reranker_loss,
                                 pooling=self.reranker_pooling, bf16=self.trains_in_bf16())
