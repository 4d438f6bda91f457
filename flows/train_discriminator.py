r"""Prefect flow ``train-discriminator``: pretrain (Eq. 1) on TDI shards, finetune (Eq. 2), calibrate, test.

    python -m flows.train_discriminator --pretrain-data artifacts/tdi/tdi-mined --finetune ultratool,tmdb \
        --test apibank --base-model offline-minilm --output artifacts/discriminator/minilm
    python -m flows.train_discriminator --checkpoint artifacts/discriminator/minilm/best --test apibank,my/toolset \
        --output artifacts/discriminator/minilm-eval          # evaluate only: no training

1. Pretrain on TDI pairs (both orders; plain cross-entropy) with the HF ``Trainer``; the checkpoint of the lowest
   validation loss (a checkpoint still at the class prior is said in the log and metrics.json).
2. Finetune on real tool sets (category-averaged loss, Eq. 2) on a grouped 80/20 split; the best
   checkpoint by validation dependency F1 at its best cut.
3. Calibrate: the cut on p(dependency) that the graph step uses, chosen on validation
   (symmetrized probabilities), stored as ``best/calibration.json``; with the kind head (default) also the
   cut on its p(precondition), chosen on the validation pairs of known kind.
4. The parameter level (``--parameter-scorer``, default): the train-retriever run, inside this flow, trains the
   dependency retriever and its parameter head into ``<output>/parameter_scorer``; its best folder goes into the
   checkpoint as ``parameter_scorer/``, which scores each input of a consumer (two levels, docs/discriminator.md).
5. Test: argmax and calibrated P/R/F1, direction accuracy, the two-level row, and the parameter-match rule on
   the same pairs, in ``metrics.json`` (strict JSON), a printed table and the model card; beside metrics.json
   ``precision_recall.png``: the dependency precision-recall curve per evaluation set, the name rules as points.
The new checkpoint is completed in ``<output>/.best.new`` (weights, tokenizer, calibration.json,
parameter_scorer/, metrics.json, card) and only then swapped in as ``best/`` in one step (``finish_checkpoint``): a
kill -9 at any point leaves ``best/`` the previous complete checkpoint or the new one.
See docs/discriminator.md.
"""
from __future__ import annotations

import functools
import json
import random
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from models.discriminator_defaults import DEFAULT_MAX_LENGTH, POOLED, POOLINGS, check_pooling, check_train_precision
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY
from schemas.toolset import ToolSet
from tasks.graph.checks import DEFAULT_CHECK_PARTNERS, PreconditionScope
from tasks.graph.lifecycle import example_orders, orient
from tasks.toolsets.readers import BENCHMARKS, load_benchmark, read_toolset_dir
from tasks.training.doc_views import EXTRA_VIEWS, METHOD_DOCS, drop_parameters, shown_as, trained_method_docs
from tasks.training.examples import (
    PairExample,
    build_pairs,
    grouped_split,
    held_out_pairs,
    label_counts,
    load_tdi_examples,
    natural_none_ratio,
    none_weights,
    sample_none,
    training_pairs,
    with_both_orders,
)
from tasks.training.metrics import (CALIBRATION_CRITERIA, at_prior, choose_kind_cut, choose_threshold,
                                    direction_accuracy, evaluate_with_rules, format_beyond_rule, format_comparison,
                                    format_kind_table)
from tasks.training.strict_json import write_json
from tasks.common.atomic import replace_dir, restore_dir
from tasks.common.cli import Help, checking_inputs, parse_config

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCHMARKS = REPO_ROOT.parent / "shared" / "data" / "benchmarks"
PAPER_TABLE_3 = {"precision": 0.893, "recall": 0.760, "f1": 0.817}
STAGED_BEST = ".best.new"  # where a run completes its checkpoint before swapping it in as best/
CALIBRATE_ON = ("finetune", "tdi", "both")  # validation pairs the threshold is chosen on
# what --select-metric may name: the keys of tasks/training/metrics.py's compute_metrics, and the validation loss
SELECT_METRICS = ("dependency_f1_calibrated", "dependency_f1", "macro_f1", "direction_accuracy", "loss")


@dataclass
class TrainDiscriminatorConfig:
    """The one config surface of train-discriminator: the flow's parameter (Prefect UI, prefect.yaml) and,
    generated from it, the command line (tasks/common/cli.py). Every default and every check is here."""

    output: Annotated[Path, Help("run folder")] = Path("artifacts/discriminator/default")
    checkpoint: Annotated[Path | None, Help(
        "evaluate only: score the --test tool sets with this checkpoint (its calibration.json), no training")] = None
    pretrain_data: Annotated[str, Help(
        "TDI dataset folder; 'auto': the newest published one under artifacts/tdi (by manifest); 'none': skip")] = "auto"
    finetune: Annotated[tuple[str, ...], Help(
        "benchmark names or tool set folders, comma separated; empty: no finetuning (calibrate on the TDI validation "
        "split)")] = ("ultratool", "tmdb")
    test: Annotated[tuple[str, ...], Help("benchmark names or tool set folders, comma separated")] = ("apibank",)
    benchmarks_root: Annotated[Path, Help("where benchmark names are looked up")] = DEFAULT_BENCHMARKS
    base_model: Annotated[str, Help("offline-minilm, a hub id or a folder")] = "offline-minilm"
    # Defaults fit the whole default run (mine + train + test) in about 15 minutes on 2 CPU cores;
    # on a GPU pass --encoder-layers none --pretrain-max-pairs none --max-length 160.
    encoder_layers: Annotated[int | None, Help(
        "keep only the first N layers of the base model (none: all); 3 of MiniLM's 6 halves CPU time")] = 3
    pooling: Annotated[str, Help(
        "what a new discriminator classifies: auto (as the base encoder was trained: the mean of the tokens for "
        "all-MiniLM-L6-v2, [CLS] for others), mean (BERT-family bases) or cls (the base's own head); a checkpoint "
        "keeps its own. On MiniLM, [CLS] sat at the class prior for most of the CPU pretraining (bench/RESULTS.md)")] = \
        field(default="auto", metadata={"choices": POOLINGS})
    max_length: Annotated[int, Help(
        "word pieces per pair (evaluating a --checkpoint: the length it was trained and calibrated with, from its "
        "calibration.json)")] = DEFAULT_MAX_LENGTH
    batch_size: Annotated[int | None, Help("pairs per step; none: 32 on CPU, 128 on CUDA (bf16)")] = None
    pretrain_epochs: Annotated[float, Help("passes over the TDI training pairs")] = 1.0
    pretrain_learning_rate: Annotated[float, Help("peak learning rate, pretraining (few steps on CPU)")] = 2e-4
    pretrain_max_pairs: Annotated[int | None, Help("cap on TDI training pairs (seeded sample; none: all)")] = 8000
    pretrain_max_valid: Annotated[int | None, Help("cap on TDI validation pairs (seeded sample; none: all)")] = 1200
    pretrain_precondition_share: Annotated[float | None, Help(
        "with --pretrain-max-pairs: draw the TDI rows of kind precondition first, up to this share of the sample's "
        "dependent rows (none: a plain sample, in which they are as rare as in the data)")] = None
    pretrain_evals: Annotated[int, Help("validation runs per pretraining epoch")] = 2
    method_docs: Annotated[str, Help(
        "how a mined method's doc is shown in the TDI pairs: qualified (as mined, Queue.get) or receiver (get(queue: "
        "Queue): the receiver an input, as tool catalogs show the object a tool acts on; "
        "tasks/training/doc_views.py); --checkpoint --recalibrate keeps the checkpoint's own")] = \
        field(default="qualified", metadata={"choices": METHOD_DOCS})
    parameter_dropout: Annotated[float, Help(
        "share of the TDI training pairs shown without parameters on either doc (name and description only, as "
        "UltraTool's and TMDB's tools are; tasks/training/doc_views.py); validation keeps them")] = 0.0
    finetune_extra: Annotated[tuple[str, ...], Help(
        "with --finetune: tool sets (names or folders, comma separated) whose pairs join finetuning's training side "
        "only, never its validation, the calibration or the held-out report; a set the parameter level trains on "
        "(--retriever-toolsets) gives none of the groups it holds out for its test, with or without "
        "--parameter-scorer; empty: none")] = ("nestools",)
    finetune_extra_view: Annotated[str, Help(
        "how the --finetune-extra docs are shown: description (name and description, no parameters: as the tools "
        "the cross-encoder decides in two levels, those that declare no inputs) or as_published")] = field(
        default="description", metadata={"choices": EXTRA_VIEWS})
    finetune_extra_none_per_edge: Annotated[float | None, Help(
        "'no dependency' pairs of each --finetune-extra set per edge (a seeded sample of its same-group pairs without "
        "an edge; 1: as many as each direction class); none: at most --finetune-max-none, as the --finetune sets")] = None
    finetune_epochs: Annotated[float, Help("passes over the finetuning pairs")] = 1.0
    finetune_learning_rate: Annotated[float, Help("peak learning rate, finetuning")] = 1e-4
    finetune_max_none: Annotated[int | None, Help(
        "cap on 'no dependency' pairs per tool set (seeded); none: all (imbalanced like real use)")] = 300
    finetune_train_none: Annotated[int | None, Help(
        "'no dependency' pairs per --finetune set on finetuning's training side, drawn (seeded) from every pair of its "
        "training groups; none: the --finetune-max-none sample the split is made on")] = None
    heldout_max_none: Annotated[int | None, Help(
        "'no dependency' pairs per --finetune set in the held-out report (metrics.json validation.finetune): every "
        "pair of its held-out groups up to this many, a seeded sample beyond; none: all. Calibration keeps "
        "--finetune-max-none's sample")] = 2000
    # off by default: on 2 CPU cores it cost API-Bank F1 0.842 -> 0.737 and learned no kind (bench/RESULTS.md)
    kind_head: Annotated[bool, Help(
        "train a kind head beside the three classes (five outputs: each dependency class split into data and "
        "precondition), from the TDI pairs' kind column and tool-set edges of known kind; build-graph labels the "
        "discriminator's edges with it (docs/discriminator.md, 'Kind head')")] = False
    kind_weight: Annotated[float, Help("weight of the kind head's loss beside the class loss")] = 1.0
    ema_decay: Annotated[float | None, Help(
        "both stages validate and keep an exponential moving average of the weights, this decay per step (e.g. "
        "0.95: about the last 20 steps), instead of one step's weights; none: as trained (measured lower at the "
        "real prior: docs/discriminator.md)")] = None
    hint_dropout: Annotated[float, Help(
        "share of training pairs (both stages) shown without the parameter-match hint, so the model also learns "
        "from the docs themselves; validation, calibration and test keep the hint")] = 0.0
    length_grouped: Annotated[bool, Help(
        "draw the pair stages' training batches of similar length (the Trainer's group_by_length): faster on CPU, "
        "but each TDI pair then shares its batch with its swap, and pretraining fell to the class prior "
        "(bench/RESULTS.md); the parameter level groups its units by length either way")] = False
    train_precision: Annotated[str, Help(
        "the training loops' arithmetic: auto (bf16 mixed precision where it gains: the pair stages on CUDA and on "
        "CPUs with bf16 matrix units (AMX tiles or AVX512-BF16), where a step takes 0.65x to 0.7x the time, and the "
        "retriever, which trains on the CPU, on such CPUs; fp32 elsewhere), fp32 or bf16; scoring, calibration and "
        "the parameter head stay fp32")] = "auto"
    finetune_replay: Annotated[int, Help(
        "TDI training pairs mixed into finetuning so the parameter-level skill is not forgotten")] = 600
    test_max_none: Annotated[int | None, Help("paper's API-Bank test: all dependency pairs + 500 none")] = 500
    check_partners: Annotated[int, Help(
        "the test's two levels + preconditions whose prerequisite checks, as build-graph decides them: each tool that "
        "checks may gate only the N tools of its group most like it (build-graph's --check-partners, by its default "
        "--encoder); 0: every one")] = DEFAULT_CHECK_PARTNERS
    stated_edges: Annotated[bool, Help(
        "the test's two-level rows as build-graph decides them: a dependency the tools' docs state (an input's "
        "description names another tool of its provider as the value's source; tasks/graph/stated.py) is decided "
        "so, whatever the models say (build-graph's --stated-edges); the cross-encoder's own row is the model "
        "alone")] = True
    valid_fraction: Annotated[float, Help("finetuning validation share (grouped by tool set)")] = 0.2
    calibration: Annotated[str, Help("threshold criterion: max_f1 or precision")] = field(
        default="max_f1", metadata={"choices": CALIBRATION_CRITERIA})
    calibration_prior: Annotated[float | None, Help(
        "none pairs per dependency pair the cut is chosen for; none: the finetuning tool sets' natural ratio")] = None
    recalibrate: Annotated[bool, Help(
        "with --checkpoint: choose the cut again on this config's validation sets and store it beside the checkpoint")] = False
    calibrate_on: Annotated[str, Help(
        "validation pairs the threshold is chosen on: finetune, tdi, or both (tool sets with and without parameters)")] = \
        field(default="both", metadata={"choices": CALIBRATE_ON})
    target_precision: Annotated[float, Help("with --calibration precision")] = 0.9
    symmetric: Annotated[bool, Help("average p(a,b) with the swapped p(b,a) at inference")] = True
    select_metric: Annotated[str, Help(
        "finetuning's checkpoint choice on the held-out tool-set groups (a compute_metrics key, or loss)")] = \
        "dependency_f1_calibrated"
    # the F1 at the best cut is no choice on the balanced TDI split: a checkpoint still at the class prior calls
    # every pair a dependency at a low cut and scores about 0.37, above a model that learned (bench/RESULTS.md)
    pretrain_select_metric: Annotated[str, Help(
        "pretraining's checkpoint choice on the TDI validation split (a compute_metrics key, or loss: the stage's own "
        "objective)")] = "loss"
    max_steps: Annotated[int, Help("cap on steps per stage (-1: all epochs)")] = -1
    seed: Annotated[int, Help("seed of the training sample, init and shuffling")] = 42
    split_seed: Annotated[int, Help(
        "seed of the pairs a run is measured on: the held-out tool-set groups and the none pairs drawn for the tool "
        "sets (finetuning and --test) and the TDI validation sample; fixed while --seed varies, so runs of several "
        "seeds are compared on the same pairs (before it, each seed drew its own held-out groups and test pairs)")] = 42
    resume: Annotated[bool, Help("continue each stage from its newest checkpoint")] = False
    progress: Annotated[bool, Help("progress bars")] = True
    parameter_scorer: Annotated[bool, Help(
        "also train the dependency retriever with its parameter head (the train-retriever flow on the same TDI data "
        "and the --retriever-toolsets' train groups) into best/parameter_scorer: a pair whose consumer declares "
        "inputs is then scored input by input, the rest by this cross-encoder (two levels: the evaluation's "
        "two-level row, build-graph's default with this checkpoint; docs/discriminator.md)")] = True
    retriever_toolsets: Annotated[tuple[str, ...], Help(
        "with --parameter-scorer: tool sets with parameter edges, their groups split 60/20/20 into training, "
        "checkpoint choice and head fit, and measurement; benchmark names or folders")] = ("nestools", "ultratool")
    retriever_base_model: Annotated[str, Help("with --parameter-scorer: the retriever's starting encoder")] = \
        "offline-minilm"
    # train-retriever's seeds chose steps 22-44 of one epoch (88; bench/RESULTS.md): half an epoch keeps the
    # default run within 15 minutes on 2 cores
    retriever_max_steps: Annotated[int | None, Help(
        "with --parameter-scorer: cap on the retriever's training steps, validated at half and at the end (none: "
        "one epoch)")] = 44
    parameter_reranker: Annotated[bool, Help(
        "with --parameter-scorer: also train the parameter reranker (train-retriever --reranker: a cross-encoder "
        "that rereads each input's few best producers, stacked with the head) into best/parameter_scorer, which the "
        "two-level rows and build-graph then score with; 20 to 27 min more on 2 cores (bench/RESULTS.md)")] = False
    parameter_reranker_max_steps: Annotated[int | None, Help(
        "with --parameter-reranker: cap on the reranker's training steps (none: all its epochs)")] = None
    param_level: Annotated[bool, Help(
        "also train the parameter-level scorer (one consumer input against one producer; tasks/training/param_scorer.py) "
        "on the TDI v2 consumer_param rows and the --param-toolsets' parameter edges, calibrated on their validation "
        "part; saved to <output>/param/best with calibration.json (build-graph --param-discriminator)")] = False
    param_toolsets: Annotated[tuple[str, ...], Help(
        "with --param-level: tool sets with param_edges.jsonl (benchmark names or folders), split by group 80/20 "
        "into training and validation")] = ()
    param_name_dropout: Annotated[float, Help(
        "with --param-level: chance a training side shows meanings instead of identifiers (identifier dropout)")] = 0.3
    param_max_examples: Annotated[int, Help("with --param-level: cap on training examples (seeded sample)")] = 20000

    def __post_init__(self) -> None:
        if self.checkpoint is not None and not (Path(self.checkpoint) / "config.json").exists():
            raise ValueError(f"--checkpoint {self.checkpoint}: not a discriminator checkpoint (no config.json there); "
                             "train one: make train-discriminator")
        trains = self.checkpoint is None
        if (trains or self.recalibrate) and self.pretrain_data not in ("auto", "none"):
            try:
                resolve_pretrain_data(self.pretrain_data)
            except FileNotFoundError as exc:
                raise ValueError(str(exc)) from None
        if trains and self.pretrain_data == "none" and not self.finetune:
            raise ValueError("nothing to train: --pretrain-data none and no --finetune tool sets")
        if not self.test:
            raise ValueError("--test: name at least one benchmark or tool set folder")
        for flag, specs in [*self.finetuning_sets(), ("--test", self.test)]:
            for spec in specs:
                if spec not in BENCHMARKS and not Path(spec).is_dir():
                    raise ValueError(f"{flag} {spec!r} is neither a benchmark ({', '.join(BENCHMARKS)}) nor a tool set folder")
        for flag, value, least in (("--encoder-layers", self.encoder_layers, 1), ("--max-length", self.max_length, 1),
                                   ("--batch-size", self.batch_size, 1), ("--pretrain-max-pairs", self.pretrain_max_pairs, 1),
                                   ("--pretrain-max-valid", self.pretrain_max_valid, 0), ("--pretrain-evals", self.pretrain_evals, 1),
                                   ("--finetune-max-none", self.finetune_max_none, 0), ("--finetune-replay", self.finetune_replay, 0),
                                   ("--test-max-none", self.test_max_none, 0), ("--check-partners", self.check_partners, 0),
                                   ("--heldout-max-none", self.heldout_max_none, 0),
                                   ("--finetune-train-none", self.finetune_train_none, 0)):
            if value is not None and value < least:
                raise ValueError(f"{flag} {value}: must be at least {least}")
        for flag, value in (("--pretrain-epochs", self.pretrain_epochs), ("--finetune-epochs", self.finetune_epochs),
                            ("--pretrain-learning-rate", self.pretrain_learning_rate),
                            ("--finetune-learning-rate", self.finetune_learning_rate),
                            ("--calibration-prior", self.calibration_prior), ("--kind-weight", self.kind_weight)):
            if value is not None and not value > 0:
                raise ValueError(f"{flag} {value}: must be above 0")
        if self.max_steps != -1 and self.max_steps < 1:
            raise ValueError(f"--max-steps {self.max_steps}: -1 (all epochs) or at least 1")
        if self.pretrain_precondition_share is not None and not 0.0 <= self.pretrain_precondition_share <= 1.0:
            raise ValueError(f"--pretrain-precondition-share {self.pretrain_precondition_share}: must lie in [0, 1]")
        check_train_precision(self.train_precision)
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ValueError(f"--ema-decay {self.ema_decay}: must lie strictly between 0 and 1")
        if not 0.0 <= self.hint_dropout <= 1.0:
            raise ValueError(f"--hint-dropout {self.hint_dropout}: must lie in [0, 1]")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ValueError(f"--valid-fraction {self.valid_fraction}: must lie strictly between 0 and 1")
        if not 0.0 < self.target_precision <= 1.0:
            raise ValueError(f"--target-precision {self.target_precision}: must lie in (0, 1]")
        check_pooling(self.pooling)
        if self.calibration not in CALIBRATION_CRITERIA:
            raise ValueError(f"--calibration {self.calibration!r}: choose {' or '.join(CALIBRATION_CRITERIA)}")
        if self.calibrate_on not in CALIBRATE_ON:
            raise ValueError(f"--calibrate-on {self.calibrate_on!r}: choose finetune, tdi or both")
        if not 0.0 <= self.parameter_dropout <= 1.0:
            raise ValueError(f"--parameter-dropout {self.parameter_dropout}: must lie in [0, 1]")
        if self.finetune_extra_none_per_edge is not None and not self.finetune_extra_none_per_edge >= 0:
            raise ValueError(f"--finetune-extra-none-per-edge {self.finetune_extra_none_per_edge}: must be at least 0")
        if self.finetune_extra_view not in EXTRA_VIEWS:
            raise ValueError(f"--finetune-extra-view {self.finetune_extra_view!r}: choose {' or '.join(EXTRA_VIEWS)}")
        if self.method_docs not in METHOD_DOCS:
            raise ValueError(f"--method-docs {self.method_docs!r}: choose {' or '.join(METHOD_DOCS)}")
        for flag, value in (("--select-metric", self.select_metric), ("--pretrain-select-metric", self.pretrain_select_metric)):
            if value not in SELECT_METRICS:
                raise ValueError(f"{flag} {value!r}: one of {', '.join(SELECT_METRICS)} "
                                 "(the validation metrics the checkpoint choice can read)")
        if trains and self.parameter_scorer:
            if not self.retriever_toolsets:
                raise ValueError("--parameter-scorer: name --retriever-toolsets (tool sets with parameter edges), "
                                 "or pass --no-parameter-scorer")
            for spec in self.retriever_toolsets:
                if spec not in BENCHMARKS and not Path(spec).is_dir():
                    raise ValueError(f"--retriever-toolsets {spec!r} is neither a benchmark ({', '.join(BENCHMARKS)}) "
                                     "nor a tool set folder")
            if self.retriever_max_steps is not None and self.retriever_max_steps < 1:
                raise ValueError(f"--retriever-max-steps {self.retriever_max_steps}: must be at least 1")
        if self.parameter_reranker and not (trains and self.parameter_scorer):
            raise ValueError("--parameter-reranker trains on the parameter scorer this run trains: not with "
                             "--checkpoint or --no-parameter-scorer (a given retriever: train-retriever --checkpoint "
                             "<retriever> --reranker)")
        if self.parameter_reranker_max_steps is not None and self.parameter_reranker_max_steps < 1:
            raise ValueError(f"--parameter-reranker-max-steps {self.parameter_reranker_max_steps}: must be at least 1")
        if self.param_toolsets and not self.param_level:
            raise ValueError("--param-toolsets: only with --param-level")
        if self.param_level:
            if self.checkpoint is not None:
                raise ValueError("--param-level trains a model: not with --checkpoint (evaluate only)")
            if self.pretrain_data == "none" and not self.param_toolsets:
                raise ValueError("--param-level: nothing to train on (--pretrain-data none and no --param-toolsets)")
            for spec in self.param_toolsets:
                if spec not in BENCHMARKS and not Path(spec).is_dir():
                    raise ValueError(f"--param-toolsets {spec!r} is neither a benchmark ({', '.join(BENCHMARKS)}) "
                                     "nor a tool set folder")
            if not 0.0 <= self.param_name_dropout <= 1.0:
                raise ValueError(f"--param-name-dropout {self.param_name_dropout}: must lie in [0, 1]")
            if self.param_max_examples < 1:
                raise ValueError(f"--param-max-examples {self.param_max_examples}: must be at least 1")

    def extra_used(self) -> bool:
        """Whether the --finetune-extra sets are read: only by a run that finetunes."""
        return bool(self.checkpoint is None and self.finetune and self.finetune_extra)

    def finetuning_sets(self) -> list[tuple[str, tuple[str, ...]]]:
        """The --finetune and --finetune-extra sets this run reads, with their flags: none when it only evaluates."""
        used = [("--finetune", self.finetune)] if self.checkpoint is None or self.recalibrate else []
        return used + ([("--finetune-extra", self.finetune_extra)] if self.extra_used() else [])

    def check_inputs(self) -> None:
        """Every tool set this run reads is on disk (a missing benchmark says in one line how to get it) and the
        run folder can be written: checked by the command line before Prefect starts and by the flow first
        thing, so nothing is mined, loaded or pretrained for a run that cannot finish."""
        from tasks.common.paths import check_writable, writable_folder_problem
        from tasks.toolsets.availability import check_toolsets

        used = self.finetuning_sets() + [("--test", self.test)]
        used += [("--param-toolsets", self.param_toolsets)] if self.param_level else []
        used += [("--retriever-toolsets", self.retriever_toolsets)] if self.checkpoint is None and self.parameter_scorer else []
        problems = []
        for flag, specs in used:
            try:  # benchmark names are read from --benchmarks-root only (_load_toolset)
                check_toolsets(specs, self.benchmarks_root, flag, fall_back_to_folder=False,
                               root_flag="--benchmarks-root", tool_specs=False)  # gold edges needed
            except ValueError as exc:
                problems.append(str(exc))
        if not problems:  # these folders are read after minutes of training (_load_toolset): read them whole now
            problems += [p for flag, specs in used if flag in ("--finetune", "--finetune-extra", "--test")
                         for spec in specs if (p := folder_problem(spec, flag))]
        check_writable(*problems, writable_folder_problem(self.output, "--output"))


def folder_problem(spec: str, flag: str) -> str | None:
    """Why the tool set folder ``spec`` breaks the format (its first bad line), as ``_load_toolset`` would find
    it, or None; a benchmark name is None (the shared sets are read as imported, rejections and all)."""
    from tasks.toolsets.readers import ToolSetFormatError, read_toolset_dir_with_report

    if spec in BENCHMARKS:
        return None
    try:
        read_toolset_dir_with_report(Path(spec))
    except ToolSetFormatError as exc:
        return f"{flag} {spec}: {exc}"
    return None


# ---------------------------------------------------------------------------------------------
# Tasks


def _load_toolset(spec: str, benchmarks_root: Path) -> ToolSet:
    if spec in BENCHMARKS:
        return load_benchmark(spec, benchmarks_root)
    folder = Path(spec)
    if folder.is_dir():
        return read_toolset_dir(folder)
    raise ValueError(f"{spec!r} is neither a benchmark ({', '.join(BENCHMARKS)}) nor a tool set folder")


def published_tdi(artifacts: Path = Path("artifacts/tdi")) -> list[Path]:
    """TDI datasets that were published whole: a manifest (switched in with its shards, tasks.dataset.publish)
    whose quality gate passed, oldest first by manifest time. A run that failed its gate or died
    mid-write left the version before it, or no manifest."""
    found = []
    for manifest in artifacts.glob("*/manifest.json"):
        try:
            quality = json.loads(manifest.read_text()).get("quality", {})
        except json.JSONDecodeError:
            continue
        if quality.get("success", False) and any((manifest.parent / "shards").glob("*.parquet")):
            found.append(manifest)
    return [m.parent for m in sorted(found, key=lambda m: m.stat().st_mtime)]


def resolve_pretrain_data(spec: str, artifacts: Path = Path("artifacts/tdi")) -> Path | None:
    """The TDI dataset folder to pretrain on, or None to skip (see the config help)."""
    if spec == "none":
        return None
    if spec == "auto":
        found = published_tdi(artifacts)
        return found[-1] if found else None
    folder = Path(spec)
    if not any((folder / "shards").glob("*.parquet")):
        raise FileNotFoundError(f"--pretrain-data {folder}: no shards/*.parquet there; run make mine-tdi or make build-tdi, "
                                "or pass --pretrain-data none to skip pretraining")
    return folder


def parse_args(argv: Sequence[str] | None = None) -> TrainDiscriminatorConfig:
    """The command line, generated from TrainDiscriminatorConfig (tasks/common/cli.py): its defaults, flags given
    override them."""
    return parse_config(TrainDiscriminatorConfig, argv, "python -m flows.train_discriminator", __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, models) are paid for
PROG = "python -m flows.train_discriminator"
CLI = FlowCLI.start(__name__, checking_inputs(parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
# quote(x): Prefect passes x to the task without walking it for futures (a walk costs about 0.4 ms a pair)
from prefect.utilities.annotations import quote  # noqa: E402
from models.discriminator import (CALIBRATION_FILE, checkpoint_pooling, decide, load_calibration,  # noqa: E402
                                  load_discriminator, load_model, load_tokenizer, trained_max_length)
from tasks.training.plots import PR_POINTS, plot_confusion, plot_precision_recall, plot_training_curves  # noqa: E402
from tasks.common.plots import show_plot  # noqa: E402
from tasks.graph.pruning import log_groups  # noqa: E402
from tasks.graph.two_level import PARAMETER_SCORER_DIR, TWO_LEVEL_CUT, parameter_scorer_of  # noqa: E402
from tasks.training.precision import cpu_bf16_unit, train_in_bf16  # noqa: E402
from tasks.training.trainer import (StageArguments, TrainResult, pick_device, predict_examples, seed_everything,  # noqa: E402
                                    train_classifier)


@task(cache_policy=NO_CACHE)
def load_pretraining_pairs(folder: Path, max_pairs: int | None, max_valid: int | None, seed: int,
                           precondition_share: float | None = None, valid_seed: int | None = None,
                           method_docs: str = "qualified",
                           parameter_dropout: float = 0.0) -> tuple[list[PairExample], list[PairExample]]:
    """The TDI training sample (``seed``) and validation sample (``valid_seed``, else ``seed``), methods' docs
    shown as ``method_docs`` says and a ``parameter_dropout`` share of the training pairs without parameters
    (``tasks.training.doc_views``)."""
    train, valid = (shown_as(examples, method_docs) for examples in load_tdi_examples(folder))
    # both orders of every pair (balanced shards hold them for dependency pairs; "none" pairs gain theirs)
    train, valid = with_both_orders(train), with_both_orders(valid)
    if max_pairs is not None and len(train) > max_pairs:
        train = sample_pretraining_rows(train, max_pairs, seed, precondition_share)
    train = drop_parameters(train, parameter_dropout, seed)
    if max_valid is not None and len(valid) > max_valid:
        valid = random.Random(seed if valid_seed is None else valid_seed).sample(valid, max_valid)
    return train, valid


def sample_pretraining_rows(train: list[PairExample], n: int, seed: int,
                            precondition_share: float | None) -> list[PairExample]:
    """A seeded sample of ``n`` training rows. With ``precondition_share``, the rows of kind precondition are
    drawn first, up to that share of the dependent rows the sample holds at the data's own dependent share: mined
    preconditions are about 3% of the dependent rows, too few to learn the kind from in a CPU-sized sample."""
    rng = random.Random(seed)
    if not precondition_share:
        return rng.sample(train, n)
    preconditions = [e for e in train if e.label != 1 and e.kind == "precondition"]
    data = [e for e in train if e.label != 1 and e.kind != "precondition"]
    none = [e for e in train if e.label == 1]
    dependent = round(n * (len(preconditions) + len(data)) / len(train))  # the data's own class balance
    wanted = min(len(preconditions), round(precondition_share * dependent))
    return rng.sample(preconditions, wanted) + rng.sample(data, dependent - wanted) + rng.sample(none, n - dependent)


@task(cache_policy=NO_CACHE)
def toolset_pairs(specs: tuple[str, ...], benchmarks_root: Path, max_none: int | None,
                  seed: int) -> list[tuple[ToolSet, list[PairExample]]]:
    """Each tool set with its pairs: every ordered pair inside a group (both orders of each dependency pair are
    in), the none pairs capped at ``max_none`` per set (seeded)."""
    return [(toolset, build_pairs(toolset, max_none=max_none, seed=seed))
            for toolset in (_load_toolset(spec, benchmarks_root) for spec in specs)]


@task(cache_policy=NO_CACHE)
def build_toolset_pairs(specs: tuple[str, ...], benchmarks_root: Path, max_none: int | None, seed: int) -> list[PairExample]:
    return [e for _, pairs in toolset_pairs.fn(specs, benchmarks_root, max_none, seed) for e in pairs]


@task(cache_policy=NO_CACHE)
def finetune_pairs(cfg: TrainDiscriminatorConfig) -> tuple[list[PairExample], list[PairExample]]:
    """The --finetune sets' pairs from one read of each set: --finetune-max-none's sample (the split, training,
    calibration; as ``build_toolset_pairs`` samples it) and every pair (the held-out report, --finetune-train-none)."""
    per_set = [pairs for _, pairs in toolset_pairs.fn(cfg.finetune, cfg.benchmarks_root, None, cfg.split_seed)]
    return ([e for pairs in per_set for e in sample_none(pairs, cfg.finetune_max_none, cfg.split_seed)],
            [e for pairs in per_set for e in pairs])


def held_out_report_pairs(cfg: TrainDiscriminatorConfig, ft_pairs: list[PairExample],
                          every: list[PairExample]) -> list[PairExample]:
    """The pairs of the --finetune sets' held-out groups the held-out report reads: ``every`` pair they hold, up to
    --heldout-max-none none pairs per set, where ``ft_pairs`` (training and calibration) hold --finetune-max-none's
    sample of the none pairs (UltraTool's held-out groups kept 24 of their 618)."""
    return held_out_pairs(ft_pairs, every, cfg.valid_fraction, cfg.split_seed, cfg.heldout_max_none)


@task(cache_policy=NO_CACHE)
def extra_finetune_pairs(cfg: TrainDiscriminatorConfig) -> tuple[list[PairExample], dict[str, Any]]:
    """The --finetune-extra sets' pairs for finetuning's training side, shown as --finetune-extra-view says, and
    what was taken from each. A set the parameter level also trains on (``--retriever-toolsets``) loses the groups
    that level holds out for its test (train-retriever's split, as ``bench.nestools_split`` writes it), so no model
    of the checkpoint has seen the domains its parameter-level figures are measured on; also in a run without the
    parameter level (``--no-parameter-scorer``), so that its cross-encoder finetunes as the default run's does and
    is measured on the same unseen domains."""
    from tasks.training.param_examples import split_groups
    from tasks.training.retriever_config import GROUP_SPLIT, GROUP_SPLIT_SEED

    pairs, taken = [], {}
    for spec in cfg.finetune_extra:
        toolset = _load_toolset(spec, cfg.benchmarks_root)
        groups = {t.group for t in toolset.tools}
        tested = split_groups(groups, GROUP_SPLIT, GROUP_SPLIT_SEED)[2] if spec in cfg.retriever_toolsets else set()
        if tested:
            toolset = toolset.only_groups(groups - tested)
        max_none = (cfg.finetune_max_none if cfg.finetune_extra_none_per_edge is None
                    else round(cfg.finetune_extra_none_per_edge * len(toolset.edges)))
        got = build_pairs(toolset, max_none=max_none, seed=cfg.split_seed)
        if cfg.finetune_extra_view == "description":
            got = drop_parameters(got, 1.0, cfg.split_seed)
        pairs += got
        taken[spec] = {"groups": len(groups) - len(tested), "groups_held_out_by_the_parameter_level": len(tested),
                       "view": cfg.finetune_extra_view, "pairs": label_counts(got)}
    return pairs, taken


@task(cache_policy=NO_CACHE)
def toolset_none_ratio(specs: tuple[str, ...], benchmarks_root: Path) -> float:
    """None pairs per dependency pair over all ordered same-group pairs of the tool sets (no subsampling)."""
    ratios = {spec: natural_none_ratio(_load_toolset(spec, benchmarks_root)) for spec in specs}
    return float(sum(ratios.values()) / len(ratios))


@task(cache_policy=NO_CACHE, log_prints=False)  # library internals print; keep them out of the run log
def train_stage(stage: str, init_model: str, train: list[PairExample], valid: list[PairExample], args: StageArguments,
                out_dir: Path, loss_name: str, resume: bool, best_dir: Path | None = None,
                num_layers: int | None = None, kind_head: bool = False, pooling: str = "auto") -> TrainResult:
    tokenizer = load_tokenizer(init_model)
    model = load_model(init_model, num_layers, kind_head=kind_head, pooling=pooling)
    return train_classifier(model, tokenizer, train, valid, args, out_dir, loss_name=loss_name, resume=resume,
                            stage=stage, best_dir=best_dir)


def train_param_level(cfg: TrainDiscriminatorConfig, out: Path, batch_size: int, logger) -> dict[str, Any]:
    """The parameter-level scorer (``--param-level``): TDI v2 parameter examples (train / validation split)
    plus the ``--param-toolsets``' parameter edges (groups 80/20), one stage from the base model, the cut
    chosen on validation; ``<out>/param/best`` with calibration.json."""
    from tasks.training.param_examples import load_tdi_param_examples, split_groups, toolset_param_examples
    from tasks.training.param_scorer import PARAM_MAX_LENGTH, train_param_scorer

    train, valid = [], []
    tdi = resolve_pretrain_data(cfg.pretrain_data)
    if tdi is not None:
        train += load_tdi_param_examples(tdi, "train", seed=cfg.seed)
        try:
            valid += load_tdi_param_examples(tdi, "validation", seed=cfg.seed)
        except FileNotFoundError:
            logger.warning("%s has no validation shards: parameter-level validation from the tool sets only", tdi)
    for spec in cfg.param_toolsets:
        toolset = _load_toolset(spec, cfg.benchmarks_root)
        fit, held, _ = split_groups({t.group for t in toolset.tools}, (0.8, 0.2, 0.0), cfg.seed)
        train += toolset_param_examples(toolset, fit, seed=cfg.seed)
        valid += toolset_param_examples(toolset, held, seed=cfg.seed)
    random.Random(cfg.seed).shuffle(train)
    train = train[: cfg.param_max_examples]
    if not train or not valid:
        raise ValueError(f"--param-level: {len(train)} training and {len(valid)} validation examples; need both "
                         "(a TDI v2 dataset with consumer_param, or --param-toolsets with param_edges.jsonl)")
    args = StageArguments(epochs=1.0, batch_size=batch_size, eval_batch_size=batch_size * 4, learning_rate=1e-4,
                          max_length=min(cfg.max_length, PARAM_MAX_LENGTH), seed=cfg.seed, max_steps=cfg.max_steps,
                          evals_per_epoch=2, progress=cfg.progress,
                          length_grouped=True)  # parameter units come without swaps: grouping's speed costs nothing here
    logger.info("parameter level: %d training examples (%d positive), %d validation", len(train),
                sum(e.label for e in train), len(valid))
    result, calibration = train_param_scorer(load_model(cfg.base_model, cfg.encoder_layers, pooling=cfg.pooling),
                                             load_tokenizer(cfg.base_model),
                                             train, valid, args, out / "param", cfg.param_name_dropout, cfg.calibration,
                                             cfg.target_precision)
    logger.info("parameter level: cut %.3f, validation P %.3f R %.3f F1 %.3f; %s", calibration["threshold"],
                calibration["precision"], calibration["recall"], calibration["f1"], result.best_dir)
    return {"best_dir": str(result.best_dir), "calibration": calibration, "train": len(train), "validation": len(valid)}


def train_parameter_scorer(cfg: TrainDiscriminatorConfig, tdi: Path | None, ckpt: Path, out: Path) -> dict[str, Any]:
    """The dependency retriever with its parameter head (train-retriever's run, inside this flow, with its
    defaults) trained into ``<output>/parameter_scorer``; its best folder is copied into the staged checkpoint
    as ``parameter_scorer/``, so the checkpoint carries both levels and is swapped in whole."""
    from tasks.training.retriever_config import RetrieverConfig
    from tasks.graph.retriever_run import run_retriever

    run = out / PARAMETER_SCORER_DIR
    metrics = run_retriever(RetrieverConfig(
        tdi=str(tdi) if tdi is not None else None, toolsets=tuple(cfg.retriever_toolsets), heldout=(),
        benchmarks_root=str(cfg.benchmarks_root), output=str(run), base_model=cfg.retriever_base_model,
        max_steps=cfg.retriever_max_steps, evals=2, seed=cfg.seed, train_precision=cfg.train_precision,
        reranker=cfg.parameter_reranker, reranker_max_steps=cfg.parameter_reranker_max_steps))
    shutil.rmtree(ckpt / PARAMETER_SCORER_DIR, ignore_errors=True)
    shutil.copytree(run / "best", ckpt / PARAMETER_SCORER_DIR)
    head = metrics.get("parameter_head") or {}
    return {"run": str(run), "examples": metrics.get("examples"), "steps": metrics.get("steps"),
            "best_step": metrics.get("best_step"), "seconds": metrics.get("seconds"),
            "head_threshold": (head.get("head") or {}).get("threshold"), "test": head.get("test"),
            "reranker": (metrics.get("parameter_reranker") or {}).get("test")}


@task(cache_policy=NO_CACHE)
def two_level_scores(scorer: Path, test_sets: list[tuple[ToolSet, list[PairExample]]], cross_probs,
                     cross_cut: float | None, preconditions: tuple[PreconditionScope, ...] = ("off",),
                     check_partners: int = DEFAULT_CHECK_PARTNERS, stated: bool = True):
    """Class probabilities of the test pairs (``test_sets``' pairs in order, as ``cross_probs`` holds them) with
    two levels (``tasks.graph.two_level.two_level_probs``, decided at 0.5): each consumer that declares inputs
    scored input by input by the checkpoint's parameter scorer, the rest by the cross-encoder at ``cross_cut``
    (build-graph's default): a list, one array per value of ``preconditions`` (as build-graph's
    ``--cross-encoder-preconditions``; "checks" with its ``--check-partners``, by build-graph's default encoder and
    tool texts), the parameters scored once for all. ``stated``: the dependencies the docs state decided so
    (``tasks.graph.stated``), as build-graph's ``--stated-edges``."""
    import numpy as np

    from tasks.graph.param_scoring import param_threshold, score_parameters
    from tasks.graph.stated import stated_dependencies, stated_probs
    from tasks.graph.two_level import two_level_probs

    out, start, cut = {p: [] for p in preconditions}, 0, param_threshold(scorer)
    for toolset, pairs in test_sets:
        index = {t.tool_id: n for n, t in enumerate(toolset.tools)}
        ordered = [(index[e.tool_a], index[e.tool_b]) for e in pairs]
        scores = score_parameters(scorer, toolset.tools, sorted({(min(p), max(p)) for p in ordered}))
        gated = nearest_check_pairs(toolset, check_partners) if "checks" in preconditions and check_partners else None
        said = stated_dependencies(toolset.tools) if stated else []
        for p in preconditions:
            decided = two_level_probs(toolset.tools, ordered, cross_probs[start:start + len(pairs)], cross_cut, scores,
                                      cut, p, gated)
            out[p].append(stated_probs(ordered, decided, said))
        start += len(pairs)
    return [np.concatenate(parts) if parts else np.zeros((0, 3)) for parts in out.values()]


def stated_summary(test_sets: list[tuple[ToolSet, list[PairExample]]]) -> dict[str, dict[str, int]]:
    """Per test set, the dependencies its tools' docs state (``tasks.graph.stated``), how many of them are test
    pairs, and on how many of those the gold agrees (the two-level rows decide them as stated)."""
    from tasks.graph.stated import stated_dependencies

    out = {}
    for toolset, pairs in test_sets:
        tools = toolset.tools
        said = {(tools[s.dependent].tool_id, tools[s.prerequisite].tool_id) for s in stated_dependencies(tools)}
        tested = [e for e in pairs if (e.tool_a, e.tool_b) in said]
        out[toolset.name] = {"stated": len(said), "in_test_pairs": len(tested),
                             "gold_agrees": sum(e.label == LABEL_A_DEPENDS_ON_B for e in tested)}
    return out


def nearest_check_pairs(toolset: ToolSet, per_check: int) -> set[tuple[int, int]]:
    """``tasks.graph.checks.check_pairs`` bounded as build-graph bounds them: each check with the ``per_check`` tools it
    may gate most like it, by build-graph's default encoder on its default tool texts, through its embedding cache
    (encoded only when some check may gate more tools than that, and the cache misses them)."""
    from models.encoder_path import OFFLINE_DEFAULT
    from models.sentence_encoder import EncoderConfig, SentenceEncoder
    from tasks.common.embedding_cache import DEFAULT_CACHE_DIR, EmbeddingCache, encode_cached
    from tasks.graph.checks import check_pairs
    from tasks.retrieval.tool_text import embed_style_for, embed_text

    def embeddings():
        style = embed_style_for(toolset.name)
        cache = EmbeddingCache.for_encoder(DEFAULT_CACHE_DIR, OFFLINE_DEFAULT)
        encoder = functools.cache(lambda: SentenceEncoder(EncoderConfig(OFFLINE_DEFAULT)))  # loaded on a miss, once
        return encode_cached([embed_text(t.doc, style) for t in toolset.tools], lambda part: encoder().encode(part),
                             cache, "tool texts")

    return set(check_pairs(toolset.tools, embeddings, per_check))


@task(cache_policy=NO_CACHE)
def score_examples(checkpoint: Path, examples: list[PairExample], max_length: int, batch_size: int, symmetric: bool,
                   progress: bool, what: str = "scoring pairs") -> dict[str, list | None]:
    """``probs``: the three classes' probabilities per pair; ``p_precondition``: the kind head's, or None."""
    model, tokenizer = load_discriminator(checkpoint)
    model.to(pick_device())
    probs, kind = predict_examples(model, tokenizer, examples, max_length, batch_size, symmetric, progress, what=what,
                                   with_kind=True)
    return {"probs": probs.tolist(), "p_precondition": None if kind is None else kind.tolist()}


def report(examples: list[PairExample], probs, threshold: float | None, p_precondition=None,
           kind_threshold: float | None = None) -> dict[str, Any]:
    """Discriminator (argmax, calibrated, direction, beyond-rule recall, P/R/F1 per kind with a kind head) and
    both parameter-match rules on the same pairs; where the names of two tools without inputs order some pair,
    ``names_direction`` too: the calibrated decision as build-graph makes it (``--lifecycle-direction``)."""
    out = {**evaluate_with_rules(examples, probs, threshold, p_precondition, kind_threshold),
           "counts": label_counts(examples)}
    orders = example_orders(examples)
    if threshold is not None and any(o is not None for o in orders):
        oriented, named = orient(probs, orders)
        out["names_direction"] = {**evaluate_with_rules(examples, oriented, threshold)["calibrated"],
                                  "pairs_ordered": int(named.sum()),
                                  "direction": direction_accuracy([e.label for e in examples], oriented)}
    return out


def with_prior(section: dict[str, Any], examples: list[PairExample], probs, threshold: float, prior: float | None
               ) -> dict[str, Any]:
    """``section`` (a ``report``) with ``at_prior``: its dependency P/R/F1 at the calibrated cut with the none pairs
    weighted to ``prior`` none per dependency, as calibration weighs them (``none_weights``), so the figure a
    catalog's every pair would show stands beside the subsampled split's."""
    if prior:
        section["at_prior"] = at_prior([e.label for e in examples], probs, threshold, none_weights(examples, prior), prior)
        if "names_direction" in section:
            section["names_direction"]["at_prior"] = at_prior(
                [e.label for e in examples], orient(probs, example_orders(examples))[0], threshold,
                none_weights(examples, prior), prior)
    return section


def prior_line(figures: dict[str, Any]) -> str:
    """One printed line for a section's ``at_prior``."""
    return (f"at calibration's none prior ({figures['none_per_dependency']:.1f} none per dependency), cut "
            f"{figures['threshold']:.3f}: P {figures['precision']:.3f} R {figures['recall']:.3f} F1 {figures['f1']:.3f}")


def prior_lines(section: dict[str, Any]) -> list[str]:
    """``prior_line`` of a section's ``at_prior``, and of its names' direction where it has one."""
    lines = [prior_line(section["at_prior"])] if section.get("at_prior") else []
    named = (section.get("names_direction") or {}).get("at_prior")
    return lines + ([f"{prior_line(named)} (the direction from the names' lifecycle)"] if named else [])


def by_set_reports(examples: list[PairExample], probs, threshold: float, prior: float | None = None) -> dict[str, Any]:
    """``report`` (with ``at_prior``) of each data set's pairs in ``examples`` (the part of the group before "/"),
    when there are several: the held-out part of every finetuning set on its own, at the one calibrated cut."""
    rows: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        rows.setdefault(e.data_set, []).append(i)
    if len(rows) < 2:
        return {}
    out = {}
    for name, idx in sorted(rows.items()):
        part = [examples[i] for i in idx]
        out[name] = with_prior(report(part, probs[idx], threshold), part, probs[idx], threshold, prior)
    return out


TWO_LEVEL_ROW = "discriminator, two levels (inputs by the parameter scorer)"
# two tools without inputs: build-graph's direction is their names' lifecycle's (tasks/graph/lifecycle.py)
NAMES_DIRECTION_ROW = "discriminator, calibrated, direction from the names' lifecycle (build-graph's default)"
# build-graph --cross-encoder-preconditions beside two levels: metrics.json key and row title per scope
PRECONDITION_ROWS: dict[PreconditionScope, tuple[str, str]] = {
    "checks": ("test_two_level_check_preconditions",
               "discriminator, two levels + preconditions whose prerequisite checks (build-graph's default)"),
    "all": ("test_two_level_preconditions", "discriminator, two levels + cross-encoder preconditions")}


# build-graph's default decision closed over chains of its edges: what the warehouse's prerequisites_of answers
CLOSURE_ROW = ("test_two_level_closure", "discriminator, build-graph's default with the prerequisites its edges imply "
                                         "(prerequisites_of's closure)")


def closure_report(examples: list[PairExample], probs) -> dict[str, Any]:
    """``report`` of build-graph's default decision (``probs``, two levels with its preconditions) with every pair
    that a chain of its edges reaches called dependent in that direction (``tasks.graph.closure``), as a query of
    the warehouse's ``prerequisites_of`` reads the graph: for test sets whose gold counts indirect dependencies.
    ``pairs_added``: the pairs the closure adds."""
    import numpy as np

    from tasks.graph.closure import closure_labels

    labels = decide(probs, TWO_LEVEL_CUT)
    closed = closure_labels([(e.group, e.tool_a, e.tool_b) for e in examples], labels)
    added = closed != labels
    probs = np.array(probs, dtype=float)
    probs[added] = np.eye(probs.shape[1])[closed[added]]
    return {**report(examples, probs, TWO_LEVEL_CUT), "pairs_added": int(added.sum())}


def test_reports(examples: list[PairExample], probs, kinds, threshold: float | None, kind_threshold: float | None,
                 two_level=None, with_preconditions=()) -> dict[str, Any]:
    """The test sections of ``metrics.json`` for ``examples``: the cross-encoder (``test``) and, with the parameter
    level, two levels, each precondition scope (``PRECONDITION_ROWS``, in ``with_preconditions``' order) and the
    closure of build-graph's default decision; each array holds one row per example."""
    out = {"test": report(examples, probs, threshold, kinds, kind_threshold)}
    if two_level is not None:
        out["test_two_level"] = report(examples, two_level, TWO_LEVEL_CUT)
        # as build-graph --cross-encoder-preconditions: where no value passes, the cross-encoder may add a precondition.
        # Its kinds: the edges it adds are preconditions, the rest data, so held-out sets get P/R/F1 per kind
        for (key, _), scope_probs in zip(PRECONDITION_ROWS.values(), with_preconditions):
            added = precondition_rows_added(scope_probs, two_level)
            out[key] = report(examples, scope_probs, TWO_LEVEL_CUT, added.astype(float), 0.5)
        out[CLOSURE_ROW[0]] = closure_report(examples, dict(zip(PRECONDITION_ROWS, with_preconditions))["checks"])
    return out


def precondition_rows_added(with_preconditions, two_level):
    """Per pair, whether a precondition scope's decision calls it dependent where two levels alone do not: the
    edges it adds, all of them preconditions (both arrays: ``two_level_scores``' class probabilities)."""
    return ((decide(with_preconditions, TWO_LEVEL_CUT) != LABEL_NO_DEPENDENCY)
            & (decide(two_level, TWO_LEVEL_CUT) == LABEL_NO_DEPENDENCY))


def comparison_rows(section: dict[str, Any], summary: dict[str, Any] | None = None) -> dict[str, dict]:
    """The rows of a section's comparison table; with the flow's ``summary`` (the test section's), two levels and
    its precondition rows beside the cross-encoder's."""
    summary = summary or {}
    rows = {"discriminator, argmax": section["argmax"]}
    if "calibrated" in section:
        rows[f"discriminator, calibrated (cut {section['calibrated']['threshold']:.3f})"] = section["calibrated"]
    if "names_direction" in section:
        rows[NAMES_DIRECTION_ROW] = section["names_direction"]
    for key, title in (("test_two_level", TWO_LEVEL_ROW), *PRECONDITION_ROWS.values(), CLOSURE_ROW):
        if summary.get(key) is not None:
            rows[title] = summary[key]["calibrated"]
    rows["parameter-match rule (schema)"] = section["schema_rule"]
    if "schema_rule_partial" in section:
        rows["parameter-match rule, partial names too"] = section["schema_rule_partial"]
    return rows


def model_card(cfg: TrainDiscriminatorConfig, summary: dict[str, Any]) -> str:
    test, valid = summary["test"], summary.get("validation")
    headline = test.get("calibrated", test["argmax"])
    rows = [("test: discriminator, calibrated" if "calibrated" in test else "test: discriminator, argmax", headline["dependency"]),
            *[(f"test: {title}", summary[key]["calibrated"]["dependency"])
              for key, title in (("test_two_level", TWO_LEVEL_ROW), PRECONDITION_ROWS["checks"], CLOSURE_ROW)
              if summary.get(key)],
            ("test: parameter-match rule", test["schema_rule"]["dependency"]),
            ("test: parameter-match rule, partial names too", test["schema_rule_partial"]["dependency"])]
    for name, part in (summary.get("test_by_set") or {}).items():  # build-graph's default decision, or the cross-encoder's
        key = PRECONDITION_ROWS["checks"][0] if part.get(PRECONDITION_ROWS["checks"][0]) else "test"
        title = PRECONDITION_ROWS["checks"][1] if key != "test" else "discriminator, calibrated"
        rows.append((f"test ({name} alone): {title}", part[key].get("calibrated", part[key]["argmax"])["dependency"]))
    for name, section in (valid or {}).items():
        rows.append((f"validation ({name}): discriminator, calibrated", section.get("calibrated", section["argmax"])["dependency"]))
        if section.get("at_prior"):
            rows.append((f"validation ({name}): discriminator, calibrated, at calibration's none prior", section["at_prior"]))
        if section.get("names_direction"):  # build-graph's decision between tools without inputs
            rows.append((f"validation ({name}): {NAMES_DIRECTION_ROW}", section["names_direction"]["dependency"]))
            if section["names_direction"].get("at_prior"):
                rows.append((f"validation ({name}): the same, at calibration's none prior",
                             section["names_direction"]["at_prior"]))
        rows.append((f"validation ({name}): parameter-match rule", section["schema_rule"]["dependency"]))
    for name, section in (summary.get("validation_by_set") or {}).items():
        rows.append((f"validation (finetune, held-out part of {name}): discriminator, calibrated",
                     section.get("calibrated", section["argmax"])["dependency"]))
        if section.get("at_prior"):
            rows.append((f"validation (finetune, held-out part of {name}): at calibration's none prior", section["at_prior"]))
    rows.append(("paper Table 3, test", PAPER_TABLE_3))
    table = "\n".join(f"| {name} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} |" for name, m in rows)
    beyond = "\n".join(f"- {name}: {format_beyond_rule(section.get('calibrated', section['argmax']).get('beyond_rule'))}"
                       for name, section in (("test", test), *((f"validation ({n})", v) for n, v in (valid or {}).items())))
    data = summary["data"]
    kind_cut = (summary.get("calibration") or {}).get("kind_threshold")
    warnings = "".join(f"**Warning:** {said}\n\n" for said in summary.get("warnings", []))
    reranked = (", and its parameter reranker (`param_reranker/`: a cross-encoder that rereads each input's few best "
                "producers, stacked with the head)" if cfg.parameter_reranker else "")
    two_level_note = "" if not summary.get("parameter_scorer") else f"""
`{PARAMETER_SCORER_DIR}/` holds the parameter level: a dependency retriever with its parameter head, which scores
each input of a consumer against a producer{reranked}. build-graph scores a pair whose consumer declares inputs with
it and the rest with this cross-encoder (two levels: docs/discriminator.md).
"""
    kind_note = ("" if kind_cut is None else f"""
A kind head (a fourth logit) gives p(precondition | dependency): the prerequisite must run first and no value
is passed. `predict_proba(..., with_kind=True).p_precondition`; an edge is a precondition at p >= {kind_cut:.3f}
(`kind_threshold` in calibration.json), else data flow.
""")
    extra = "".join(f"; training side only, {spec} ({e['view']}): {e['pairs']}"
                    for spec, e in (data.get("finetune") or {}).get("extra", {}).items())
    mean = summary.get("pooling") == "mean"
    remote_code = ", trust_remote_code=True" if mean else ""  # the mean-pooled model's code is saved beside it
    read_errors = ("" if not summary.get("parameter_scorer") else
                   f" `python -m bench.param_head_errors --retriever {cfg.output / 'best' / PARAMETER_SCORER_DIR}` "
                   "writes the parameter level's errors on a set with parameter edges as rows to read.")
    return f"""---
library_name: transformers
pipeline_tag: text-classification
tags: [tool-retrieval, tool-dependency, tgr]
---
# TGR dependency discriminator ({summary['run']})

A 3-class sequence-pair classifier over two tool API docs: `0 a_depends_on_b`, `1 no_dependency`,
`2 b_depends_on_a`. The pair is rendered by `models.discriminator.pair_texts` before tokenization:
each doc as a signature line then descriptions, led by the parameter-match evidence when an
output name of the other tool equals one of its inputs.
{kind_note}{two_level_note}
```python
from models.discriminator import decide, load_calibration, load_discriminator, predict_proba
model, tokenizer = load_discriminator("{cfg.output / 'best'}")
probs = predict_proba(model, tokenizer, [doc_a], [doc_b], symmetric=True).numpy()
labels = decide(probs, load_calibration("{cfg.output / 'best'}")["threshold"])
```
With `transformers.pipeline("text-classification", model=...{remote_code})`, pass the two strings of `pair_texts(doc_a, doc_b)`.

## Data
- base model: `{cfg.base_model}`; classifies {POOLED[summary.get('pooling', 'cls')]}
- pretraining (plain CE, Eq. 1, both orders): {data['pretrain'].get('source') or 'skipped'}; train {data['pretrain'].get('train')}, validation {data['pretrain'].get('validation')}
- finetuning (category-averaged CE, Eq. 2): {', '.join(cfg.finetune) or 'none'}; train {data['finetune'].get('train')}, validation {data['finetune'].get('validation')} ({data['finetune'].get('split', '')}); replayed TDI pairs {data['finetune'].get('replay', 0)}{extra}
- test: {', '.join(cfg.test)}; {test['counts']}
- calibration: {json.dumps(summary.get('calibration'))}

{warnings}## Metrics (dependency classes, direction must be right)
| set | P | R | F1 |
|---|---|---|---|
{table}

Beyond-rule: the discriminator on the gold dependencies neither name rule (exact, partial) finds (recall),
and on the pairs neither rule fires on (precision of its dependency predictions there).
{beyond}

Direction accuracy on true test dependency pairs: {test['direction']['accuracy']}.
Confusion matrix (test, rows true, columns predicted): `{headline['confusion_matrix']}`

## Limits
- A pair counts as right only where the set's gold lists it. The shared sets' gold (API-Bank, UltraTool, TMDB,
  NesTools) lists the edges their recorded dialogues or call chains used, so a right edge no recorded query chained,
  or a second tool that makes the same value, counts as a false positive: read by hand, most of the parameter
  level's false positives on NesTools' held-out domains were such edges (bench/RESULTS.md, "NesTools' gold read by
  hand").{read_errors}
- A consumer that declares no inputs is decided by this cross-encoder alone, from names and descriptions; the
  validation (finetune) rows measure that case where the finetuning sets' tools declare none.
- One run is one draw of the mined TDI (`mine-tdi --seed`) and one `--seed`: runs that differ only there spread
  about as widely as a design change moves the held-out figures (bench/RESULTS.md, "Draws of the mined TDI and
  training seeds"). Compare designs over both with `python -m bench.draw_seed_grid`.

## Config
```json
{json.dumps(summary['config'], indent=2, default=str)}
```
Device: {summary['device']}.
"""


def finish_checkpoint(staged: Path, best: Path, summary: dict[str, Any], card: str) -> Path:
    """Complete the staged checkpoint (weights, tokenizer and calibration.json are in already) with
    ``metrics.json`` and the model card, then swap it in as ``best`` in one step
    (``tasks.common.atomic.replace_dir``): a kill -9 at any point leaves ``best`` the previous complete
    checkpoint or the new one, never weights with another run's calibration."""
    write_json(staged / "metrics.json", summary)
    (staged / "README.md").write_text(card)
    replace_dir(staged, best)
    return best


# ---------------------------------------------------------------------------------------------
# Flow


def scored_as_trained(cfg: TrainDiscriminatorConfig) -> TrainDiscriminatorConfig:
    """Evaluating a --checkpoint scores its pairs at the length it was trained and calibrated with (its
    calibration.json, as build-graph reads it): its cut holds at that length only."""
    trained = trained_max_length(load_calibration(cfg.checkpoint)) if cfg.checkpoint is not None else None
    return replace(cfg, max_length=trained) if trained else cfg


@flow(name="train-discriminator", log_prints=True)
def train_discriminator(cfg: TrainDiscriminatorConfig = TrainDiscriminatorConfig()) -> dict[str, Any]:
    cfg.check_inputs()  # before any work: a missing benchmark is found now, not after pretraining
    logger = get_run_logger()
    given, cfg = cfg.max_length, scored_as_trained(cfg)
    if cfg.max_length != given:
        logger.info("scoring at %d word pieces per pair, as %s was trained (not --max-length %d)", cfg.max_length,
                    cfg.checkpoint, given)
    seed_everything(cfg.seed)
    device = pick_device()
    batch_size = cfg.batch_size or (128 if device.type == "cuda" else 32)
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    bf16, cpu_unit = train_in_bf16(cfg.train_precision), cpu_bf16_unit()
    logger.info("device %s (training in bf16: %s; the CPU's bf16 unit: %s), batch size %d", device, bf16,
                cpu_unit or "none", batch_size)
    summary: dict[str, Any] = {"run": out.name, "config": asdict(cfg), "device": str(device), "trained_in_bf16": bf16,
                               "cpu_bf16_unit": cpu_unit,
                               "data": {"pretrain": {}, "finetune": {}}}
    stages: dict[str, TrainResult] = {}

    def stage_args(epochs: float, lr: float, evals: int, select: str) -> StageArguments:
        return StageArguments(epochs=epochs, batch_size=batch_size, eval_batch_size=batch_size * 4, learning_rate=lr,
                              max_length=cfg.max_length, hint_dropout=cfg.hint_dropout, kind_weight=cfg.kind_weight,
                              seed=cfg.seed, ema_decay=cfg.ema_decay,
                              max_steps=cfg.max_steps, evals_per_epoch=evals,
                              select_metric=select, progress=cfg.progress, length_grouped=cfg.length_grouped,
                              bf16=bf16)

    def scores(checkpoint: Path, examples: list[PairExample], what: str):
        """(probabilities (n, 3), the kind head's p(precondition) (n,) or None)."""
        import numpy as np

        got = score_examples(checkpoint, quote(examples), cfg.max_length, batch_size * 4, cfg.symmetric, cfg.progress, what)
        kind = got["p_precondition"]
        return np.asarray(got["probs"]).reshape(-1, 3), None if kind is None else np.asarray(kind)

    valid_sets: dict[str, list[PairExample]] = {}  # "tdi" and "finetune" validation pairs
    report_sets: dict[str, list[PairExample]] = {}  # what the held-out report reads where it is not valid_sets'
    method_docs = cfg.method_docs
    if cfg.checkpoint is not None:  # evaluate only
        best = ckpt = Path(cfg.checkpoint)
        load_discriminator(best)  # fails early, with a clear message, on a folder that is no checkpoint
        summary["calibration"] = load_calibration(best)
        if summary["calibration"] is None:
            logger.warning("%s has no %s: test figures use argmax only", best, CALIBRATION_FILE)
        method_docs = trained_method_docs(summary["calibration"])
    else:
        # Stage 1: pretraining on TDI pairs (balanced, plain CE)
        init_model, pre_train = cfg.base_model, []
        tdi = resolve_pretrain_data(cfg.pretrain_data)
        if tdi is None:
            logger.warning("pretraining skipped: %s", "--pretrain-data none" if cfg.pretrain_data == "none"
                           else "no published TDI dataset under artifacts/tdi (make mine-tdi makes one in minutes)")
        else:
            pre_train, pre_valid = load_pretraining_pairs(tdi, cfg.pretrain_max_pairs, cfg.pretrain_max_valid, cfg.seed,
                                                          cfg.pretrain_precondition_share, valid_seed=cfg.split_seed,
                                                          method_docs=cfg.method_docs,
                                                          parameter_dropout=cfg.parameter_dropout)
            summary["data"]["pretrain"] = {"source": str(tdi), "train": label_counts(pre_train), "validation": label_counts(pre_valid)}
            logger.info("pretraining on %s: train %s, validation %s", tdi, label_counts(pre_train), label_counts(pre_valid))
            if not pre_valid:
                logger.warning("the TDI dataset has no validation split: the last pretraining step is kept")
            result = train_stage("pretrain", cfg.base_model, quote(pre_train), quote(pre_valid),
                                 stage_args(cfg.pretrain_epochs, cfg.pretrain_learning_rate, cfg.pretrain_evals,
                                            cfg.pretrain_select_metric),
                                 out / "pretrain", "ce", cfg.resume, num_layers=cfg.encoder_layers,
                                 kind_head=cfg.kind_head, pooling=cfg.pooling)
            stages["pretrain"], init_model = result, str(result.best_dir)
            valid_sets["tdi"] = pre_valid
            if result.at_class_prior:  # said now and in metrics.json: the figures after it are weak for that reason
                said = (f"pretraining ended at the class prior: its checkpoint (step {result.best_step}) calls every TDI "
                        "validation pair 'no dependency' at the argmax, so the tool-level figures of this run are weak; "
                        "train again with another --seed, or more steps (--pretrain-epochs)")
                logger.warning(said)
                summary.setdefault("warnings", []).append(said)

        # Stage 2: finetuning on real tool sets (imbalanced, Eq. 2), grouped 80/20 split. The new
        # checkpoint is completed in ckpt and swapped in as best at the end (finish_checkpoint).
        best, ckpt = out / "best", out / STAGED_BEST
        restore_dir(best)
        shutil.rmtree(ckpt, ignore_errors=True)  # what a killed run left
        if cfg.finetune:
            ft_pairs, every = finetune_pairs(cfg)
            ft_train, ft_valid, split_note = grouped_split(ft_pairs, cfg.valid_fraction, cfg.split_seed)
            report_sets["finetune"] = held_out_report_pairs(cfg, ft_pairs, every)
            if cfg.finetune_train_none is not None:  # the training units' none pairs beyond the split's sample
                ft_train = training_pairs(ft_pairs, every, cfg.valid_fraction, cfg.split_seed, cfg.finetune_train_none)
            replay = random.Random(cfg.seed).sample(pre_train, min(cfg.finetune_replay, len(pre_train)))
            # train side only: the split above, and so the held-out report and the calibration, stay as they are
            extra, extra_note = extra_finetune_pairs(cfg) if cfg.extra_used() else ([], {})
            summary["data"]["finetune"] = {"train": label_counts(ft_train), "validation": label_counts(ft_valid),
                                           "held_out_report": label_counts(report_sets["finetune"]),
                                           "split": split_note, "replay": len(replay),
                                           **({"extra": extra_note} if extra_note else {})}
            logger.info("finetuning: train %s + %d replayed TDI pairs%s, validation %s; %s", label_counts(ft_train),
                        len(replay), f" + {label_counts(extra)} from --finetune-extra "
                        f"({cfg.finetune_extra_view})" if extra else "", label_counts(ft_valid), split_note)
            result = train_stage("finetune", init_model, quote(ft_train + extra + replay), quote(ft_valid),
                                 stage_args(cfg.finetune_epochs, cfg.finetune_learning_rate, 1, cfg.select_metric),
                                 out / "finetune", "category_averaged", cfg.resume, best_dir=ckpt,
                                 num_layers=None if "pretrain" in stages else cfg.encoder_layers,
                                 kind_head=cfg.kind_head, pooling=cfg.pooling)
            stages["finetune"] = result
            valid_sets["finetune"] = ft_valid
        elif "pretrain" in stages:
            load_model(init_model, kind_head=cfg.kind_head, pooling=cfg.pooling).save_pretrained(ckpt)  # already cut
            load_tokenizer(init_model).save_pretrained(ckpt)
        else:
            raise ValueError("nothing to train: no pretraining data and no --finetune tool sets")

    # Stage 3: calibration on validation pairs (symmetrized), stored beside the checkpoint
    if cfg.checkpoint is not None and cfg.recalibrate:  # the validation sets of a training run with this config
        if cfg.finetune:
            ft_pairs, every = finetune_pairs(cfg)
            valid_sets["finetune"] = grouped_split(ft_pairs, cfg.valid_fraction, cfg.split_seed)[1]
            report_sets["finetune"] = held_out_report_pairs(cfg, ft_pairs, every)
        tdi = resolve_pretrain_data(cfg.pretrain_data)
        if tdi is not None:
            valid_sets["tdi"] = load_pretraining_pairs(tdi, cfg.pretrain_max_pairs, cfg.pretrain_max_valid, cfg.seed,
                                                       valid_seed=cfg.split_seed, method_docs=method_docs)[1]
    valid_scored = {name: scores(ckpt, pairs, f"scoring {name} validation pairs") for name, pairs in valid_sets.items() if pairs}
    valid_probs = {name: probs for name, (probs, _) in valid_scored.items()}
    valid_kinds = {name: kind for name, (_, kind) in valid_scored.items() if kind is not None}
    # the held-out report's pairs, (pairs, probabilities, p(precondition) or None) per validation split
    reported = {name: (pairs, *valid_scored[name]) for name, pairs in valid_sets.items() if name in valid_scored}
    reported.update({name: (pairs, *scores(ckpt, pairs, f"scoring the held-out report's {name} pairs"))
                     for name, pairs in report_sets.items() if pairs and name in reported})
    used = [n for n in ("finetune", "tdi") if n in valid_probs and cfg.calibrate_on in (n, "both")] or list(valid_probs)
    if used:
        import numpy as np

        labels = [e.label for n in used for e in valid_sets[n]]
        # the validation sets hold few none pairs (subsampled / balanced); real tool sets hold many
        prior = cfg.calibration_prior or (toolset_none_ratio(cfg.finetune, cfg.benchmarks_root) if cfg.finetune else None)
        weights = np.concatenate([none_weights(valid_sets[n], prior) for n in used]) if prior else None
        calibration = choose_threshold(labels, np.concatenate([valid_probs[n] for n in used]), cfg.calibration,
                                       cfg.target_precision, weights)
        calibration.update(symmetric=cfg.symmetric, max_length=cfg.max_length, calibrated_on=used, n_pairs=len(labels),
                           none_per_dependency=prior, method_docs=method_docs)
        if valid_kinds:  # the kind head's cut, on every validation pair of known kind (the TDI split holds them)
            calibration.update(choose_kind_cut([e for n in valid_kinds for e in valid_sets[n]],
                                               np.concatenate(list(valid_kinds.values()))))
            logger.info("kind head: p(precondition) cut %.3f (macro F1 of the two kinds %s on %d validation "
                        "dependencies of known kind)", calibration["kind_threshold"], calibration["kind_macro_f1"],
                        calibration["n_kind_pairs"])
        write_json(ckpt / CALIBRATION_FILE, calibration)
        summary["calibration"] = calibration
        # held-out tool-set groups (UltraTool/TMDB, every pair they hold) and the TDI validation split, each on its own
        summary["validation"] = {name: report(pairs, probs, calibration["threshold"], kinds,
                                              calibration.get("kind_threshold"))
                                 for name, (pairs, probs, kinds) in reported.items()}
        if "finetune" in reported:  # each finetuning set's held-out part on its own (grouped_split holds out some of each)
            pairs, probs, _ = reported["finetune"]
            with_prior(summary["validation"]["finetune"], pairs, probs, calibration["threshold"], prior)
            summary["validation_by_set"] = by_set_reports(pairs, probs, calibration["threshold"], prior)
        logger.info("calibration (%s on %s): cut %.3f, P %.3f R %.3f F1 %.3f", cfg.calibration, "+".join(used),
                    calibration["threshold"], calibration["precision"], calibration["recall"], calibration["f1"])
    elif cfg.checkpoint is None:
        summary["calibration"] = None
        logger.warning("no validation pairs: no calibration, edges will use argmax")

    # Stage 4: the parameter level (the retriever and its head), saved inside the staged checkpoint
    if cfg.checkpoint is None and cfg.parameter_scorer:
        summary["parameter_scorer"] = train_parameter_scorer(cfg, resolve_pretrain_data(cfg.pretrain_data), ckpt, out)

    # Stage 5: test with the best checkpoint
    test_sets = toolset_pairs(cfg.test, cfg.benchmarks_root, cfg.test_max_none, cfg.split_seed)
    for toolset, _ in test_sets:  # a set without groups reads as one: the parameter level finds less there
        log_groups(toolset.name, toolset.tools, logger)
    test_pairs = [e for _, pairs in test_sets for e in pairs]
    threshold = summary["calibration"]["threshold"] if summary.get("calibration") else None
    test_probs, test_kinds = scores(ckpt, test_pairs, "scoring test pairs")
    kind_threshold = (summary.get("calibration") or {}).get("kind_threshold")
    scorer, two_level, with_preconditions = parameter_scorer_of(ckpt), None, []
    if scorer is not None:  # the checkpoint's two levels: inputs scored one by one, the rest by the cross-encoder
        # the cross-encoder's pairs as build-graph reads them: two tools without inputs in the names' direction
        graph_probs = orient(test_probs, example_orders(test_pairs))[0]
        two_level, *with_preconditions = two_level_scores(scorer, quote(test_sets), quote(graph_probs), threshold,
                                                          ("off", *PRECONDITION_ROWS), cfg.check_partners,
                                                          cfg.stated_edges)
        if cfg.stated_edges:
            summary["test_stated"] = stated_summary(test_sets)
    summary.update(test_reports(test_pairs, test_probs, test_kinds, threshold, kind_threshold, two_level,
                                with_preconditions))
    if len(test_sets) > 1:  # several --test sets: each also on its own, so no set's figures are read off the mix
        summary["test_by_set"], start = {}, 0
        for toolset, pairs in test_sets:
            part = slice(start, start + len(pairs))
            start = part.stop
            summary["test_by_set"][toolset.name] = test_reports(
                pairs, test_probs[part], None if test_kinds is None else test_kinds[part], threshold, kind_threshold,
                None if two_level is None else two_level[part], [probs[part] for probs in with_preconditions])
    summary["stages"] = {name: {"best_step": r.best_step, "best_score": r.best_score, "history": r.history}
                         for name, r in stages.items()}
    summary["pooling"] = checkpoint_pooling(ckpt)  # what --pooling auto chose, or the checkpoint's own

    for name, section in (summary.get("validation") or {}).items():
        title = f"validation: {', '.join(cfg.finetune) if name == 'finetune' else 'TDI'} ({section['counts']})"
        print(format_comparison(comparison_rows(section), title))
        kinds = format_kind_table(comparison_rows(section), f"{title}, P/R/F1 per dependency kind")
        if kinds:
            print(kinds)
        for line in prior_lines(section):
            print(line)
    for name, section in (summary.get("validation_by_set") or {}).items():
        print(format_comparison(comparison_rows(section), f"validation: the held-out part of {name} ({section['counts']})"))
        for line in prior_lines(section):
            print(line)
    test_rows = comparison_rows(summary["test"], summary)
    print(format_comparison({**test_rows, "paper Table 3": {"dependency": PAPER_TABLE_3}},
                            f"test ({', '.join(cfg.test)}; {summary['test']['counts']})"))
    kinds = format_kind_table(test_rows, f"test ({', '.join(cfg.test)}), P/R/F1 per dependency kind")
    if kinds:
        print(kinds)
    print(f"direction accuracy on true test dependency pairs: {summary['test']['direction']}")
    for name, said in (summary.get("test_stated") or {}).items():
        print(f"{name}: {said['stated']} dependencies stated in the tools' docs, {said['in_test_pairs']} of them test "
              f"pairs (the two-level rows decide them so), the gold agrees on {said['gold_agrees']}")
    for name, part in (summary.get("test_by_set") or {}).items():
        print(format_comparison(comparison_rows(part["test"], part), f"test: {name} alone ({part['test']['counts']})"))
    for said in summary.get("warnings", []):  # again at the end, beside the figures it qualifies
        logger.warning(said)
    if cfg.checkpoint is None:
        finish_checkpoint(ckpt, best, summary, model_card(cfg, summary))
        plot_training_curves(stages, out / "training_curves.png")
        show_plot(out / "training_curves.png", "train-discriminator: loss and validation dependency F1",
                  [{"stage": name, "step": h["step"], "valid loss": h["eval_loss"],
                    "valid dependency F1 (best cut)": h.get("eval_dependency_f1_calibrated")}
                   for name, r in stages.items() for h in r.evaluations], key="train-discriminator-curves")
    if cfg.param_level:
        summary["param"] = train_param_level(cfg, out, batch_size, logger)
    write_json(out / "metrics.json", summary)
    pr_sets = {**{f"validation: {name}": ([e.label for e in reported[name][0]], reported[name][1], section)
                  for name, section in (summary.get("validation") or {}).items()},
               f"test: {', '.join(cfg.test)}": ([e.label for e in test_pairs], test_probs, summary["test"])}
    if two_level is not None:
        pr_sets[f"test, two levels: {', '.join(cfg.test)}"] = ([e.label for e in test_pairs], two_level,
                                                                summary["test_two_level"])
    plot_precision_recall(pr_sets, out / "precision_recall.png")
    show_plot(out / "precision_recall.png", "train-discriminator: dependency precision-recall against the name rules",
              [{"set": title, "point": label, "precision": section[key]["dependency"]["precision"],
                "recall": section[key]["dependency"]["recall"]}
               for title, (_, _, section) in pr_sets.items() for label, key, _ in PR_POINTS if key in section],
              note="The curve: the discriminator at every cut on p(dependency); the rows: the points drawn over it.",
              key="train-discriminator-precision-recall")
    headline = summary["test"].get("calibrated", summary["test"]["argmax"])
    plot_confusion(headline["confusion_matrix"], out / "confusion_matrix_test.png", f"test: {', '.join(cfg.test)}")
    logger.info("checkpoint: %s; metrics: %s", best, out / "metrics.json")
    return {"best_dir": str(best), "metrics_path": str(out / "metrics.json"), "test": summary["test"],
            "validation": summary.get("validation"), "calibration": summary.get("calibration"),
            "param": summary.get("param"), "parameter_scorer": summary.get("parameter_scorer"),
            "test_two_level": summary.get("test_two_level"),
            **{key: summary.get(key) for key, _ in (*PRECONDITION_ROWS.values(), CLOSURE_ROW)},
            "test_by_set": summary.get("test_by_set"), "validation_by_set": summary.get("validation_by_set"),
            "pooling": summary["pooling"]}


# ---------------------------------------------------------------------------------------------
# CLI: generated from the config dataclass (its defaults and help texts are the one source)


if __name__ == "__main__":
    CLI.run(train_discriminator)
