"""Agents' answer interpretation: docs, direction, echoes and judge verdicts become pairs or reasons."""
from __future__ import annotations

from schemas.tdi import DependentPair
from tasks.agents.requests import ExtractedDoc, interpret_extract, interpret_generate, interpret_validate
from tasks.llm.structured import StructuredResult
from tasks.common.outcome import Outcome


def _doc(name, inputs, outputs):
    p = lambda n: {"name": n, "type": "string", "description": n}  # noqa: E731
    return {"name": name, "description": f"{name} api", "input_params": [p(i) for i in inputs], "output_params": [p(o) for o in outputs]}


GIVEN = ExtractedDoc("rec-1", _doc("login", ["user", "password"], ["token"]))


def _gen(doc, satisfied=1, consumer_param=None, producer_output=""):
    if consumer_param is None:  # the dependent's first input
        consumer_param = (doc if satisfied == 1 else GIVEN.doc)["input_params"][0]["name"]
    return StructuredResult("rec-1", True, value={"satisfied": satisfied, **doc, "consumer_param": consumer_param,
                                                  "producer_output": producer_output})


def test_extract_rejects_docs_outside_the_doc_schema_with_the_field():
    long_type = {**_doc("f", ["x"], []), "input_params": [{"name": "x", "type": "t" * 200, "description": "d"}]}
    out = interpret_extract(StructuredResult("rec-1", True, value=long_type))
    assert isinstance(out, Outcome) and out.reason == "extract_schema_invalid" and "input_params/0/type" in out.detail
    assert interpret_extract(StructuredResult("rec-1", True, value=_doc("f", ["x"], ["y"]))).doc["name"] == "f"


def test_generate_orients_the_pair_by_satisfied():
    consumer = _doc("update_email", ["token", "email"], ["status"])
    pair = interpret_generate(GIVEN, _gen(consumer, 1))
    assert (pair.dependent["name"], pair.prerequisite["name"]) == ("update_email", "login")
    producer = _doc("validate_user", ["user"], ["password"])
    pair = interpret_generate(GIVEN, _gen(producer, 2))
    assert (pair.dependent["name"], pair.prerequisite["name"]) == ("login", "validate_user")


def test_generate_keeps_the_consumer_parameter_and_the_producer_output():
    consumer = _doc("update_email", ["token", "email"], ["status"])
    pair = interpret_generate(GIVEN, _gen(consumer, 1, "token", "token"))
    assert (pair.consumer_param, pair.producer_output) == ("token", "token")
    # satisfied 2: the given API is the consumer; names are taken in the doc's own spelling
    producer = _doc("validate_user", ["user"], ["password"])
    pair = interpret_generate(GIVEN, _gen(producer, 2, " Password ", "PASSWORD"))
    assert (pair.consumer_param, pair.producer_output) == ("password", "password")
    # an output the prerequisite does not have is not known, and the pair stays
    pair = interpret_generate(GIVEN, _gen(consumer, 1, "token", "session_id"))
    assert (pair.consumer_param, pair.producer_output) == ("token", None)
    # a producer that declares no outputs: the output its name says it returns
    given = ExtractedDoc("rec-1", _doc("get_user_token", ["user"], []))
    pair = interpret_generate(given, _gen(consumer, 1, "token", "user_token"))
    assert pair.producer_output == "user_token"


def test_generate_rejects_a_consumer_param_that_is_no_input_of_the_dependent():
    consumer = _doc("update_email", ["token", "email"], ["status"])
    for satisfied, name, doc in ((1, "password", consumer), (1, "", consumer), (2, "token", _doc("validate_user", ["user"], ["password"]))):
        out = interpret_generate(GIVEN, _gen(doc, satisfied, name))
        assert isinstance(out, Outcome) and out.reason == "generate_bad_consumer_param", (satisfied, name)
        assert repr(name) in out.detail and out.raw_text
    # 'token' is an output of the given API (satisfied 2: the given API is the dependent), not an input
    assert "'login'" in out.detail and "['user', 'password']" in out.detail


def test_generate_rejects_echoes_of_the_given_api():
    for echo in (GIVEN.doc, {**GIVEN.doc, "description": "other words"}, _doc("sign_in", ["password", "user"], ["token"])):
        out = interpret_generate(GIVEN, _gen(echo))
        assert isinstance(out, Outcome) and out.reason == "generate_echoed_input" and out.raw_text


def test_failed_calls_and_judge_verdicts_keep_their_reasons():
    failed = StructuredResult("rec-1", False, reason="invalid_json", detail="Expecting value", raw_text="nope")
    for fn, stage in ((interpret_extract, "extract"),):
        out = fn(failed)
        assert (out.reason, out.raw_text) == (f"{stage}_invalid_json", "nope")
    pair = DependentPair("rec-1", GIVEN.doc, _doc("update_email", ["token"], ["status"]), 1)
    no = interpret_validate(pair, StructuredResult("rec-1", True, value={"result": 0, "reason": "no shared parameter"}))
    assert isinstance(no, Outcome) and no.reason == "validate_no_dependency" and no.detail == "no shared parameter"
    assert interpret_validate(pair, StructuredResult("rec-1", True, value={"result": 1, "reason": "token"})) is pair
