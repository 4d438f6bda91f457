"""ToolNet's ``Evaluate`` prompt and its answer schema (tasks/toolnet/evaluator.py).

Not in build-tdi's ``PROMPT_VERSIONS`` (tasks/agents/prompts.py): those are the agents' (their
versions go into its chunk fingerprints and manifests); the evaluator's version is recorded by
build-graph (``transition_builds.evaluator``).
"""
from __future__ import annotations

from typing import Any

from tasks.llm.prompt import Prompt
from tasks.toolsets.trajectories import SCORE_RANGE

SCORE_VALUES = list(range(SCORE_RANGE[0], SCORE_RANGE[1] + 1))  # ToolNet's scale, -3 ... 3


def evaluate_schema(tools: list[str]) -> dict[str, Any]:
    """The answer schema of ToolNet's ``Evaluate`` for a run that called ``tools`` (distinct, in
    first-call order): exactly one entry per tool, in that order (``prefixItems`` + ``const``), so a
    score for a tool the run did not call, a tool scored twice or left out, or a score outside
    [-3, 3] fails validation and the LLM layer asks again. Grammar-constrained servers (llama.cpp)
    compile every keyword used here."""
    entry = lambda tool: {  # noqa: E731
        "type": "object",
        "required": ["tool_name", "score", "reason"],
        "additionalProperties": False,
        "properties": {
            "tool_name": {"type": "string", "const": tool},
            "score": {"type": "integer", "enum": SCORE_VALUES},
            "reason": {"type": "string"},
        },
    }
    return {
        "type": "object",
        "required": ["scores_of_tools"],
        "additionalProperties": False,
        "properties": {
            "scores_of_tools": {
                "type": "array",
                "prefixItems": [entry(t) for t in tools],  # no "items": false, llama.cpp refuses it
                "minItems": len(tools),
                "maxItems": len(tools),
            },
        },
    }


EVALUATE = Prompt(
    version="toolnet-evaluate-v1",
    system=(
        "You evaluate the tools an AI agent used while solving a task, as ToolNet's Evaluate "
        "function. Answer with one JSON object only."
    ),
    user_template=(
        "Task given to the agent:\n{task}\n\n"
        "The agent called these tools, in this order:\n{calls}\n\n"
        "Outcome: {outcome}\n\n"
        "Score each tool the agent called with an integer from -3 to 3. If the agent reached a valid "
        "final answer, give higher scores to the tools that helped it get there. If the answer is "
        "wrong or missing, give lower scores to the noisy or irrelevant tools that led it astray. "
        "Tools that returned errors or nothing useful get lower scores. Give each score a short "
        "reason (one sentence).\n"
        "Score these tools, once each, in this order: {tools}\n"
        "Answer with `scores_of_tools`: a list of {{tool_name, score, reason}}.\n"
        "JSON schema of the answer: {schema}"
    ),
)
