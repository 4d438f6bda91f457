"""The three agents' prompts (content of the paper's Figures 6-8, in this project's words), and the
precondition mode of agents 2 and 3: a pair whose order is required although no parameter passes
between the two APIs (a check, a lookup of state, an authentication, a confirmation first).

Each prompt carries a version that goes into the LLM cache key and the dataset manifest: bump it
whenever the wording changes, so cached answers to the old wording are never reused. The data-flow
prompts (GENERATE_DEPENDENT, VALIDATE) are unchanged by the precondition mode, so their cached
answers stay valid.
"""
from __future__ import annotations

from typing import Any

from schemas.docs import load_schema
from tasks.llm.prompt import Prompt, schema_text


_PARAM = load_schema("api_doc")["$defs"]["param"]
_DOC_PROPERTIES = load_schema("api_doc")["properties"]


def _without_string_bounds(schema: Any) -> Any:
    """Drop minLength/maxLength: llama.cpp's grammar compiler unrolls them into one optional rule
    per character and gives up (the embedded server dies) at a few hundred. Answers are still
    checked against the full doc schema, with its bounds, after parsing."""
    if isinstance(schema, dict):
        return {k: _without_string_bounds(v) for k, v in schema.items() if k not in ("minLength", "maxLength")}
    if isinstance(schema, list):
        return [_without_string_bounds(v) for v in schema]
    return schema


def _inline_params(props: dict[str, Any]) -> dict[str, Any]:
    # Answer schemas are sent standalone (no $defs), so the param shape is inlined.
    out = dict(props)
    for key in ("input_params", "output_params"):
        out[key] = {**props[key], "items": _PARAM}
    return _without_string_bounds(out)


EXTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "description", "input_params", "output_params"],
    "additionalProperties": False,
    "properties": _inline_params(_DOC_PROPERTIES),
}

GENERATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["satisfied", "name", "description", "input_params", "output_params", "consumer_param", "producer_output"],
    "additionalProperties": False,
    "properties": {
        "satisfied": {"type": "integer", "enum": [1, 2]},
        **_inline_params(_DOC_PROPERTIES),
        # the dependent API's input parameter that takes the other API's output, and that output;
        # tasks/agents/requests.py checks both against the docs (and their types) before agent 3 is asked
        "consumer_param": {"type": "string"},
        "producer_output": {"type": "string"},
    },
}

VALIDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["result", "reason"],
    "additionalProperties": False,
    "properties": {
        "result": {"type": "integer", "enum": [0, 1]},
        "reason": {"type": "string"},
    },
}

# Precondition mode: no consumer_param / producer_output (nothing passes between the two APIs); which
# API is called first, and why the later one needs it (one sentence).
CALLED_FIRST = ("new", "given")
GENERATE_PRECONDITION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["called_first", "name", "description", "input_params", "output_params", "reason"],
    "additionalProperties": False,
    "properties": {
        "called_first": {"type": "string", "enum": list(CALLED_FIRST)},
        **_inline_params(_DOC_PROPERTIES),
        "reason": {"type": "string"},
    },
}

# The precondition judge answers as the data-flow judge does (result, short reason); its own name
# tells the two verdicts apart in a request and on the fake server.
VALIDATE_PRECONDITION_SCHEMA: dict[str, Any] = VALIDATE_SCHEMA

EXTRACT = Prompt(
    version="extract-v4",
    system=(
        "You are a precise technical writer. You document functions as API specifications in "
        "English and answer with one JSON object only."
    ),
    user_template=(
        "Write the API documentation of the function at the end of this message as JSON with the fields:\n"
        "- name: the API name\n"
        "- description: what the API does, in one or two sentences\n"
        "- input_params: list of {{name, type, description}} for each input parameter\n"
        "- output_params: list of {{name, type, description}} for each value it returns\n"
        "Be concise: each type is a short type name (string, integer, number, boolean, list, "
        "dict, bytes, object, none) and each description is one sentence.\n"
        "JSON schema of the answer: {schema}\n\n"
        "The function:\n```{language}\n{code}\n```"
    ),
)

GENERATE_DEPENDENT = Prompt(
    version="generate-dependent-v7",
    system=(
        "You design realistic software APIs that work together. Every field you write is in "
        "English. Answer with one JSON object only."
    ),
    user_template=(
        "The documentation of an API is at the end of this message. "
        "Study its input parameters and output parameters. Then invent a DIFFERENT API (a "
        "separate tool with its own name, purpose and parameters, not a variant or new version "
        "of the given one: no _v2, _new or _copy of its name, not its parameters under a new name) that works "
        "together with it in one of these two ways:\n"
        "1. the new API's input parameters are obtained from the given API's output parameters;\n"
        "2. the new API's output parameters can serve as the given API's input parameters.\n"
        "Set `satisfied` to 1 or 2 to say which condition your API meets, and describe the new "
        "API with name, description, input_params and output_params (each parameter with name, "
        "type and description). Be concise: short type names (string, integer, number, "
        "boolean, list, dict, bytes, object) and one-sentence descriptions.\n"
        "Then name the hand-over: `consumer_param` is the name of the dependent API's input "
        "parameter that takes the other API's output (an input parameter of your new API when "
        "`satisfied` is 1, of the given API when it is 2), spelled exactly as in its input_params; "
        "`producer_output` is the name of the other API's output parameter that feeds it, spelled "
        "exactly as in its output_params (an output, never one of its inputs, never empty), and both "
        "have the same type (a string feeds a string, not a datetime). Pairs that break these rules are "
        "discarded.\n"
        "JSON schema of the answer: {schema}\n\n"
        "The given API:\n{doc}"
    ),
)

VALIDATE = Prompt(
    version="validate-v3",
    system="You review API designs carefully. Answer with one JSON object only.",
    user_template=(
        "Two APIs, A and B, are documented at the end of this message. "
        "Is there a parameter dependency between these two APIs, that is, should an input "
        "parameter of one API be taken from an output parameter of the other? Answer with "
        "`result` 1 if there is such a dependency and 0 if there is not, and give a short "
        "`reason`.\n"
        "JSON schema of the answer: {schema}\n\n"
        "API A:\n{doc_a}\n\nAPI B:\n{doc_b}"
    ),
)

# Kept short: on the embedded default (a small model on 2 CPU cores) prompt tokens are the main cost.
GENERATE_PRECONDITION = Prompt(
    version="generate-precondition-v2",
    system=GENERATE_DEPENDENT.system,
    user_template=(
        "The documentation of an API is at the end of this message. "
        "Invent a DIFFERENT API (its own name and purpose, not a variant of the given one) that must be "
        "called in a fixed order with it although no parameter passes between them: no input of one "
        "API is taken from an output of the other. Either the new API must be called first (it checks, "
        "looks up state, authenticates, confirms or prepares something the given API needs), or the "
        "given API must be called first and the new API needs the state it leaves.\n"
        "Set `called_first` to \"new\" or \"given\", describe the new API with name, description, "
        "input_params and output_params (each parameter with name, type and description; short type "
        "names, one-sentence descriptions), and say in `reason`, in one sentence, why the later call "
        "fails or goes wrong without the earlier one.\n"
        "JSON schema of the answer: {schema}\n\n"
        "The given API:\n{doc}"
    ),
)

VALIDATE_PRECONDITION = Prompt(
    version="validate-precondition-v2",
    system=VALIDATE.system,
    user_template=(
        "Two APIs, A and B, are documented at the end of this message. "
        "A is called before B. Is this order required, that is, does B fail or give a wrong result "
        "when A was not called first? An order that is only usual or convenient is not required. "
        "Answer with `result` 1 if it is required and 0 if it is not, and give a short `reason`.\n"
        "JSON schema of the answer: {schema}\n\n"
        "API A:\n{doc_a}\n\nAPI B:\n{doc_b}"
    ),
)

# Agent 2 once more, in the same conversation, after a check in code discarded its answer (an echo of the given
# API, a hand-over that names no such parameter or joins two types): the reason, then the same task. Its user
# message follows agent 2's own prompt and answer, which llama.cpp's prompt cache still holds.
GENERATE_REPAIR = Prompt(
    version="generate-repair-v1",
    system=GENERATE_DEPENDENT.system,
    user_template=(
        "That answer is discarded: {problem}. Answer again, following every rule above: a DIFFERENT API "
        "(its own name, purpose and parameters), with the hand-over named exactly as the rules say. "
        "Answer with one JSON object only."
    ),
)

PROMPT_VERSIONS = {p.version.rsplit("-v", 1)[0]: p.version
                   for p in (EXTRACT, GENERATE_DEPENDENT, VALIDATE, GENERATE_PRECONDITION, VALIDATE_PRECONDITION,
                             GENERATE_REPAIR)}
