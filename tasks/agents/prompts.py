"""The three agents' prompts (content of the paper's Figures 6-8, in this project's words), and the
precondition mode of agents 2 and 3: a pair whose order is required although no parameter passes
between the two APIs (a check, a lookup of state, an authentication, a confirmation first).

Each prompt carries a version that goes into the LLM cache key and the dataset manifest: bump it
whenever the wording changes, so cached answers to the old wording are never reused. The data-flow
prompts (GENERATE_CONSUMER, GENERATE_PRODUCER, VALIDATE) are unchanged by the precondition mode, so their
cached answers stay valid.
"""
from __future__ import annotations

import json
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

def _answer_schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": list(properties), "additionalProperties": False, "properties": properties}


_INLINED = _inline_params(_DOC_PROPERTIES)
_PARAM_INLINED = _without_string_bounds(_PARAM)


# Agent 2's data-flow answers name the hand-over by their shape: the new API's end is a parameter of its own
# (``fed_input`` / ``fed_output``), so it cannot be missing from its doc, and the given API's end is chosen
# first. The prompt shows these schemas; the request's schema (:func:`with_choices`) also holds the given API's
# names as an enum, so llama.cpp's grammar cannot spell one that is not there. tasks/agents/requests.py turns an
# answer into the new API's doc and the two names, then checks types and echoes.
GENERATE_CONSUMER_SCHEMA: dict[str, Any] = _answer_schema({
    "producer_output": {"type": "string"},  # the given API's output the new API takes
    "name": _INLINED["name"],
    "description": _INLINED["description"],
    "fed_input": _PARAM_INLINED,
    "other_input_params": _INLINED["input_params"],
    "output_params": _INLINED["output_params"],
})

GENERATE_PRODUCER_SCHEMA: dict[str, Any] = _answer_schema({
    "consumer_param": {"type": "string"},  # the given API's input the new API produces
    "name": _INLINED["name"],
    "description": _INLINED["description"],
    "input_params": _INLINED["input_params"],
    "fed_output": _PARAM_INLINED,
    "other_output_params": _INLINED["output_params"],
})


def with_choices(schema: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``schema`` (one of agent 2's data-flow answers) with its first field, the given API's end of the
    hand-over, limited to ``names``."""
    first = next(iter(schema["properties"]))
    return {**schema, "properties": {**schema["properties"], first: {"type": "string", "enum": list(names)}}}


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

_NOT_AN_ECHO = ("Not the given API again, not a variant or new version of it (no _v2, _new or _copy of its "
                "name), not its parameters under a new name.\n")
_PARAM_STYLE = ("Each parameter has name, type and description: short type names (string, integer, number, "
                "boolean, list, dict, bytes, object) and one-sentence descriptions.\n")

# One worked answer per direction, shown in the prompt: without, the embedded 1.5B model restated the given API in
# 15 of 17 records (told in a sentence instead of JSON: the same); with, the judge was asked about 7 and passed 2.
# It copies the producer example at times: such an answer is rejected (requests.copied_example_reason).
CONSUMER_EXAMPLE: dict[str, Any] = {
    "producer_output": "content", "name": "count_words", "description": "Counts the words in a text.",
    "fed_input": {"name": "text", "type": "string", "description": "The text to count."},
    "other_input_params": [],
    "output_params": [{"name": "count", "type": "integer", "description": "The number of words."}],
}
PRODUCER_EXAMPLE: dict[str, Any] = {
    "consumer_param": "path", "name": "find_config_file", "description": "Finds the configuration file of an application.",
    "input_params": [{"name": "app_name", "type": "string", "description": "The name of the application."}],
    "fed_output": {"name": "config_path", "type": "string", "description": "The path of its configuration file."},
    "other_output_params": [],
}
PRECONDITION_EXAMPLE: dict[str, Any] = {
    "called_first": "new", "name": "check_read_permission", "description": "Checks whether a user may read files.",
    "input_params": [{"name": "user", "type": "string", "description": "The user who wants to read."}],
    "output_params": [{"name": "allowed", "type": "boolean", "description": "True if the user may read files."}],
    "reason": "Without the check, read_file fails with a permission error for a user who may not read files.",
}


def _template_text(value: dict[str, Any]) -> str:
    return json.dumps(value).replace("{", "{{").replace("}", "}}")  # literal braces in a str.format template


# Agent 2, data flow, in one of two directions chosen per record (tasks/agents/requests.py: handover_side):
# the new API takes an output of the given one, or produces one of its inputs. The record's part (the given
# doc, then {choices}: the names the answer may pick, with their types) comes last, so that llama.cpp's prompt
# cache reuses the instructions and schema from one record to the next.
GENERATE_CONSUMER = Prompt(
    version="generate-consumer-v1",
    system=(
        "You design realistic software APIs that work together. Every field you write is in "
        "English. Answer with one JSON object only."
    ),
    user_template=(
        "The documentation of an API is at the end of this message. Invent a DIFFERENT API that is called "
        "after it and takes one of its outputs as an input: a separate tool with its own name and purpose "
        "that does something further with that value. " + _NOT_AN_ECHO +
        "First, in `producer_output`, choose the given API's output your API takes. Then describe your API: "
        "`name`; `description`; `fed_input`, its input parameter that receives that output (of the same type); "
        "`other_input_params`, its other inputs (often none); `output_params`, what your API returns (something "
        "new, not the given API's outputs again). " + _PARAM_STYLE +
        "For example, for a given API read_file (input path, output content: the file's text), a good answer is "
        + _template_text(CONSUMER_EXAMPLE) + ".\n"
        "JSON schema of the answer: {schema}\n\n"
        "The given API:\n{doc}\n\n"
        "Its outputs to choose from: {choices}."
    ),
)

GENERATE_PRODUCER = Prompt(
    version="generate-producer-v1",
    system=GENERATE_CONSUMER.system,
    user_template=(
        "The documentation of an API is at the end of this message. Invent a DIFFERENT API that is called "
        "before it and produces one of its inputs: a separate tool with its own name and purpose that "
        "creates, finds, loads or computes that value. " + _NOT_AN_ECHO +
        "First, in `consumer_param`, choose the given API's input your API produces. Then describe your API: "
        "`name`; `description`; `input_params`, what your API needs (not the given API's inputs again); "
        "`fed_output`, its output parameter that becomes that input (of the same type); `other_output_params`, "
        "its other outputs (often none). " + _PARAM_STYLE +
        "For example, for a given API read_file (input path, output content), a good answer is "
        + _template_text(PRODUCER_EXAMPLE) + ".\n"
        "JSON schema of the answer: {schema}\n\n"
        "The given API:\n{doc}\n\n"
        "Its inputs to choose from: {choices}."
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
    version="generate-precondition-v3",
    system=GENERATE_CONSUMER.system,
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
        "For example, for a given API read_file (input path, output content), a good answer is "
        + _template_text(PRECONDITION_EXAMPLE) + ".\n"
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
    system=GENERATE_CONSUMER.system,
    user_template=(
        "That answer is discarded: {problem}. Answer again, following every rule above: a DIFFERENT API "
        "(its own name, purpose and parameters), with the hand-over named exactly as the rules say. "
        "Answer with one JSON object only."
    ),
)

PROMPT_VERSIONS = {p.version.rsplit("-v", 1)[0]: p.version
                   for p in (EXTRACT, GENERATE_CONSUMER, GENERATE_PRODUCER, VALIDATE, GENERATE_PRECONDITION, VALIDATE_PRECONDITION,
                             GENERATE_REPAIR)}
