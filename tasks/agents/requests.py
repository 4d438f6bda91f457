"""The three agents: build each agent's requests and turn its answers into docs, pairs or rejections
(:class:`tasks.common.outcome.Outcome`, stage extract, generate or validate)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.docs import canonical_doc_json, doc_id, schema_errors
from tasks.llm.structured import StructuredRequest, StructuredResult
from tasks.common.outcome import Outcome
from schemas.parameters import input_param_names, match_param, output_param_names
from schemas.tdi import DependentPair
from tasks.agents.prompts import EXTRACT, EXTRACT_SCHEMA, GENERATE_DEPENDENT, GENERATE_SCHEMA, VALIDATE, VALIDATE_SCHEMA
from tasks.llm.prompt import schema_text

DOC_KEYS = ("name", "description", "input_params", "output_params")


@dataclass(frozen=True)
class ExtractedDoc:
    record_id: str
    doc: dict[str, Any]


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


def interpret_extract(result: StructuredResult) -> ExtractedDoc | Outcome:
    if not result.ok or result.value is None:
        return _failed("extract", result)
    doc = _doc_of(result.value)
    errors = schema_errors(doc, "api_doc")
    if errors:
        return Outcome(result.item_id, "extract", "extract_schema_invalid", "; ".join(errors), None)
    return ExtractedDoc(result.item_id, doc)


# -- agent 2: generate a dependent API ----------------------------------------------------------
def generate_request(extracted: ExtractedDoc) -> StructuredRequest:
    return StructuredRequest(
        agent="generate",
        item_id=extracted.record_id,
        messages=GENERATE_DEPENDENT.messages(doc=canonical_doc_json(extracted.doc), schema=schema_text(GENERATE_SCHEMA)),
        schema_name="dependent_api_doc",
        schema=GENERATE_SCHEMA,
        prompt_version=GENERATE_DEPENDENT.version,
    )


def _param_names(doc: dict[str, Any], side: str) -> frozenset[str]:
    return frozenset(p["name"].strip().lower() for p in doc[side])


def echo_reason(given: dict[str, Any], generated: dict[str, Any]) -> str | None:
    """Why ``generated`` is the given API again rather than another tool (small models echo)."""
    if doc_id(generated) == doc_id(given):
        return "identical document"
    if generated["name"].strip().lower() == given["name"].strip().lower():
        return f"same name {generated['name']!r}"
    if all(_param_names(generated, side) == _param_names(given, side) for side in ("input_params", "output_params")):
        return f"{generated['name']!r} has exactly the given API's input and output parameters"
    return None


def interpret_generate(extracted: ExtractedDoc, result: StructuredResult) -> DependentPair | Outcome:
    if not result.ok or result.value is None:
        return _failed("generate", result)
    generated = _doc_of(result.value)
    errors = schema_errors(generated, "api_doc")
    if errors:
        return Outcome(result.item_id, "generate", "generate_schema_invalid", "; ".join(errors), canonical_doc_json(generated))
    echo = echo_reason(extracted.doc, generated)
    if echo:
        return Outcome(result.item_id, "generate", "generate_echoed_input", echo, canonical_doc_json(generated))
    satisfied = int(result.value["satisfied"])
    dependent, prerequisite = (generated, extracted.doc) if satisfied == 1 else (extracted.doc, generated)
    asked = str(result.value.get("consumer_param") or "")
    inputs = input_param_names(dependent)
    consumer_param = match_param(asked, inputs)
    if consumer_param is None:
        side = "the generated" if satisfied == 1 else "the given"
        return Outcome(result.item_id, "generate", "generate_bad_consumer_param",
                       f"consumer_param {asked!r} is no input parameter of {side} dependent API {dependent['name']!r} "
                       f"(inputs: {inputs})", canonical_doc_json(generated))
    # an output that the prerequisite does not have is not known: null, never a guess
    producer_output = match_param(str(result.value.get("producer_output") or ""), output_param_names(prerequisite))
    return DependentPair(result.item_id, extracted.doc, generated, satisfied, consumer_param, producer_output)


# -- agent 3: validate ------------------------------------------------------------------------
def validate_request(pair: DependentPair) -> StructuredRequest:
    return StructuredRequest(
        agent="validate",
        item_id=pair.record_id,
        messages=VALIDATE.messages(
            doc_a=canonical_doc_json(pair.given),
            doc_b=canonical_doc_json(pair.generated),
            schema=schema_text(VALIDATE_SCHEMA),
        ),
        schema_name="dependency_verdict",
        schema=VALIDATE_SCHEMA,
        prompt_version=VALIDATE.version,
    )


def interpret_validate(pair: DependentPair, result: StructuredResult) -> DependentPair | Outcome:
    if not result.ok or result.value is None:
        return _failed("validate", result)
    if int(result.value["result"]) != 1:
        return Outcome(pair.record_id, "validate", "validate_no_dependency", str(result.value.get("reason", "")), None)
    return pair
