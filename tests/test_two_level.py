"""Two levels of one discriminator checkpoint (tasks/graph/two_level.py): inputs scored by the parameter scorer,
consumers without inputs by the cross-encoder, and with preconditions the cross-encoder's edges where no value
passes; the evaluation's probabilities decide as build-graph's edges do."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from models.discriminator import decide
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.toolset import Tool
from tasks.graph.param_scoring import ParamScore, param_tool_edges
from tasks.graph.scoring import edges_from_probabilities
from tasks.graph.checks import check_pairs, may_gate, role
from tasks.graph.two_level import (
    TWO_LEVEL_CUT,
    cross_encoder_pairs,
    parameter_scorer_of,
    rescale,
    two_level_probs,
)
from tasks.graph.schema_rule import value_pairs


def _tool(name: str, inputs: list[str]) -> Tool:
    return Tool(name, "g", {"name": name, "description": name, "output_params": [],
                            "input_params": [{"name": i, "type": "str", "description": i} for i in inputs]})


def test_rescale_puts_the_cut_at_one_half_and_keeps_the_order():
    assert rescale(0.8, 0.8) == 0.5 and rescale(0.0, 0.3) == 0.0 and rescale(1.0, 0.3) == 1.0
    assert rescale(0.2, 0.4) == pytest.approx(0.25) and rescale(0.7, 0.4) == pytest.approx(0.75)
    xs = np.linspace(0, 1, 41)
    assert all(np.diff([rescale(x, 0.93) for x in xs]) > 0)


def test_inputs_are_decided_by_the_parameter_scorer_and_the_rest_by_the_cross_encoder():
    tools = [_tool("GetAccount", []), _tool("Transfer", ["account_id"]), _tool("Notify", []), _tool("Audit", ["x"])]
    scores = [ParamScore(0, 1, "account_id", 0.9),  # Transfer takes GetAccount's output: above the cut 0.6
              ParamScore(1, 3, "x", 0.2)]  # Audit takes Transfer's: below it
    cross = np.array([
        [0.0, 0.95, 0.05],  # (GetAccount, Transfer): the cross-encoder sees nothing; the input decides
        [0.9, 0.1, 0.0],  # (Notify, GetAccount): Notify has no inputs, the cross-encoder's edge stands
        [0.0, 0.1, 0.9],  # (Transfer, Audit): says Audit depends on Transfer, but Audit has inputs: no edge
        [0.1, 0.8, 0.1],  # (Notify, Audit): nothing either way
    ])
    ordered = [(0, 1), (2, 0), (1, 3), (2, 3)]
    probs = two_level_probs(tools, ordered, cross, 0.7, scores, 0.6)
    assert probs.sum(axis=1) == pytest.approx(np.ones(4))
    labels = decide(probs, TWO_LEVEL_CUT)
    assert labels.tolist() == [LABEL_B_DEPENDS_ON_A, LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY, LABEL_NO_DEPENDENCY]
    assert probs[0, LABEL_B_DEPENDS_ON_A] == pytest.approx(rescale(0.9, 0.6))
    assert probs[1, LABEL_A_DEPENDS_ON_B] == pytest.approx(rescale(0.9 + 0.0, 0.7))  # the mass p0 + p2
    # below the cuts the mass still ranks: Audit's input score, rescaled (the cross-encoder is not asked for Audit)
    assert probs[2, LABEL_B_DEPENDS_ON_A] == pytest.approx(rescale(0.2, 0.6))


def test_a_producer_that_returns_nothing_makes_no_data_edge():
    # DeleteAccount returns nothing (an OpenAPI operation answering 204): whatever the cross-encoder says of it
    # before Notify (no inputs), no value of it can pass; a check that returns nothing may still gate an action
    tools = [replace(_tool("DeleteAccount", ["account_id"]), returns_nothing=True), _tool("Notify", []),
             replace(_tool("VerifyAccount", ["account_id"]), returns_nothing=True), _tool("CloseAccount", ["x"])]
    cross = np.array([[0.0, 0.1, 0.9], [0.0, 0.1, 0.9]])  # Notify depends on DeleteAccount; CloseAccount on Verify
    ordered = [(0, 1), (2, 3)]
    for preconditions, expected in (("off", [LABEL_NO_DEPENDENCY] * 2),
                                    ("checks", [LABEL_NO_DEPENDENCY, LABEL_B_DEPENDS_ON_A])):
        probs = two_level_probs(tools, ordered, cross, 0.7, [], 0.6, preconditions)
        assert decide(probs, TWO_LEVEL_CUT).tolist() == expected
        fallback = edges_from_probabilities(tools, ordered, cross, threshold=0.7)
        edges = param_tool_edges(tools, ordered, [], 0.6, fallback, preconditions)
        assert [(e.predicted.edge.prerequisite, e.predicted.edge.kind) for e in edges] == (
            [("VerifyAccount", "precondition")] if preconditions == "checks" else [])
    # the same tools returning their outputs: the cross-encoder decides Notify
    plain = [replace(t, returns_nothing=False) for t in tools]
    assert decide(two_level_probs(plain, ordered, cross, 0.7, [], 0.6), TWO_LEVEL_CUT).tolist()[0] == \
        LABEL_B_DEPENDS_ON_A


def test_the_decisions_are_build_graphs_two_level_edges_on_random_pairs():
    rng = random.Random(3)
    tools = [_tool(f"t{n}", ["a", "b"][: rng.randrange(3)]) for n in range(9)]
    pairs = [(i, j) for i in range(9) for j in range(i + 1, 9)]
    scores = [ParamScore(p, c, q["name"], rng.random()) for i, j in pairs for p, c in ((i, j), (j, i))
              for q in tools[c].doc["input_params"] if rng.random() < 0.8]
    raw = np.array([rng.random() for _ in range(3 * len(pairs))]).reshape(-1, 3)
    cross = raw / raw.sum(axis=1, keepdims=True)
    param_cut, cross_cut = 0.55, 0.62
    fallback = edges_from_probabilities(tools, pairs, cross, 0.0, cross_cut)
    expected = {(e.predicted.edge.dependent, e.predicted.edge.prerequisite)
                for e in param_tool_edges(tools, pairs, scores, param_cut, fallback)}
    labels = decide(two_level_probs(tools, pairs, cross, cross_cut, scores, param_cut), TWO_LEVEL_CUT)
    assert expected and _edges(tools, pairs, labels) == expected
    # with preconditions: more edges (the cross-encoder's between tools with inputs), and still the same decisions
    with_pre = {(e.predicted.edge.dependent, e.predicted.edge.prerequisite)
                for e in param_tool_edges(tools, pairs, scores, param_cut, fallback, preconditions="all")}
    labels = decide(two_level_probs(tools, pairs, cross, cross_cut, scores, param_cut, preconditions="all"), TWO_LEVEL_CUT)
    assert with_pre > expected and _edges(tools, pairs, labels) == with_pre
    assert cross_encoder_pairs(tools, pairs, preconditions="all") == pairs
    # the cross-encoder asked only where a tool declares no inputs: the same edges
    asked = cross_encoder_pairs(tools, pairs)
    assert 0 < len(asked) < len(pairs)
    assert all(not (tools[i].doc["input_params"] and tools[j].doc["input_params"]) for i, j in asked)
    fewer = edges_from_probabilities(tools, asked, cross[[pairs.index(p) for p in asked]], 0.0, cross_cut)
    assert {(e.predicted.edge.dependent, e.predicted.edge.prerequisite)
            for e in param_tool_edges(tools, pairs, scores, param_cut, fewer)} == expected
    # preconditions only where the prerequisite checks: between the two, the same decisions as build-graph's edges,
    # and the cross-encoder asked only about the pairs that can need it (a higher input cut leaves more pairs open)
    param_cut = 0.9
    for n in (1, 4, 6):  # three tools that check, each with an input
        tools[n] = _tool(f"check_t{n}", ["a"])
    checked = cross_encoder_pairs(tools, pairs, "checks")
    assert set(asked) < set(checked) < set(pairs)
    fallback = edges_from_probabilities(tools, checked, cross[[pairs.index(p) for p in checked]], 0.0, cross_cut)
    with_checks = {(e.predicted.edge.dependent, e.predicted.edge.prerequisite)
                   for e in param_tool_edges(tools, pairs, scores, param_cut, fallback, preconditions="checks")}
    labels = decide(two_level_probs(tools, pairs, cross, cross_cut, scores, param_cut, preconditions="checks"),
                    TWO_LEVEL_CUT)
    assert _edges(tools, pairs, labels) == with_checks
    off = {(e.predicted.edge.dependent, e.predicted.edge.prerequisite)
           for e in param_tool_edges(tools, pairs, scores, param_cut, fallback)}
    added = with_checks - off
    assert added and all(d.startswith("t") and p.startswith("check_") for d, p in added)


def _edges(tools, pairs, labels) -> set[tuple[str, str]]:
    return {(tools[i].tool_id, tools[j].tool_id) if label == LABEL_A_DEPENDS_ON_B else (tools[j].tool_id, tools[i].tool_id)
            for (i, j), label in zip(pairs, labels) if label != LABEL_NO_DEPENDENCY}


def _api(name: str, inputs: list[str], outputs: list[str]) -> Tool:
    params = lambda names: [{"name": n, "type": "str", "description": n.replace("_", " ")} for n in names]  # noqa: E731
    return Tool(name, "bank", {"name": name, "description": name, "input_params": params(inputs),
                               "output_params": params(outputs)})


def test_with_preconditions_the_cross_encoder_adds_a_precondition_where_no_value_passes():
    """Transfer and VerifyAccount both declare inputs and no output of one is an input of the other: the parameter
    level finds nothing, the cross-encoder says Transfer needs VerifyAccount first, so the edge is a precondition.
    Pay takes GetBalance's ``balance``: a value passes by name, so only the parameter level may decide it."""
    tools = [_api("VerifyAccount", ["account_id"], ["status"]), _api("Transfer", ["account_id", "amount"], ["receipt"]),
             _api("GetBalance", ["account_id"], ["balance"]), _api("Pay", ["balance", "payee"], ["receipt"])]
    pairs = [(1, 0), (3, 2)]
    scores = [ParamScore(0, 1, "account_id", 0.3), ParamScore(2, 3, "balance", 0.4)]  # both below the cut 0.6
    cross = np.array([[0.95, 0.04, 0.01], [0.9, 0.05, 0.05]])  # the first tool depends on the second, both times
    fallback = edges_from_probabilities(tools, pairs, cross, 0.0, 0.7)
    assert decide(two_level_probs(tools, pairs, cross, 0.7, scores, 0.6), TWO_LEVEL_CUT).tolist() == [
        LABEL_NO_DEPENDENCY, LABEL_NO_DEPENDENCY]
    assert param_tool_edges(tools, pairs, scores, 0.6, fallback) == []
    probs = two_level_probs(tools, pairs, cross, 0.7, scores, 0.6, preconditions="all")
    assert decide(probs, TWO_LEVEL_CUT).tolist() == [LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY]
    assert probs[0, LABEL_A_DEPENDS_ON_B] == pytest.approx(rescale(0.96, 0.7))
    [edge] = param_tool_edges(tools, pairs, scores, 0.6, fallback, preconditions="all")
    assert (edge.predicted.edge.dependent, edge.predicted.edge.prerequisite) == ("Transfer", "VerifyAccount")
    assert edge.best_param is None and edge.predicted.edge.kind == "precondition"
    assert value_pairs(tools, pairs) == {frozenset((3, 2))}


def test_with_check_preconditions_only_a_prerequisite_that_checks_adds_an_edge():
    """``preconditions="checks"``: Transfer needs VerifyAccount first (a check before an action) stands; Refund
    needing Transfer first (no check) does not, nor VerifyAccount needing Transfer (the check is the dependent)."""
    tools = [_api("VerifyAccount", ["account_id"], ["status"]), _api("Transfer", ["account_id", "amount"], ["receipt"]),
             _api("Refund", ["order"], ["refund_id"])]
    scores = [ParamScore(0, 1, "account_id", 0.3)]  # below the cut 0.6: no value passes
    for pairs, expected in (([(1, 0), (2, 1)], [("Transfer", "VerifyAccount")]), ([(0, 1)], [])):
        cross = np.array([[0.95, 0.04, 0.01]] * len(pairs))  # the first tool needs the second, each time
        assert cross_encoder_pairs(tools, pairs, "checks") == [p for p in pairs if 0 in p]
        labels = decide(two_level_probs(tools, pairs, cross, 0.7, scores, 0.6, preconditions="checks"), TWO_LEVEL_CUT)
        assert _edges(tools, pairs, labels) == set(expected)
        # a check pair build-graph does not score (not among a check's nearest: ``gated``) adds nothing
        for gated, kept in (({(0, 1)}, set(expected)), (set(), set())):
            labels = decide(two_level_probs(tools, pairs, cross, 0.7, scores, 0.6, "checks", gated), TWO_LEVEL_CUT)
            assert _edges(tools, pairs, labels) == kept
        fallback = edges_from_probabilities(tools, pairs, cross, 0.0, 0.7)
        edges = param_tool_edges(tools, pairs, scores, 0.6, fallback, preconditions="checks")
        assert [(e.predicted.edge.dependent, e.predicted.edge.prerequisite) for e in edges] == expected
        assert all(e.predicted.edge.kind == "precondition" for e in edges)
        assert len(param_tool_edges(tools, pairs, scores, 0.6, fallback, preconditions="all")) == len(pairs)


@pytest.mark.parametrize("name, description, verifies", [
    ("check_customs_status", "Check the customs status.", True),
    ("VerifyAccount", "The API for verifying an account.", True),
    ("user_login", "Authenticate the user's login credentials.", True),  # said by its description
    ("lookup_warranty", "Checks the warranty status of a product.", True),
    ("is_available", "Whether a room is free.", True),  # a predicate
    ("schedule_flight", "Schedule a flight after checking the weather.", False),
    ("assess_impact", "Assess the impact of a program.", False),  # an appraisal, as often after the work as before
    ("get_status", "Is the server up? Returns its status.", False),  # "is" counts in a name only
    ("check_in_guest", "Check in a hotel guest.", False),  # an action
    ("Captcha::Verify the captcha", "", True),  # a catalog's Tool::API name: its API part
    ("", "", False),
])
def test_a_tool_checks_when_its_name_or_description_starts_with_a_checking_verb(name, description, verifies):
    assert role(Tool(name or "t", "g", {"name": name, "description": description})).checks is verifies


def test_a_checkpoint_carries_a_parameter_scorer_only_with_its_head(tmp_path):
    assert parameter_scorer_of(None) is None and parameter_scorer_of(tmp_path) is None
    (tmp_path / "parameter_scorer").mkdir()
    assert parameter_scorer_of(tmp_path) is None  # a folder without the head scores nothing
    (tmp_path / "parameter_scorer" / "param_head.json").write_text("{}")
    assert parameter_scorer_of(tmp_path) == tmp_path / "parameter_scorer"


def test_a_check_may_gate_an_action_and_only_an_authentication_may_gate_a_read():
    verify, login = role(_api("VerifyAccount", ["a"], [])), role(_api("user_login", ["a"], []))
    transfer, balance = role(_api("Transfer", ["a"], [])), role(_api("GetBalance", ["a"], []))
    assert not login.checks and role(_api("login_user", ["a"], [])).authenticates  # its name says nothing of its own
    login = role(Tool("user_login", "g", {"name": "user_login", "description": "Authenticate the user's credentials."}))
    assert login.checks and login.authenticates and balance.reads and not transfer.reads
    assert may_gate(verify, transfer) and not may_gate(verify, balance) and not may_gate(transfer, verify)
    assert may_gate(login, balance) and not may_gate(verify, login)  # a check never gates another check
    # nor a tool whose name says it checks, wherever the word stands; "check in" is an action
    for name in ("Email Validator::Email", "luggage_check", "Bulk Whatsapp Validator::About info"):
        assert not may_gate(verify, role(_api(name, ["a"], [])))
    assert may_gate(verify, role(_api("check_in_guest", ["a"], [])))


def test_check_pairs_are_the_same_group_pairs_of_a_tool_that_checks_and_one_that_does_not():
    tools = [_api("VerifyAccount", ["account_id"], ["status"]), _api("Transfer", ["account_id"], ["receipt"]),
             _api("ValidateCard", ["card"], ["ok"]), _api("Refund", ["order"], ["refund_id"]),
             Tool("Ping", "bank", {"name": "Ping", "description": "Ping", "input_params": [], "output_params": []}),
             Tool("TestUpload", "files", {"name": "TestUpload", "description": "t", "output_params": [],
                                          "input_params": [{"name": "f", "type": "str", "description": "f"}]})]
    # two checks against two actions of their group; not the two checks, not Ping (no inputs), not another group
    assert check_pairs(tools) == [(0, 1), (0, 3), (1, 2), (2, 3)]


def test_with_embeddings_each_check_keeps_only_the_tools_it_may_gate_that_are_most_like_it():
    tools = [_api("VerifyAccount", ["account_id"], []), *(_api(f"Act{n}", ["x"], []) for n in range(5)),
             _api("ValidateCard", ["card"], [])]
    emb = np.zeros((len(tools), 3), dtype=np.float32)
    emb[0] = [1, 0, 0]          # VerifyAccount is most like Act3, then Act1 and Act4 (a tie: the earlier first)
    emb[1:6] = [[0, 1, 0], [1, 1, 0], [0, 0, 1], [3, 0.5, 0], [1, 1, 0]]
    emb[6] = [0, 0, 2]          # ValidateCard is most like Act2, then its neighbours by position among equals
    assert check_pairs(tools, emb, per_check=2) == [(0, 2), (0, 4), (1, 6), (3, 6)]
    # a check with no more partners than the bound keeps all of them, as does no bound or no embeddings
    assert check_pairs(tools, emb, per_check=5) == check_pairs(tools) == check_pairs(tools, emb, per_check=None)
    assert check_pairs(tools, lambda: emb, per_check=2) == check_pairs(tools, emb, per_check=2)
    # made only when a check may gate more tools than the bound
    assert check_pairs(tools, lambda: 1 / 0, per_check=5) == check_pairs(tools)
    assert len(check_pairs(tools)) == 10 and len(check_pairs(tools, emb, per_check=1)) == 2
    # the cross-encoder is asked about those only, where the candidates hold more (one large group's pruning)
    pairs = [(0, n) for n in range(1, 7)]
    assert cross_encoder_pairs(tools, pairs, "checks") == pairs[:5]  # not (0, 6): two checks
    assert cross_encoder_pairs(tools, pairs, "checks", set(check_pairs(tools, emb, per_check=2))) == [(0, 2), (0, 4)]
