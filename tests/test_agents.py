"""Agents' answer interpretation: docs, direction, echoes and judge verdicts become pairs or reasons,
in both modes of agents 2 and 3 (data flow and precondition)."""
from __future__ import annotations

import hashlib
import json

from schemas.tdi import KIND_DATA, KIND_PRECONDITION, DependentPair
from tasks.agents import prompts
from tasks.agents.requests import (
    ExtractedDoc,
    generate_request,
    interpret_extract,
    interpret_generate,
    interpret_validate,
    pair_kind,
    validate_request,
)
from tasks.llm.structured import StructuredResult, parse_answer
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


# -- precondition mode ----------------------------------------------------------------------------
PRE_GIVEN = ExtractedDoc("rec-1", GIVEN.doc, KIND_PRECONDITION)


def _pre(doc, called_first="new", reason="it must run first"):
    return StructuredResult("rec-1", True, value={"called_first": called_first, **doc, "reason": reason})


def test_the_share_picks_the_mode_per_record_stably_and_monotonically():
    ids = [f"repo:file.py:func_{i}" for i in range(4000)]
    assert {pair_kind(i, 0.0) for i in ids} == {KIND_DATA} and {pair_kind(i, 1.0) for i in ids} == {KIND_PRECONDITION}
    at = {share: {i for i in ids if pair_kind(i, share) == KIND_PRECONDITION} for share in (0.25, 0.5)}
    for share, chosen in at.items():
        assert abs(len(chosen) / len(ids) - share) < 0.03, (share, len(chosen))
        assert chosen == {i for i in ids if pair_kind(i, share) == KIND_PRECONDITION}  # a rerun: the same records
    assert at[0.25] < at[0.5]  # a larger share only adds records
    # agent 1's doc carries the mode; without a share (mine-tdi's review, older callers) it is data flow
    answer = StructuredResult(ids[0], True, value=_doc("f", ["x"], ["y"]))
    assert interpret_extract(answer).kind == KIND_DATA
    assert interpret_extract(answer, 1.0).kind == KIND_PRECONDITION


def test_each_mode_sends_its_own_prompt_and_schema_and_the_data_flow_prompts_are_unchanged():
    data, pre = generate_request(GIVEN), generate_request(PRE_GIVEN)
    assert (data.schema_name, data.prompt_version) == ("dependent_api_doc", prompts.GENERATE_DEPENDENT.version)
    assert (pre.schema_name, pre.prompt_version) == ("precondition_api_doc", prompts.GENERATE_PRECONDITION.version)
    assert "consumer_param" not in json.dumps(pre.messages) and "consumer_param" not in pre.schema["properties"]
    assert json.loads(prompts.schema_text(pre.schema)) == prompts.GENERATE_PRECONDITION_SCHEMA
    versions = list(prompts.PROMPT_VERSIONS.values())
    assert len(versions) == len(set(versions)) == 5 and len(set(prompts.PROMPT_VERSIONS)) == 5
    # the wording behind each data-flow version is the one the existing caches answered: a change of
    # wording must come with a new version (and then this table's new entry)
    wording = {p.version: hashlib.sha256((p.system + "\0" + p.user_template).encode()).hexdigest()[:16]
               for p in (prompts.EXTRACT, prompts.GENERATE_DEPENDENT, prompts.VALIDATE)}
    assert wording == {"extract-v3": "eb6555fbea760545", "generate-dependent-v5": "99bd7e4ff35e6ba4",
                       "validate-v2": "e31078c7810cc785"}


def test_a_precondition_answer_becomes_a_pair_of_kind_precondition_oriented_by_called_first():
    check = _doc("check_account_active", ["user"], ["active"])
    pair = interpret_generate(PRE_GIVEN, _pre(check, "new"))
    assert isinstance(pair, DependentPair) and pair.kind == KIND_PRECONDITION
    assert (pair.prerequisite["name"], pair.dependent["name"], pair.satisfied) == ("check_account_active", "login", 2)
    assert (pair.consumer_param, pair.producer_output) == (None, None)
    logout = _doc("logout", ["user"], ["done"])
    pair = interpret_generate(PRE_GIVEN, _pre(logout, "given"))
    assert (pair.prerequisite["name"], pair.dependent["name"], pair.satisfied) == ("login", "logout", 1)
    # the judge sees the API called first as A, and is asked whether the order is required
    request = validate_request(pair)
    assert (request.schema_name, request.prompt_version) == ("precondition_verdict", prompts.VALIDATE_PRECONDITION.version)
    user = request.messages[1][1]
    assert user.index('"name":"login"') < user.index('"name":"logout"') and "required" in user
    data_pair = DependentPair("rec-1", GIVEN.doc, _doc("update_email", ["token"], ["status"]), 1, "token", "token")
    assert validate_request(data_pair).prompt_version == prompts.VALIDATE.version
    assert interpret_validate(pair, StructuredResult("rec-1", True, value={"result": 1, "reason": "no session"})) is pair


def test_a_precondition_answer_that_passes_a_value_is_rejected_as_data_flow():
    # the new API is called first and its output 'user' is an input of the given API: data flows
    out = interpret_generate(PRE_GIVEN, _pre(_doc("find_user", ["email"], ["user"]), "new"))
    assert isinstance(out, Outcome) and (out.stage, out.reason) == ("generate", "generate_precondition_passes_value")
    assert "'user'" in out.detail and "'find_user'" in out.detail and out.raw_text
    # the given API is called first and the new one takes its 'token' (spelled otherwise)
    out = interpret_generate(PRE_GIVEN, _pre(_doc("get_profile", ["Token"], ["profile"]), "given"))
    assert out.reason == "generate_precondition_passes_value" and "'token'" in out.detail
    # an answer that names a parameter fed (the data-flow fields) is outside the precondition schema
    named = {"called_first": "new", **_doc("check_user", ["email"], ["ok"]), "reason": "r", "consumer_param": "user",
             "producer_output": "ok"}
    value, reason, detail = parse_answer(json.dumps(named), prompts.GENERATE_PRECONDITION_SCHEMA)
    assert value is None and reason == "schema_invalid" and "consumer_param" in detail
    failed = interpret_generate(PRE_GIVEN, StructuredResult("rec-1", False, reason=reason, detail=detail, raw_text=json.dumps(named)))
    assert failed.reason == "generate_schema_invalid"


def test_a_precondition_answer_that_is_the_given_api_again_is_rejected():
    near = {**GIVEN.doc, "name": "sign_in", "description": "Login API."}
    for echo in (GIVEN.doc, {**GIVEN.doc, "description": "other words", "input_params": []}, near):
        out = interpret_generate(PRE_GIVEN, _pre(echo))
        assert isinstance(out, Outcome) and out.reason == "generate_echoed_input" and out.raw_text, echo
    # the same parameters with another purpose are a precondition's usual shape (a check on one resource),
    # though the data-flow mode takes them for an echo
    guard = {**_doc("lock_account", ["user", "password"], ["token"]), "description": "Locks the account against other sessions."}
    assert interpret_generate(PRE_GIVEN, _pre(guard, "new")).kind == KIND_PRECONDITION
    assert interpret_generate(GIVEN, _gen(guard)).reason == "generate_echoed_input"


def test_the_precondition_judge_refusing_the_order_rejects_with_its_reason():
    pair = interpret_generate(PRE_GIVEN, _pre(_doc("check_account_active", ["user"], ["active"])))
    out = interpret_validate(pair, StructuredResult("rec-1", True, value={"result": 0, "reason": "usual, not required"}))
    assert isinstance(out, Outcome) and (out.stage, out.reason, out.detail) == ("validate", "validate_order_not_required", "usual, not required")
    failed = interpret_validate(pair, StructuredResult("rec-1", False, reason="truncated", detail="cut", raw_text="{"))
    assert (failed.reason, failed.raw_text) == ("validate_truncated", "{")
