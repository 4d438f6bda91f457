"""The three agents: build each agent's requests and turn its answers into docs, pairs or rejections
(:class:`tasks.common.outcome.Outcome`, stage extract, generate or validate).

Agents 2 and 3 work in one of two modes per record (``ExtractedDoc.kind``, chosen by
:func:`pair_kind`): data flow (an output of one API feeds an input of the other) or precondition (one
API must be called before the other and nothing passes between them)."""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from schemas.docs import canonical_doc_json, doc_id, schema_errors
from tasks.llm.structured import StructuredRequest, StructuredResult
from tasks.common.outcome import Outcome
from schemas.name_rule import identifier_tokens, normalise_param_name
from schemas.parameters import (input_param_names, is_none_type, match_param, output_param_names, param_type,
                               types_compatible)
from schemas.tdi import KIND_DATA, KIND_PRECONDITION, DependentPair
from tasks.agents.prompts import (
    CONSUMER_EXAMPLE,
    EXTRACT,
    EXTRACT_SCHEMA,
    GENERATE_CONSUMER,
    GENERATE_CONSUMER_SCHEMA,
    GENERATE_PRECONDITION,
    GENERATE_PRECONDITION_SCHEMA,
    GENERATE_PRODUCER,
    GENERATE_PRODUCER_SCHEMA,
    GENERATE_REPAIR,
    PRECONDITION_EXAMPLE,
    PRODUCER_EXAMPLE,
    VALIDATE,
    VALIDATE_PRECONDITION,
    VALIDATE_PRECONDITION_SCHEMA,
    VALIDATE_SCHEMA,
    with_choices,
)
from tasks.llm.prompt import schema_text

DOC_KEYS = ("name", "description", "input_params", "output_params")
# Salt of the hash that sends a record to the precondition mode: fixed, so a rerun (and a resume) sends
# every record to the same mode.
KIND_SEED = "tgr-precondition-mode-v1"


def pair_kind(record_id: str, precondition_share: float) -> str:
    """The mode agents 2 and 3 work in for this record: KIND_PRECONDITION for a ``precondition_share``
    of the records, by a seeded hash of the id (stable across reruns, and monotone: raising the share
    only moves records from data to precondition), else KIND_DATA. A share of 0 sends none."""
    if precondition_share <= 0:
        return KIND_DATA
    u = int.from_bytes(hashlib.sha256(f"{KIND_SEED}:{record_id}".encode()).digest()[:8], "big") / 2**64
    return KIND_PRECONDITION if u < precondition_share else KIND_DATA


@dataclass(frozen=True)
class ExtractedDoc:
    record_id: str
    doc: dict[str, Any]
    kind: str = KIND_DATA  # the pair agent 2 is asked for: schemas.tdi KIND_DATA or KIND_PRECONDITION


def _doc_of(value: dict[str, Any]) -> dict[str, Any]:
    return {k: value[k] for k in DOC_KEYS}


def _failed(stage: str, result: StructuredResult) -> Outcome:
    return Outcome(result.item_id, stage, f"{stage}_{result.reason}", result.detail, result.raw_text)


# -- agent 1: extract -------------------------------------------------------------------------
def extract_request(record_id: str, code: str, language: str, max_code_chars: int) -> StructuredRequest:
    return StructuredRequest(
        agent="extract",
        item_id=record_id,
        messages=EXTRACT.messages(language=language, code=code[:max_code_chars], schema=schema_text(EXTRACT_SCHEMA)),
        schema_name="api_doc",
        schema=EXTRACT_SCHEMA,
        prompt_version=EXTRACT.version,
    )


def interpret_extract(result: StructuredResult, precondition_share: float = 0.0) -> ExtractedDoc | Outcome:
    """The doc agent 1 wrote, with the mode agents 2 and 3 work on it in (:func:`pair_kind`)."""
    if not result.ok or result.value is None:
        return _failed("extract", result)
    doc = _doc_of(result.value)
    errors = schema_errors(doc, "api_doc")
    if errors:
        return Outcome(result.item_id, "extract", "extract_schema_invalid", "; ".join(errors), None)
    return ExtractedDoc(result.item_id, doc, pair_kind(result.item_id, precondition_share))


# -- agent 2: generate a dependent API ----------------------------------------------------------
# Salt of the hash that picks a data-flow record's direction when both are open: fixed, so a rerun asks the same.
SIDE_SEED = "tgr-handover-side-v1"
# The receiver: as an input, no other API produces it (packed arguments, ``*args``, are left out by their star);
# as a declared output (agent 1 read ``return self``), it is the object called, not a value the call makes.
_RECEIVER = frozenset({"self", "cls"})


def _is_receiver(name: str) -> bool:
    return name.strip().lower() in _RECEIVER


@dataclass(frozen=True)
class HandoverSide:
    """The direction agent 2 is asked for, in data-flow mode: ``satisfied`` 1, the new API takes one of the given
    API's ``names`` (its outputs); 2, the new API produces one of them (the given API's inputs)."""
    satisfied: int
    names: tuple[str, ...]


def handover_side(extracted: ExtractedDoc) -> HandoverSide | Outcome:
    """Which direction agent 2 designs in for this record, or a generate rejection when the given API has no
    value to hand over either way (no output but None, no input but the receiver): asking would only invite an
    echo. With both open, a seeded hash of the record id picks (stable across reruns)."""
    doc = extracted.doc
    outputs = tuple(p["name"] for p in doc.get("output_params") or []  # declared: agent 1 saw the code return it
                    if not is_none_type(p.get("type")) and p["name"].strip().lower() not in ("none", "null")
                    and not _is_receiver(p["name"]))
    inputs = tuple(n for n in input_param_names(doc) if n not in _RECEIVER and not n.startswith("*"))
    if not outputs and not inputs:
        declared = [p["name"] for p in doc["output_params"]]
        return Outcome(extracted.record_id, "generate", "generate_nothing_to_hand_over",
                       f"the given API {doc['name']!r} returns no value and takes none but its receiver (inputs: "
                       f"{input_param_names(doc)}, outputs: {declared}): no value can pass to or from it",
                       canonical_doc_json(doc))
    if outputs and inputs:
        pick = hashlib.sha256(f"{SIDE_SEED}:{extracted.record_id}".encode()).digest()[0] % 2
        return HandoverSide(1, outputs) if pick == 0 else HandoverSide(2, inputs)
    return HandoverSide(1, outputs) if outputs else HandoverSide(2, inputs)


def _choices(doc: dict[str, Any], side: str, names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}` ({param_type(doc, side, n) or 'any type'})" for n in names)


def generate_request(extracted: ExtractedDoc) -> StructuredRequest | Outcome:
    """Agent 2's request in the record's mode: a data-flow partner in the direction :func:`handover_side`
    picks, or a precondition partner; a rejection when no value can pass either way."""
    doc = canonical_doc_json(extracted.doc)
    if extracted.kind == KIND_PRECONDITION:
        prompt, schema, schema_name = GENERATE_PRECONDITION, GENERATE_PRECONDITION_SCHEMA, "precondition_api_doc"
        messages = prompt.messages(doc=doc, schema=schema_text(schema))
    else:
        side = handover_side(extracted)
        if isinstance(side, Outcome):
            return side
        if side.satisfied == 1:  # the new API takes one of the given API's outputs
            prompt, shown, schema_name, given_side = (GENERATE_CONSUMER, GENERATE_CONSUMER_SCHEMA, "consumer_api_doc",
                                                      "output_params")
        else:  # the new API produces one of the given API's inputs
            prompt, shown, schema_name, given_side = (GENERATE_PRODUCER, GENERATE_PRODUCER_SCHEMA, "producer_api_doc",
                                                      "input_params")
        schema = with_choices(shown, list(side.names))
        messages = prompt.messages(doc=doc, schema=schema_text(shown),
                                   choices=_choices(extracted.doc, given_side, side.names))
    return StructuredRequest(
        agent="generate",
        item_id=extracted.record_id,
        messages=messages,
        schema_name=schema_name,
        schema=schema,
        prompt_version=prompt.version,
    )


def flat_answer(value: dict[str, Any]) -> dict[str, Any]:
    """A data-flow answer of either direction as the checks read it: ``satisfied``, the new API's doc (the fed
    parameter first among its inputs or outputs), ``consumer_param`` and ``producer_output``."""
    head = {"name": value["name"], "description": value["description"]}
    if "fed_input" in value:  # the new API takes the given API's output
        fed = value["fed_input"]
        return {"satisfied": 1, **head, "input_params": [fed, *value["other_input_params"]],
                "output_params": value["output_params"], "consumer_param": fed["name"],
                "producer_output": value["producer_output"]}
    fed = value["fed_output"]  # the new API produces the given API's input
    return {"satisfied": 2, **head, "input_params": value["input_params"],
            "output_params": [fed, *value["other_output_params"]], "consumer_param": value["consumer_param"],
            "producer_output": fed["name"]}


# The version of the checks in code that judge an answer before agent 3 (echo, restatement, hand-over, types):
# part of a chunk's fingerprint, so a rerun redoes chunks an older check accepted from. Bump it with any change
# to them (tests/test_agents.py holds the source hash of each version).
ANSWER_CHECKS_VERSION = "answer-checks-v4"

# generate rejections made by a check in code, with a reason the model can act on: worth asking once more
REPAIRABLE = frozenset({"generate_echoed_input", "generate_copied_example", "generate_bad_consumer_param",
                        "generate_bad_producer_output", "generate_type_mismatch"})


def repair_request(asked: StructuredRequest, answer: StructuredResult, rejection: Outcome) -> StructuredRequest | None:
    """Agent 2 asked again in the same conversation (its request, its answer, then why the answer was
    discarded: :data:`GENERATE_REPAIR`), or None when the rejection is no check's (a failed or unparsed call)."""
    if rejection.reason not in REPAIRABLE or answer.value is None:
        return None
    problem = rejection.detail.rstrip(". ")
    messages = (*asked.messages, ("assistant", json.dumps(answer.value, ensure_ascii=False)),
                ("user", GENERATE_REPAIR.user_template.format(problem=problem)))
    return StructuredRequest(agent="generate", item_id=asked.item_id, messages=messages, schema_name=asked.schema_name,
                             schema=asked.schema, prompt_version=f"{asked.prompt_version}+{GENERATE_REPAIR.version}")


def _param_names(doc: dict[str, Any], side: str) -> frozenset[str]:
    return frozenset(normalise_param_name(p["name"]) for p in doc[side])  # userId and user_id are one name


# Trailing words that make a new version or a copy of a name, not another tool (break_here_v2, login_copy).
VERSION_MARK = re.compile(r"v?\d+|new|copy|alt|alternative|updated|modified|improved|clone|duplicate|dup|another")


def api_name_key(name: str) -> str:
    """``name`` without case, separators, trailing version or copy marks and a trailing "with ..." (the same
    call with an option): ``break_here_v2``, ``BreakHereNew``, ``break-here copy`` and
    ``break_here_with_condition`` -> ``breakhere``."""
    tokens = identifier_tokens(name)
    if "with" in tokens[1:]:
        tokens = tokens[:tokens.index("with", 1)]
    while len(tokens) > 1 and VERSION_MARK.fullmatch(tokens[-1]):
        tokens.pop()
    return "".join(tokens)


def renamed_copy(given_name: str, generated_name: str) -> bool:
    """Whether ``generated_name`` is ``given_name`` again under a version or copy mark: the same
    :func:`api_name_key`, or that key with a number glued on (``break_here2``); ``md4`` for ``md5`` is not."""
    given, generated = api_name_key(given_name), api_name_key(generated_name)
    return bool(given) and (generated == given or re.fullmatch(re.escape(given) + r"\d+", generated) is not None)


def _near_same_text(a: str, b: str, ratio: float = 0.9) -> bool:
    return difflib.SequenceMatcher(None, " ".join(a.lower().split()), " ".join(b.lower().split())).ratio() >= ratio


def _described(doc: dict[str, Any], side: str) -> list[tuple[str, str]]:
    return [(normalise_param_name(p["name"]), p.get("description") or "") for p in doc.get(side) or []]


def _description_of(doc: dict[str, Any], side: str, name: str) -> str:
    """The description of parameter ``name`` (any spelling: ``userId`` is ``user_id``) on ``side``, or ""."""
    key = normalise_param_name(name)
    return next((text for n, text in _described(doc, side) if n == key), "")


def _same_sentence(a: str, b: str) -> bool:
    """Two descriptions that say the same thing: near-identical and a sentence each (4 words or more; a word or
    two, such as "digest", says too little to call two things the same)."""
    return min(len(a.split()), len(b.split())) >= 4 and _near_same_text(a, b)


def _sentence_key(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


def restatement_reason(given: dict[str, Any], generated: dict[str, Any]) -> str | None:
    """Why ``generated`` restates the given API under another name (as the 1.5B model's accepted pairs did, read
    by hand: ``addCleanup`` for ``addClassCleanup``, ``_splitquery_to_path`` for ``_splitquery``,
    ``close_with_flush`` for ``close``), or None: it describes itself as the given API does, or as the given API
    and more (its whole description, then an option or an extra step), or it returns an output of the given API
    (the same name, described the same)."""
    generated_text, given_text = generated.get("description") or "", given.get("description") or ""
    if _same_sentence(generated_text, given_text):
        return f"{generated['name']!r} restates the given API {given['name']!r}: nearly the same description"
    if len(given_text.split()) >= 4 and _sentence_key(given_text) in _sentence_key(generated_text):
        return (f"{generated['name']!r} restates the given API {given['name']!r}: its description is the given API's "
                "with more words")
    given_outputs = _described(given, "output_params")
    for name, text in _described(generated, "output_params"):
        if text and any(name == n and _same_sentence(text, t) for n, t in given_outputs):
            return (f"{generated['name']!r} restates the given API {given['name']!r}: it returns {name!r}, which the "
                    "given API already returns, described the same")
    return None


def handover_restatement(given: dict[str, Any], generated: dict[str, Any], satisfied: int,
                         consumer_param: str) -> str | None:
    """Why a data-flow answer's hand-over passes no value of the given API (``satisfied`` 1: the generated API
    depends on the given one; 2: the reverse), or None. A generated dependent whose fed input
    ``consumer_param`` is described as an input of the given API, and as none of its outputs, takes what the
    given API takes, not what it returns (``datetime_to_time`` fed the datetime ``time()`` reads). A generated
    prerequisite that returns only its own inputs passes them through (``scan_mark_to_mark``): it produces
    nothing. A generated prerequisite that takes the fed input itself (its name, a type that fits) needs the
    value it is to supply (``shutdown_executor(wait)`` for ``shutdown(wait)``, ``find_pattern_in_string`` with all
    of ``subn``'s inputs); ``string_to_bytes(s: string)`` for ``nts(s: bytes)`` takes another value."""
    if satisfied == 1:
        fed = _description_of(generated, "input_params", consumer_param)
        if fed and any(_same_sentence(fed, t) for _, t in _described(given, "input_params")) and not any(
                _same_sentence(fed, t) for _, t in _described(given, "output_params")):
            return (f"input {consumer_param!r} of {generated['name']!r} is described as an input of the given API "
                    f"{given['name']!r}, not as one of its outputs: it takes what the given API takes")
        return None
    outputs = {name for name, _ in _described(generated, "output_params")}
    inputs = {name for name, _ in _described(generated, "input_params")}
    if outputs and outputs <= inputs:
        return f"{generated['name']!r} returns only its own inputs ({sorted(outputs)}): it passes them through"
    fed = normalise_param_name(consumer_param)
    if fed in inputs and types_compatible(param_type(generated, "input_params", consumer_param),
                                          param_type(given, "input_params", consumer_param)):
        return (f"{generated['name']!r} takes {consumer_param!r}, the very input of the given API {given['name']!r} it "
                "is to supply: it needs the value it should produce")
    return None


def passthrough_reason(dependent: dict[str, Any], prerequisite: dict[str, Any], producer_output: str) -> str | None:
    """Why a checked hand-over makes no new value, or None: the dependent returns an output described nearly as
    the prerequisite's ``producer_output`` it is handed (both sentences of 4 words or more; a looser bar than
    :func:`_same_sentence`, since a dependent that works on the value says what it made of it: "parsed",
    "filtered"). Then one of the two restates the other: ``is_filling`` handed ``filling()``'s fill state
    returns it again; ``convert_to_lowercase`` hands ``_generate_next_value_`` the lower-cased name that
    ``_generate_next_value_`` returns."""
    handed = _description_of(prerequisite, "output_params", producer_output)
    for name, text in _described(dependent, "output_params"):
        if min(len(handed.split()), len(text.split())) >= 4 and _near_same_text(handed, text, 0.8):
            return (f"{dependent['name']!r} returns {name!r}, described as the {producer_output!r} that "
                    f"{prerequisite['name']!r} hands it: the two make the same value, one restates the other")
    return None


def echo_reason(given: dict[str, Any], generated: dict[str, Any], kind: str = KIND_DATA) -> str | None:
    """Why ``generated`` is the given API again rather than another tool (small models echo): the same doc,
    the same name, the same name under a version or copy mark (:func:`renamed_copy`: ``break_here_v2``),
    the same input and output parameter names under another name, or the given API restated
    (:func:`restatement_reason`). In precondition mode the same parameters are common (a check and the call it
    guards act on one resource), so there they make an echo only with a near-identical description."""
    if doc_id(generated) == doc_id(given):
        return "identical document"
    if generated["name"].strip().lower() == given["name"].strip().lower():
        return f"same name {generated['name']!r}"
    if renamed_copy(given["name"], generated["name"]):
        return (f"{generated['name']!r} is the given API {given['name']!r} renamed (the same name without case, "
                "separators and version or copy marks)")
    if all(_param_names(generated, side) == _param_names(given, side) for side in ("input_params", "output_params")):
        if kind != KIND_PRECONDITION:
            return f"{generated['name']!r} has exactly the given API's input and output parameters"
        if _near_same_text(generated["description"], given["description"]):
            return f"{generated['name']!r} has the given API's parameters and nearly its description"
    return restatement_reason(given, generated)


def copied_example_reason(generated: dict[str, Any]) -> str | None:
    """Why ``generated`` is the worked example of agent 2's prompt rather than an API for the given one (a small
    model copies it, or renames it: ``find_tls_config`` for ``find_config_file``), or None: the example's name, or
    nearly its description."""
    for example in (CONSUMER_EXAMPLE, PRODUCER_EXAMPLE, PRECONDITION_EXAMPLE):
        if api_name_key(generated["name"]) == api_name_key(example["name"]) or _near_same_text(
                generated.get("description") or "", example["description"]):
            return f"{generated['name']!r} is the prompt's example {example['name']!r}, not an API for the given one"
    return None


def passed_value(prerequisite: dict[str, Any], dependent: dict[str, Any]) -> str | None:
    """How a value passes from ``prerequisite`` to ``dependent`` (an output of the first is, by name, an
    input of the second), or None: a precondition pair must pass none, else it is a data-flow pair."""
    inputs = input_param_names(dependent)
    for output in output_param_names(prerequisite):
        fed = match_param(output, inputs)
        if fed is not None:
            return (f"output {output!r} of {prerequisite['name']!r} (called first) is input {fed!r} of "
                    f"{dependent['name']!r}")
    return None


def interpret_generate(extracted: ExtractedDoc, result: StructuredResult) -> DependentPair | Outcome:
    """Agent 2's answer as a pair oriented by which API depends on which, or a generate rejection."""
    if not result.ok or result.value is None:
        return _failed("generate", result)
    value = result.value if extracted.kind == KIND_PRECONDITION else flat_answer(result.value)
    generated = _doc_of(value)
    errors = schema_errors(generated, "api_doc")
    if errors:
        return Outcome(result.item_id, "generate", "generate_schema_invalid", "; ".join(errors), canonical_doc_json(generated))
    echo = echo_reason(extracted.doc, generated, extracted.kind)
    if echo:
        return Outcome(result.item_id, "generate", "generate_echoed_input", echo, canonical_doc_json(generated))
    copied = copied_example_reason(generated)
    if copied:
        return Outcome(result.item_id, "generate", "generate_copied_example", copied, canonical_doc_json(generated))
    if extracted.kind == KIND_PRECONDITION:
        return _precondition_pair(extracted, generated, result)
    satisfied = int(value["satisfied"])
    dependent, prerequisite = (generated, extracted.doc) if satisfied == 1 else (extracted.doc, generated)
    asked = str(value.get("consumer_param") or "")
    inputs = input_param_names(dependent)
    consumer_param = match_param(asked, inputs)
    if consumer_param is None:
        side = "the generated" if satisfied == 1 else "the given"
        return Outcome(result.item_id, "generate", "generate_bad_consumer_param",
                       f"consumer_param {asked!r} is no input parameter of {side} dependent API {dependent['name']!r} "
                       f"(inputs: {inputs})", canonical_doc_json(generated))
    restated = handover_restatement(extracted.doc, generated, satisfied, consumer_param)
    if restated:
        return Outcome(result.item_id, "generate", "generate_echoed_input", restated, canonical_doc_json(generated))
    handover = check_handover(dependent, prerequisite, consumer_param, str(value.get("producer_output") or ""))
    if isinstance(handover, HandoverRejection):
        return Outcome(result.item_id, "generate", handover.reason, handover.detail, canonical_doc_json(generated))
    passes_through = passthrough_reason(dependent, prerequisite, handover)
    if passes_through:
        return Outcome(result.item_id, "generate", "generate_echoed_input", passes_through, canonical_doc_json(generated))
    return DependentPair(result.item_id, extracted.doc, generated, satisfied, consumer_param, handover)


@dataclass(frozen=True)
class HandoverRejection:
    reason: str  # generate_bad_producer_output | generate_type_mismatch
    detail: str


def check_handover(dependent: dict[str, Any], prerequisite: dict[str, Any], consumer_param: str,
                   asked_output: str) -> str | HandoverRejection:
    """The checked hand-over of a data-flow pair whose ``consumer_param`` is an input of ``dependent``:
    ``asked_output`` as the prerequisite spells it, or why it is rejected (stage generate): it names no
    output of the prerequisite (a declared output but the receiver, ``self``, or the one its name says it
    returns when it declares none; an input named as its output is said so) or another output than the one
    that has the input's name, or the two ends' declared types disagree
    (``schemas.parameters.types_compatible``). Run before agent 3 is asked, so the judge never sees them."""
    outputs = [o for o in output_param_names(prerequisite) if not _is_receiver(o)]
    producer_output = match_param(asked_output, outputs)
    if producer_output is None:
        name = prerequisite["name"]
        if not asked_output.strip():
            why = "is empty: agent 2 named no output"
        elif _is_receiver(asked_output):
            why = f"is the object {name!r} is called on, not a value it produces"
        elif match_param(asked_output, input_param_names(prerequisite)) is not None:
            why = f"is an input, not an output, of the prerequisite {name!r}"
        else:
            why = f"is no output of the prerequisite {name!r}"
        return HandoverRejection("generate_bad_producer_output",
                                 f"producer_output {asked_output!r} {why} (outputs: {outputs}) for consumer_param "
                                 f"{consumer_param!r} of {dependent['name']!r}")
    same_name = match_param(consumer_param, outputs)
    if same_name is not None and same_name != producer_output:  # _splitquery's path said to feed an input 'query'
        return HandoverRejection("generate_bad_producer_output",
                                 f"input {consumer_param!r} of {dependent['name']!r} is, by name, the output "
                                 f"{same_name!r} of {prerequisite['name']!r}, not {producer_output!r}")
    produced = param_type(prerequisite, "output_params", producer_output)
    consumed = param_type(dependent, "input_params", consumer_param)
    if not types_compatible(produced, consumed):
        return HandoverRejection("generate_type_mismatch",
                                 f"output {producer_output!r} of {prerequisite['name']!r} is {produced!r} but input "
                                 f"{consumer_param!r} of {dependent['name']!r} takes {consumed!r}")
    return producer_output


def _precondition_pair(extracted: ExtractedDoc, generated: dict[str, Any], result: StructuredResult) -> DependentPair | Outcome:
    # satisfied as in data-flow mode: 1, the generated API depends on (is called after) the given one
    satisfied = 1 if result.value["called_first"] == "given" else 2
    pair = DependentPair(result.item_id, extracted.doc, generated, satisfied, kind=KIND_PRECONDITION)
    passed = passed_value(pair.prerequisite, pair.dependent)
    if passed:
        return Outcome(result.item_id, "generate", "generate_precondition_passes_value",
                       f"{passed}: a data-flow pair, not a precondition", canonical_doc_json(generated))
    return pair


# -- agent 3: validate ------------------------------------------------------------------------
def validate_request(pair: DependentPair) -> StructuredRequest:
    """Agent 3's request: is there a parameter dependency (data pair), or is the order required
    (precondition pair; API A is the one called first)?"""
    if pair.kind == KIND_PRECONDITION:
        prompt, schema, schema_name = VALIDATE_PRECONDITION, VALIDATE_PRECONDITION_SCHEMA, "precondition_verdict"
        doc_a, doc_b = pair.prerequisite, pair.dependent
    else:
        prompt, schema, schema_name = VALIDATE, VALIDATE_SCHEMA, "dependency_verdict"
        doc_a, doc_b = pair.given, pair.generated
    return StructuredRequest(
        agent="validate",
        item_id=pair.record_id,
        messages=prompt.messages(doc_a=canonical_doc_json(doc_a), doc_b=canonical_doc_json(doc_b),
                                 schema=schema_text(schema)),
        schema_name=schema_name,
        schema=schema,
        prompt_version=prompt.version,
    )


def interpret_validate(pair: DependentPair, result: StructuredResult) -> DependentPair | Outcome:
    if not result.ok or result.value is None:
        return _failed("validate", result)
    if int(result.value["result"]) != 1:
        reason = "validate_order_not_required" if pair.kind == KIND_PRECONDITION else "validate_no_dependency"
        return Outcome(pair.record_id, "validate", reason, str(result.value.get("reason", "")), None)
    return pair
