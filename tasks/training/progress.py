"""Progress of a Hugging Face ``Trainer`` you can see without a terminal bar (docs/discriminator.md,
"Progress"): training steps done of all, the last logged loss, rate and time left, and each evaluation
pass's batches, as throttled lines and Prefect progress artifacts (``tasks.common.progress``)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import has_length

from tasks.common.progress import EVERY_S, CountProgress, CountSnapshot, PrefectProgressArtifact, run_say

log = logging.getLogger(__name__)


class ProgressLinesCallback(TrainerCallback):
    """A ``TrainerCallback`` that says ``pretrain training: 120/900 steps (13%), loss 0.8123, 1.9 steps/s,
    about 6 min 50 s left (1 min 3 s so far)`` at most every ``every_s`` seconds (at a step's end, the
    first ``every_s`` after the start) and once at the end of training, and the same of each evaluation
    or prediction pass (``... evaluation: 40/75 batches``) when it runs ``every_s`` or longer.

    Lines go to ``say`` (default: the Prefect run's logger inside a run, else this module's logger);
    snapshots to ``sinks`` and, with ``artifacts``, to one Prefect progress artifact for training and one
    for evaluation (updated pass after pass), which do nothing outside a Prefect run. The rate counts the
    steps of this run only: a resumed run starts at its checkpoint's step."""

    def __init__(self, stage: str, *, say: Callable[[str], None] | None = None,
                 sinks: tuple[Callable[[CountSnapshot], None], ...] = (), artifacts: bool = True,
                 every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.stage, self.every_s, self.clock = stage, every_s, clock
        self.say = say or run_say(log)  # decided here, in the code that starts training: the run's context
        self.training_sinks = (*sinks, *((PrefectProgressArtifact(f"{stage} training"),) if artifacts else ()))
        self.evaluation_sinks = (*sinks, *((PrefectProgressArtifact(f"{stage} evaluation"),) if artifacts else ()))
        self.training: CountProgress | None = None
        self.evaluating: CountProgress | None = None
        self.loss: float | None = None
        self.eval_loss: float | None = None

    def _progress(self, total: int, what: str, unit: str, start: int, sinks: tuple) -> CountProgress:
        return CountProgress(total, what, unit, start=start, say=self.say, sinks=sinks, every_s=self.every_s,
                             clock=self.clock)

    def _detail(self) -> str:
        parts = [f"loss {self.loss:.4f}"] if self.loss is not None else []
        if self.eval_loss is not None:
            parts.append(f"validation loss {self.eval_loss:.4f}")
        return ", ".join(parts)

    # -- training --
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.training = self._progress(max(state.max_steps, state.global_step), f"{self.stage} training", "steps",
                                       state.global_step, self.training_sinks)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.training is not None:
            self.training.set_done(state.global_step)
            self.training.maybe_report()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        logs = logs or {}
        if "loss" in logs:
            self.loss = float(logs["loss"])
        if "eval_loss" in logs:
            self.eval_loss = float(logs["eval_loss"])
        if self.training is not None:
            self.training.detail = self._detail()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.training is not None:
            self.training.set_done(state.global_step)
            self.training.detail = self._detail()
            self.training.report()  # the stage's last line: its rate over the whole run
            self.training = None

    # -- evaluation and prediction passes --
    def on_prediction_step(self, args: Any, state: Any, control: Any, eval_dataloader: Any = None, **kwargs: Any) -> None:
        if self.evaluating is None:
            total = len(eval_dataloader) if has_length(eval_dataloader) else 0
            what = f"{self.stage} evaluation" + (f" at step {state.global_step}" if self.training is not None else "")
            # no event comes before a pass's first batch: the pass is timed from its end, the rate over the rest
            self.evaluating = self._progress(total, what, "batches", 1, self.evaluation_sinks)
        else:
            self.evaluating.advance(1)
        self.evaluating.maybe_report()

    def _pass_ended(self) -> None:
        passing, self.evaluating = self.evaluating, None
        if passing is not None and (passing.reports or self.clock() - passing.started >= self.every_s):
            passing.report()  # a long pass ends with its line; a short one says nothing

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pass_ended()

    def on_predict(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pass_ended()
