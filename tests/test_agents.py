"""Agents' answer interpretation: docs, direction, echoes and judge verdicts become pairs or reasons,
in both modes of agents 2 and 3 (data flow and precondition)."""
from __future__ import annotations

import hashlib
import json

from schemas.tdi import KIND_DATA, KIND_PRECONDITION, DependentPair
from tasks.agents import prompts
from tasks.agents.requests import (
    REPAIRABLE,
    ExtractedDoc,
    generate_request,
    interpret_extract,
    interpret_generate,
    interpret_validate,
    pair_kind,
    repair_request,
    validate_request,
)
from tasks.llm.structured import StructuredResult, parse_answer
from tasks.common.outcome import Outcome


def _doc(name, inputs, outputs):
    p = lambda n: {"name": n, "type": "string", "description": n}  # noqa: E731
    return {"name": name, "description": f"{name} api", "input_params": [p(i) for i in inputs], "output_params": [p(o) for o in outputs]}


GIVEN = ExtractedDoc("rec-1", _doc("login", ["user", "password"], ["token"]))


def structured(doc, satisfied, consumer_param, producer_output):
    """Agent 2's data-flow answer for the new API ``doc``: the shape of the consumer schema (satisfied 1: the
    fed input is ``consumer_param``, an input of ``doc``) or of the producer schema (2: the fed output is
    ``producer_output``, an output of ``doc``)."""
    if satisfied == 1:
        fed = next(p for p in doc["input_params"] if p["name"] == consumer_param)
        return {"producer_output": producer_output, "name": doc["name"], "description": doc["description"], "fed_input": fed,
                "other_input_params": [p for p in doc["input_params"] if p is not fed], "output_params": doc["output_params"]}
    fed = next(p for p in doc["output_params"] if p["name"] == producer_output)
    return {"consumer_param": consumer_param, "name": doc["name"], "description": doc["description"],
            "input_params": doc["input_params"], "fed_output": fed,
            "other_output_params": [p for p in doc["output_params"] if p is not fed]}


def _gen(doc, satisfied=1, consumer_param=None, producer_output=None):
    if consumer_param is None:  # the dependent's first input
        consumer_param = (doc if satisfied == 1 else GIVEN.doc)["input_params"][0]["name"]
    if producer_output is None:  # the prerequisite's first output
        producer_output = ((GIVEN.doc if satisfied == 1 else doc)["output_params"] or [{"name": ""}])[0]["name"]
    return StructuredResult("rec-1", True, value=structured(doc, satisfied, consumer_param, producer_output))


def test_extract_rejects_docs_outside_the_doc_schema_with_the_field():
    long_type = {**_doc("f", ["x"], []), "input_params": [{"name": "x", "type": "t" * 200, "description": "d"}]}
    out = interpret_extract(StructuredResult("rec-1", True, value=long_type))
    assert isinstance(out, Outcome) and out.reason == "extract_schema_invalid" and "input_params/0/type" in out.detail
    assert interpret_extract(StructuredResult("rec-1", True, value=_doc("f", ["x"], ["y"]))).doc["name"] == "f"


def test_generate_orients_the_pair_by_satisfied():
    consumer = _doc("update_email", ["token", "email"], ["status"])
    pair = interpret_generate(GIVEN, _gen(consumer, 1))
    assert (pair.dependent["name"], pair.prerequisite["name"]) == ("update_email", "login")
    producer = _doc("find_user", ["email"], ["password"])
    pair = interpret_generate(GIVEN, _gen(producer, 2))
    assert (pair.dependent["name"], pair.prerequisite["name"]) == ("login", "find_user")


def test_generate_keeps_the_consumer_parameter_and_the_producer_output():
    consumer = _doc("update_email", ["token", "email"], ["status"])
    pair = interpret_generate(GIVEN, _gen(consumer, 1, "token", "token"))
    assert (pair.consumer_param, pair.producer_output) == ("token", "token")
    # satisfied 2: the given API is the consumer; its input is taken in the doc's own spelling
    producer = _doc("validate_user", ["user"], ["password"])
    pair = interpret_generate(GIVEN, _gen(producer, 2, " Password ", "password"))
    assert (pair.consumer_param, pair.producer_output) == ("password", "password")
    # a producer that declares no outputs: the output its name says it returns
    given = ExtractedDoc("rec-1", _doc("get_user_token", ["user"], []))
    pair = interpret_generate(given, _gen(consumer, 1, "token", "user_token"))
    assert pair.producer_output == "user_token"


def test_generate_rejects_a_consumer_param_that_is_no_input_of_the_dependent():
    # satisfied 1: the fed input is a parameter of the new API by the answer's shape (fed_input); satisfied 2:
    # the answer names the given API's input, which the request's enum holds to its inputs but a server that
    # does not enforce the schema's enum may not
    producer = _doc("validate_user", ["user"], ["password"])
    for name in ("token", "", "email"):
        out = interpret_generate(GIVEN, _gen(producer, 2, name, "password"))
        assert isinstance(out, Outcome) and out.reason == "generate_bad_consumer_param", name
        assert repr(name) in out.detail and out.raw_text
    # 'email' is no input of the given API (satisfied 2: the given API is the dependent)
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
    assert (data.schema_name, data.prompt_version) in {("consumer_api_doc", prompts.GENERATE_CONSUMER.version),
                                                       ("producer_api_doc", prompts.GENERATE_PRODUCER.version)}
    assert (pre.schema_name, pre.prompt_version) == ("precondition_api_doc", prompts.GENERATE_PRECONDITION.version)
    assert "consumer_param" not in json.dumps(pre.messages) and "consumer_param" not in pre.schema["properties"]
    assert json.loads(prompts.schema_text(pre.schema)) == prompts.GENERATE_PRECONDITION_SCHEMA
    versions = list(prompts.PROMPT_VERSIONS.values())
    assert len(versions) == len(set(versions)) == 7 and len(set(prompts.PROMPT_VERSIONS)) == 7
    # the wording behind each data-flow version is the one the existing caches answered: a change of
    # wording must come with a new version (and then this table's new entry)
    wording = {p.version: hashlib.sha256((p.system + "\0" + p.user_template).encode()).hexdigest()[:16]
               for p in (prompts.EXTRACT, prompts.GENERATE_CONSUMER, prompts.GENERATE_PRODUCER, prompts.VALIDATE)}
    assert wording == {"extract-v4": "0cda66778190ab93", "generate-consumer-v1": "c5d970121fad9e84", "generate-producer-v1": "4db2331231f3d06b",
                       "validate-v3": "0f45ea2a4b2aee11"}


def test_a_data_flow_request_names_the_given_apis_end_of_the_handover_as_an_enum_after_the_doc():
    from tasks.agents.requests import handover_side

    ids = [f"repo:f.py:func_{i}" for i in range(400)]
    sides = [handover_side(ExtractedDoc(i, GIVEN.doc)).satisfied for i in ids]
    assert abs(sides.count(1) / len(ids) - 0.5) < 0.1  # both directions open: a seeded coin per record
    assert sides == [handover_side(ExtractedDoc(i, GIVEN.doc)).satisfied for i in ids]  # the same on a rerun
    consumer = generate_request(ExtractedDoc(ids[sides.index(1)], GIVEN.doc))
    producer = generate_request(ExtractedDoc(ids[sides.index(2)], GIVEN.doc))
    assert consumer.schema["properties"]["producer_output"] == {"type": "string", "enum": ["token"]}
    assert producer.schema["properties"]["consumer_param"] == {"type": "string", "enum": ["user", "password"]}
    for request, shown, tail in ((consumer, prompts.GENERATE_CONSUMER_SCHEMA, "Its outputs to choose from: `token` (string)."),
                                 (producer, prompts.GENERATE_PRODUCER_SCHEMA,
                                  "Its inputs to choose from: `user` (string), `password` (string).")):
        user = request.messages[1][1]
        # the prompt shows the schema without the record's names (a prefix llama.cpp reuses), then the doc, then the names
        assert prompts.schema_text(shown) in user and '"enum"' not in user and user.endswith(tail)
        assert user.index("The given API:") < user.index(tail)
    # one direction open: the receiver is produced by no API, and an output None is no value
    only_out = _typed("now", [("self", "object")], [("time", "datetime")])
    assert handover_side(ExtractedDoc("r", only_out)).satisfied == 1
    only_in = _typed("close", [("self", "object"), ("timeout", "number"), ("*args", "tuple")], [("None", "none")])
    assert handover_side(ExtractedDoc("r", only_in)) == type(handover_side(ExtractedDoc("r", only_in)))(2, ("timeout",))
    # an answer that copies the prompt's worked example (its name), or renames it (nearly its description), is no
    # API for the given one: the run's find_tls_config for find_config_file
    tls = {**_doc("find_tls_config", ["app_name"], ["user"]), "description": "Finds the TLS configuration file of an application."}
    for answer in (_gen(_doc("count_words", ["token"], ["count"]), 1, "token", "token"),
                   _gen(_doc("find_config_file", ["app_name"], ["user"]), 2, "user", "user"), _gen(tls, 2, "user", "user")):
        out = interpret_generate(GIVEN, answer)
        assert isinstance(out, Outcome) and out.reason == "generate_copied_example" and out.reason in REPAIRABLE, out
    # the precondition prompt's example too
    example = {k: prompts.PRECONDITION_EXAMPLE[k] for k in ("name", "description", "input_params", "output_params")}
    assert interpret_generate(PRE_GIVEN, _pre(example)).reason == "generate_copied_example"
    # none open: a recorded rejection, and no request; an output the name alone suggests (tool sets' rule) is
    # no value here, where agent 1 read the code and declared none
    for nothing in (_typed("update", [("self", "object")], [("None", "none")]), _typed("close", [], [])):
        out = generate_request(ExtractedDoc("rec-7", nothing))
        assert isinstance(out, Outcome) and (out.stage, out.reason) == ("generate", "generate_nothing_to_hand_over")
        assert repr(nothing["name"]) in out.detail and out.raw_text


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


# -- the hand-over check before agent 3 (issue 23 item 3) ---------------------------------------------
def _typed(name, inputs, outputs):
    """A doc whose parameters are (name, type) pairs."""
    p = lambda n, t: {"name": n, "type": t, "description": n}  # noqa: E731
    return {"name": name, "description": f"{name} api", "input_params": [p(*i) for i in inputs],
            "output_params": [p(*o) for o in outputs]}


def test_a_producer_output_that_is_no_output_of_the_prerequisite_is_rejected_before_the_judge():
    consumer = _doc("update_email", ["token", "email"], ["status"])
    cases = {"session_id": "is no output of the prerequisite 'login'",
             "password": "is an input, not an output, of the prerequisite 'login'",
             "": "is empty"}
    for asked, why in cases.items():
        out = interpret_generate(GIVEN, _gen(consumer, 1, "token", asked))
        assert isinstance(out, Outcome) and (out.stage, out.reason) == ("generate", "generate_bad_producer_output"), asked
        assert why in out.detail and "(outputs: ['token'])" in out.detail and "'update_email'" in out.detail and out.raw_text
    # the case: lognormvariate_inverse fed by the given API's input mu
    given = ExtractedDoc("rec-2", _typed("lognormvariate", [("mu", "number"), ("sigma", "number")], [("value", "number")]))
    inverse = _typed("lognormvariate_inverse", [("mu", "number"), ("value", "number")], [("x", "number")])
    answer = StructuredResult("rec-2", True, value=structured(inverse, 1, "mu", "mu"))
    out = interpret_generate(given, answer)
    assert out.reason == "generate_bad_producer_output" and "'mu' is an input, not an output" in out.detail
    # a prerequisite that declares no outputs: the one its name says it returns, and nothing else
    named = ExtractedDoc("rec-1", _doc("get_user_token", ["user"], []))
    assert interpret_generate(named, _gen(consumer, 1, "token", "user_token")).producer_output == "user_token"
    assert interpret_generate(named, _gen(consumer, 1, "token", "token")).reason == "generate_bad_producer_output"


def test_a_handover_whose_declared_types_disagree_is_rejected():
    # the case: a generated tzname_to_datetime whose string tzname is "taken from" the datetime dt
    given = ExtractedDoc("rec-3", _typed("astimezone", [("tz", "string")], [("dt", "datetime")]))
    tz = _typed("tzname_to_datetime", [("tzname", "string")], [("dt", "datetime")])
    answer = StructuredResult("rec-3", True, value=structured(tz, 1, "tzname", "dt"))
    out = interpret_generate(given, answer)
    assert isinstance(out, Outcome) and (out.stage, out.reason) == ("generate", "generate_type_mismatch")
    assert out.detail == "output 'dt' of 'astimezone' is 'datetime' but input 'tzname' of 'tzname_to_datetime' takes 'string'"
    # the same hand-over with agreeing types (an integer fits a number; an undeclared type passes) is a pair
    for produced, consumed in (("datetime", "datetime"), ("integer", "number"), ("", "string"), ("any", "string")):
        given = ExtractedDoc("rec-3", _typed("astimezone", [("tz", "string")], [("dt", produced)]))
        ok = _typed("format_datetime", [("dt", consumed)], [("text", "string")])
        pair = interpret_generate(given, StructuredResult("rec-3", True, value=structured(ok, 1, "dt", "dt")))
        assert isinstance(pair, DependentPair) and (pair.consumer_param, pair.producer_output) == ("dt", "dt"), (produced, consumed)


def test_a_generated_api_that_is_the_given_one_renamed_is_an_echo():
    given = ExtractedDoc("rec-4", _doc("break_here", ["frame"], ["stopped"]))
    for name in ("break_here_v2", "BreakHereV2", "break-here-new", "break_here_copy", "break_here2", "breakHereAlt"):
        renamed = _doc(name, ["stopped"], ["report"])  # other parameters: only the name gives it away
        out = interpret_generate(given, _gen(renamed, 1, "stopped", "stopped"))
        assert isinstance(out, Outcome) and out.reason == "generate_echoed_input", name
        assert "is the given API 'break_here' renamed" in out.detail
    # its parameters under another name are an echo too, whatever their spelling
    same = _doc("halt_at_line", ["Frame"], ["stopped"])
    assert "exactly the given API's input and output parameters" in interpret_generate(given, _gen(same, 1, "Frame", "stopped")).detail
    # a different tool whose name shares words or digits is none
    for name in ("break_here_report", "clear_break", "here_break"):
        assert isinstance(interpret_generate(given, _gen(_doc(name, ["stopped"], ["report"]), 1, "stopped", "stopped")), DependentPair), name
    # the same call with an option (a trailing "with ..."), as the embedded model answered for close and map_async
    for name in ("close_with_flush", "mapAsyncWithErrorCallback"):
        given = ExtractedDoc("rec-4", _doc(name.split("_with")[0].split("With")[0], ["frame"], ["stopped"]))
        out = interpret_generate(given, _gen(_doc(name, ["stopped"], ["report"]), 1, "stopped", "stopped"))
        assert out.reason == "generate_echoed_input" and "renamed" in out.detail, name
    assert isinstance(interpret_generate(ExtractedDoc("rec-4", _doc("with_retry", ["frame"], ["stopped"])),
                                         _gen(_doc("with_timeout", ["stopped"], ["report"]), 1, "stopped", "stopped")), DependentPair)
    md5 = ExtractedDoc("rec-5", _doc("hash_md5", ["data"], ["digest"]))
    assert isinstance(interpret_generate(md5, _gen(_doc("hash_md4", ["digest"], ["ok"]), 1, "digest", "digest")), DependentPair)


def test_type_compatibility_table():
    from schemas.parameters import types_compatible

    agree = [("string", "str"), ("int", "integer"), ("integer", "number"), ("float", "number"), ("bool", "boolean"),
             ("list", "array"), ("tuple", "sequence"), ("list of str", "list[str]"), ("dict", "object"), ("mapping", "dict"),
             ("Optional[int]", "int"), ("str | None", "string"), ("int or float", "float"), ("datetime", "datetime.datetime"),
             ("any", "bytes"), ("unknown", "int"), ("", "string"), (None, "string"), ("datetime", "object"),
             ("Path", "PathLike"), ("object", "dict"), ("OrderedDict", "dict"), ("json", "mapping")]
    disagree = [("datetime", "string"), ("string", "datetime"), ("number", "integer"), ("string", "integer"),
                ("bytes", "string"), ("list", "dict"), ("none", "string"), ("bool", "list"), ("Optional[str]", "int"),
                ("Widget", "dict"), ("dict", "Widget"), ("object", "string"), ("none", "object")]
    assert [pair for pair in agree if not types_compatible(*pair)] == []
    assert [pair for pair in disagree if types_compatible(*pair)] == []


def test_a_discarded_answer_is_asked_again_in_the_same_conversation_with_its_reason():
    asked = generate_request(GIVEN)
    echo = _gen(_doc("login_v2", ["user", "password"], ["token"]))
    rejection = interpret_generate(GIVEN, echo)
    assert isinstance(rejection, Outcome) and rejection.reason == "generate_echoed_input"
    again = repair_request(asked, echo, rejection)
    assert again.messages[:2] == asked.messages  # the same conversation: the prompt llama.cpp has cached
    (role, said), (last_role, last) = again.messages[2], again.messages[3]
    assert role == "assistant" and json.loads(said)["name"] == "login_v2" and last_role == "user"
    assert last.startswith(f"That answer is discarded: {rejection.detail.rstrip('. ')}. Answer again")
    assert (again.schema, again.agent, again.item_id) == (asked.schema, "generate", asked.item_id)
    assert again.prompt_version == f"{asked.prompt_version}+{prompts.GENERATE_REPAIR.version}"
    assert asked.prompt_version in (prompts.GENERATE_CONSUMER.version, prompts.GENERATE_PRODUCER.version)
    # a failed call or an unparsed answer is the client's to retry, not a check's to explain
    failed = StructuredResult("rec-1", False, reason="parse_failed", detail="not JSON")
    assert repair_request(asked, failed, Outcome("rec-1", "generate", "generate_parse_failed", "not JSON")) is None
    assert repair_request(asked, echo, Outcome("rec-1", "generate", "generate_schema_invalid", "x")) is None


# -- a generated API that restates the given one (the 160-function run's accepted pairs, bench/RESULTS.md) --------
def _described_doc(name, description, inputs, outputs):
    """A doc whose parameters are (name, type, description) triples."""
    p = lambda n, t, d: {"name": n, "type": t, "description": d}  # noqa: E731
    return {"name": name, "description": description, "input_params": [p(*i) for i in inputs],
            "output_params": [p(*o) for o in outputs]}


def _answer(doc, satisfied, consumer_param, producer_output):
    return StructuredResult("rec-9", True, value=structured(doc, satisfied, consumer_param, producer_output))


def test_a_generated_api_that_restates_the_given_one_is_an_echo():
    time = ExtractedDoc("rec-9", _described_doc(
        "time", "Return the time part of the datetime object, with tzinfo None.",
        [("self", "datetime", "The datetime object from which to extract the time part.")],
        [("time", "datetime", "The time part of the datetime object, with tzinfo None.")]))
    to_time = _described_doc("datetime_to_time", "Extract the time part of a datetime object without timezone information.",
                             [("datetime", "datetime", "The datetime object from which to extract the time part.")],
                             [("time", "datetime", "The time part of the datetime object, without timezone information.")])
    split = ExtractedDoc("rec-9", _described_doc(
        "_splitquery", "Splits a URL into its path and query components.", [("url", "string", "The URL to be split.")],
        [("path", "string", "The path part of the URL."), ("query", "string", "The query part of the URL, or None.")]))
    to_path = _described_doc("_splitquery_to_path", "Extracts the path part from a URL.",
                             [("url", "string", "The URL to extract the path from.")],
                             [("path", "string", "The path part of the URL.")])
    cleanup_text = "Adds a cleanup function to the class that will be called after setUpClass, even if it fails."
    class_cleanup = ExtractedDoc("rec-9", _described_doc(
        "addClassCleanup", cleanup_text, [("cls", "class", "The class to which the cleanup function will be added."),
                                          ("function", "function", "The cleanup function to be added to the class.")], []))
    add_cleanup = _described_doc("addCleanup", cleanup_text, [("cls", "class", "The class to which the cleanup function will be added.")],
                                 [("function", "function", "The cleanup function to be added to the class.")])
    mark = ExtractedDoc("rec-9", _described_doc("scan_mark", "Remembers the current X, Y coordinates.",
                                                [("x", "integer", "The X coordinate to mark."), ("y", "integer", "The Y coordinate to mark.")], []))
    mark_again = _described_doc("scan_mark_to_mark", "Marks the given X, Y coordinates once more.",
                                [("x", "integer", "The X coordinate to mark."), ("y", "integer", "The Y coordinate to mark.")],
                                [("x", "integer", "The X coordinate to mark."), ("y", "integer", "The Y coordinate to mark.")])
    cases = [(time, _answer(to_time, 1, "datetime", "time"), "takes what the given API takes"),
             (split, _answer(to_path, 1, "url", "path"), "it returns 'path', which the given API already returns"),
             (class_cleanup, _answer(add_cleanup, 2, "function", "function"), "nearly the same description"),
             (mark, _answer(mark_again, 2, "y", "y"), "returns only its own inputs")]
    # the given API's whole description and more (this session's run: an IMAP socket "and additional operations")
    imap = ExtractedDoc("rec-9", _described_doc("socket", "Returns the socket instance used to connect to an IMAP4 server.", [],
                                                [("socket", "object", "The socket instance.")]))
    more = _described_doc("imap_socket", "Returns the socket instance used to connect to an IMAP4 server and performs "
                          "additional operations on it.", [("socket", "object", "The socket instance.")],
                          [("operations", "object", "What was done.")])
    cases.append((imap, _answer(more, 1, "socket", "socket"), "its description is the given API's with more words"))
    for given, answer, why in cases:
        out = interpret_generate(given, answer)
        assert isinstance(out, Outcome) and out.reason == "generate_echoed_input" and why in out.detail, why
        assert out.reason in REPAIRABLE  # agent 2 is asked again, told why
    # the run's one right pair: string_to_bytes writes the null-terminated bytes that tarfile's nts reads
    nts = ExtractedDoc("rec-9", _described_doc(
        "nts", "Convert a null-terminated bytes object to a string.",
        [("s", "bytes", "The null-terminated bytes object to convert."),
         ("encoding", "string", "The encoding to use for decoding the bytes object.")],
        [("s", "string", "The converted string.")]))
    to_bytes = _described_doc("string_to_bytes", "Convert a string to a null-terminated bytes object.",
                              [("s", "string", "The string to convert."),
                               ("encoding", "string", "The encoding to use for encoding the string.")],
                              [("bytes", "bytes", "The null-terminated bytes object.")])
    assert isinstance(interpret_generate(nts, _answer(to_bytes, 2, "s", "bytes")), DependentPair)
    # a prerequisite that reads an input the given API also takes, and returns what it lacks, is a real producer
    transfer = ExtractedDoc("rec-9", _described_doc(
        "transfer", "Transfer money from one of the user's accounts to another person.",
        [("user_id", "string", "The id of the user who sends the money."), ("account_id", "string", "The account to debit.")],
        [("status", "string", "Whether the transfer went through.")]))
    account = _described_doc("get_account", "Look up the main account of a user by the user's id.",
                             [("user_id", "string", "The id of the user who sends the money.")],
                             [("account_id", "string", "The id of the user's main account.")])
    assert isinstance(interpret_generate(transfer, _answer(account, 2, "account_id", "account_id")), DependentPair)
    # a hand-over from another output than the one that has the fed input's name (an accepted pair of a 24-function run)
    to_query = _described_doc("splitquery_to_path", "Converts the query part of a URL into its path component.",
                              [("query", "string", "The query part of the URL to be converted.")],
                              [("path", "string", "The path component.")])
    out = interpret_generate(split, _answer(to_query, 1, "query", "path"))
    assert isinstance(out, Outcome) and out.reason == "generate_bad_producer_output"
    assert "is, by name, the output 'query' of '_splitquery', not 'path'" in out.detail
    assert isinstance(interpret_generate(split, _answer(to_query, 1, "query", "query")), DependentPair)


def test_a_handover_that_makes_no_new_value_or_needs_the_value_it_supplies_is_an_echo():
    """Accepted pairs of the 240-function run that a reader rejects at once: the dependent returns the value it is
    handed, described the same; the generated prerequisite takes the very input it is to supply; the hand-over is
    the receiver agent 1 declared as an output."""
    filling = ExtractedDoc("rec-9", _described_doc(
        "filling", "Return fillstate (True if filling, False else).", [],
        [("fillstate", "boolean", "True if the turtle is currently filling, False otherwise.")]))
    is_filling = _described_doc("is_filling", "Determines if the turtle is currently filling.",
                                [("fillstate", "boolean", "The current fill state of the turtle.")],
                                [("is_filling", "boolean", "True if the turtle is currently filling, False otherwise.")])
    url = ExtractedDoc("rec-9", _described_doc("geturl", "Returns the real URL of the page. In some cases, the HTTP "
                                               "server redirects a client to another URL.", [],
                                               [("url", "string", "The real URL of the page after redirection.")]))
    real_url = _described_doc("get_real_url", "Returns the real URL of the page after redirection.",
                              [("url", "string", "The URL to check for redirection.")],
                              [("real_url", "string", "The real URL after redirection.")])
    lower = "The lower-cased version of the member name."
    next_value = ExtractedDoc("rec-9", _described_doc(
        "_generate_next_value_", "Returns the lower-cased version of the member name.",
        [("name", "string", "The name of the member."), ("count", "integer", "The number of values so far.")],
        [("name", "string", lower)]))
    to_lower = _described_doc("convert_to_lowercase", "Converts the given member name to lowercase.",
                              [("member", "object", "The member whose name is converted to lowercase.")],
                              [("lowercase_name", "string", lower)])
    shutdown = ExtractedDoc("rec-9", _described_doc(
        "shutdown", "Clean-up the resources associated with the Executor.",
        [("wait", "boolean", "If True then shutdown will not return until all running futures have finished.")], []))
    shutdown_executor = _described_doc(
        "shutdown_executor", "Shuts down the executor and cleans up its resources.",
        [("wait", "boolean", "If True, the executor will wait until all running futures have finished.")],
        [("shutdown_complete", "boolean", "Whether the shutdown process was completed successfully.")])
    cases = [(filling, _answer(is_filling, 1, "fillstate", "fillstate"), "the two make the same value"),
             (url, _answer(real_url, 1, "url", "url"), "described as the 'url' that 'geturl' hands it"),
             (next_value, _answer(to_lower, 2, "name", "lowercase_name"), "'_generate_next_value_' returns 'name'"),
             (shutdown, _answer(shutdown_executor, 2, "wait", "shutdown_complete"),
              "takes 'wait', the very input of the given API 'shutdown' it is to supply")]
    for given, answer, why in cases:
        out = interpret_generate(given, answer)
        assert isinstance(out, Outcome) and out.reason == "generate_echoed_input" and why in out.detail, (why, out)
        assert out.reason in REPAIRABLE
    # the run's right pairs pass: a dependent that makes something of the value, a producer of another value
    sendcmd = ExtractedDoc("rec-9", _described_doc(
        "sendcmd", "Sends a command to the device and returns the response.",
        [("cmd", "string", "The command to be sent to the device.")],
        [("response", "string", "The response received from the device.")]))
    parse = _described_doc("parse_response", "Parses the response from the device and returns a structured object.",
                           [("response", "string", "The response received from the device.")],
                           [("parsed_response", "object", "A structured object representing the parsed response.")])
    values = ExtractedDoc("rec-9", _described_doc("values", "Return a list of messages.", [],
                                                  [("return", "list", "A list of messages.")]))
    filtered = _described_doc("filter_messages", "Filters a list of messages based on a given condition.",
                              [("messages", "list", "The list of messages to filter.")],
                              [("filtered_messages", "list", "The list of messages that satisfy the condition.")])
    for given, answer in ((sendcmd, _answer(parse, 1, "response", "response")), (values, _answer(filtered, 1, "messages", "return"))):
        assert isinstance(interpret_generate(given, answer), DependentPair)
    # agent 1 read `return self`: the receiver is no value to hand over, by the enum or by name
    done = ExtractedDoc("rec-9", _described_doc("done", "Return True if the future is done.", [],
                                                [("self", "object", "The instance of the class.")]))
    assert generate_request(done).reason == "generate_nothing_to_hand_over"
    is_done = _described_doc("is_done", "Checks if the future is done.", [("self", "object", "The future to check.")],
                             [("is_done", "boolean", "True if the future is done, False otherwise.")])
    out = interpret_generate(done, _answer(is_done, 1, "self", "self"))
    assert out.reason == "generate_bad_producer_output" and "'self' is the object 'done' is called on" in out.detail


def test_the_answer_checks_have_a_version_in_the_chunk_fingerprint_that_moves_with_their_code(monkeypatch):
    """A chunk accepted under older checks is redone on a rerun: the checks' version is in the fingerprint, and
    the source behind each version is the one recorded here (change a check: bump the version, add its hash)."""
    import inspect

    from schemas import parameters
    from tasks.agents import chunks, requests
    from tasks.llm.config import LLMConfig

    checks = (requests.api_name_key, requests.renamed_copy, requests._near_same_text, requests._described,
              requests._description_of, requests._is_receiver,
              requests._same_sentence, requests.restatement_reason, requests.handover_restatement,
              requests.echo_reason, requests.passed_value, requests.interpret_generate, requests.check_handover,
              requests._precondition_pair, requests.handover_side, requests.flat_answer, requests.copied_example_reason,
              requests.passthrough_reason, parameters.is_none_type,
              parameters.types_compatible)
    source = hashlib.sha256("\0".join(inspect.getsource(f) for f in checks).encode()).hexdigest()[:16]
    assert {requests.ANSWER_CHECKS_VERSION: source} == {"answer-checks-v4": "42f6874112041860"}
    llm = LLMConfig(base_url="http://127.0.0.1:1/v1", model="m")
    before = chunks.work_fingerprint(llm, 4000)
    monkeypatch.setattr(chunks, "ANSWER_CHECKS_VERSION", "answer-checks-v5")
    assert chunks.work_fingerprint(llm, 4000) != before
