"""The direction two tools without inputs take from their names' lifecycle (tasks/graph/lifecycle.py): what a name
says, which of two comes first, the cross-encoder's probabilities turned that way, and build-graph and the
held-out report reading it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.toolset import DependencyEdge, Tool, ToolSet
from tasks.graph.lifecycle import action, example_orders, first_of, name_words, orient, pair_orders
from tasks.training.examples import PairExample

A, NONE, B = LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY, LABEL_B_DEPENDS_ON_A


def bare(name: str, description: str = "") -> dict:
    return {"name": name, "description": description or name, "input_params": [], "output_params": []}


def test_a_names_words_are_singular_lower_case_whatever_its_style():
    assert name_words("GetTVSeasonCredits") == ["get", "tv", "season", "credit"]
    assert name_words("Flights API::search-flights") == ["search", "flight"]
    assert name_words("SearchPeople") == ["search", "person"]
    assert name_words("get_news_status") == ["get", "news", "status"]  # no "new", no "statu"


def test_the_head_word_is_the_first_when_it_names_a_stage_else_the_last_that_does():
    assert action("book_flight") == action("BookFlight")
    assert (action("book_flight").stage, action("book_flight").objects) == ("create", frozenset({"flight"}))
    # object first: the last staged word acts, the others are what it acts on (a booking is modified)
    modify = action("hotel_booking_modification")
    assert (modify.stage, modify.verb, modify.objects) == ("change", "modification", frozenset({"hotel", "booking"}))
    assert action("flight_search").stage == "find"
    assert action("GetMovieCredit").objects == frozenset({"movie", "credit"})
    assert action("weather_tool_api") is None  # no word names a stage; tool and api are no objects either
    assert action("currency_converter") is None  # no word names a stage


@pytest.mark.parametrize("a, b, expected", [
    ("book_flight", "flight_search", A),            # the search comes first: a depends on b
    ("flight_search", "book_flight", B),
    ("SearchMovie", "GetMovieCredit", B),           # found before read
    ("hotel_booking", "hotel_booking_modification", B),
    ("clock_alarm_cancel", "clock_alarm_set", A),   # set before cancelled
    ("GetMovieDetail", "GetMovieCredit", None),     # one stage: the names cannot say
    ("ride_booking", "ride_status_query", None),    # a read has no side: a catalog before, a status after
    ("flight_ticket_cancel", "flight_search", A),
    ("book_flight", "hotel_search", None),          # no object in common
    ("book_flight", "currency_converter", None),    # a name without a stage
    ("Flights::search", "Flights::book flight", None),  # no object: "search" alone finds nothing named
    ("Flights::search flights", "Flights::book flight", B),
    ("Air::search flights", "Trips::book flight", None),  # two providers
    ("Units::Get a List of All Units", "QR::List All QR Codes", None),
])
def test_first_of_orders_two_stages_of_one_object(a, b, expected):
    assert first_of(a, b) == expected


def test_orient_swaps_only_the_rows_the_model_has_the_other_way_and_keeps_the_dependency_mass():
    probs = np.array([[0.6, 0.1, 0.3],    # names say b first (A): already so
                      [0.6, 0.1, 0.3],    # names say a first (B): swapped
                      [0.2, 0.7, 0.1],    # names silent: untouched
                      [0.25, 0.5, 0.25]])  # a tie reads as A; the names say B: tipped their way
    out, named = orient(probs, [A, B, None, B])
    assert named.tolist() == [True, True, False, True]
    np.testing.assert_allclose(out[:3], [[0.6, 0.1, 0.3], [0.3, 0.1, 0.6], [0.2, 0.7, 0.1]])
    assert out[3, B] > out[3, A] and out[3, A] + out[3, B] == pytest.approx(0.5)
    np.testing.assert_allclose(out[:, A] + out[:, B], probs[:, A] + probs[:, B])
    from models.discriminator import decide

    assert decide(out, 0.45).tolist() == [A, B, NONE, B]


def test_only_pairs_of_two_tools_without_inputs_are_ordered():
    with_input = dict(bare("book_flight"), input_params=[{"name": "flight_id", "type": "str", "description": ""}])
    tools = [Tool("flight_search", "g", bare("flight_search")), Tool("book_flight", "g", bare("book_flight")),
             Tool("book_flight2", "g", with_input | {"name": "book_flight2"})]
    assert pair_orders(tools, [(0, 1), (1, 0), (0, 2)]) == [B, A, None]
    examples = [PairExample(json.dumps(tools[i].doc), json.dumps(tools[j].doc), NONE, "s/g", tools[i].tool_id,
                            tools[j].tool_id) for i, j in [(0, 1), (1, 0), (0, 2)]]
    assert example_orders(examples) == [B, A, None]
    # TDI rows name no tools: never ordered
    assert example_orders([PairExample(examples[0].doc_a, examples[0].doc_b, NONE, "tdi")]) == [None]


def test_the_held_out_report_adds_the_decision_with_the_names_direction():
    """Three gold pairs the model finds the wrong way round and one it finds right: the calibrated decision has 1 of
    4 right (F1 0.25); with the names' direction where they order the pair (two of the wrong three), 3 of 4."""
    from flows.train_discriminator import comparison_rows, report

    names = [("flight_search", "book_flight", B), ("SearchMovie", "GetMovieCredit", B),
             ("weather_now", "clothing_advice", B), ("flight_search", "hotel_search", NONE),
             ("book_hotel", "hotel_search", A)]
    examples = [PairExample(json.dumps(bare(a)), json.dumps(bare(b)), y, "toy/g", a, b) for a, b, y in names]
    probs = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.6, 0.3, 0.1], [0.1, 0.8, 0.1], [0.7, 0.2, 0.1]])
    section = report(examples, probs, 0.5)
    assert section["calibrated"]["dependency"]["f1"] == pytest.approx(0.25)
    named = section["names_direction"]
    assert named["pairs_ordered"] == 3 and named["dependency"]["f1"] == pytest.approx(0.75)
    assert named["direction"] == {"n": 4, "accuracy": 0.75}
    assert any("names' lifecycle" in title for title in comparison_rows(section))
    assert "names_direction" not in report(examples, probs, None)  # no cut: argmax only, as before


def test_build_graph_directs_edges_between_tools_without_inputs_by_their_names(tiny_checkpoint, tmp_path,
                                                                               prefect_harness):
    """Cut 0: every scored pair is an edge in the tiny model's direction; with the names' lifecycle each ordered pair
    goes their way, says so in ``evidence`` and ``scored_pairs.direction_from_names``, and the pairs the names leave
    alone keep the model's direction. ``lifecycle_direction=False``: the model's direction everywhere."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    names = ["flight_search", "book_flight", "flight_ticket_cancel", "weather_report", "currency_converter"]
    toolset = ToolSet("bare", [Tool(n, "all", bare(n, f"The {n.replace('_', ' ')} tool.")) for n in names],
                      [DependencyEdge("all", "book_flight", "flight_search")], ())
    folder = write_toolset_dir(toolset, tmp_path / "bare")
    got = {}
    for on in (True, False):
        target = tmp_path / f"tgr-{on}.duckdb"
        out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=str(tiny_checkpoint),
                                      pruning="none", threshold=0.0, max_prerequisites=None, progress=False,
                                      schema_edges=False, lifecycle_direction=on))
        con = connect(target)
        got[on] = {(d, p): e for d, p, e in con.execute(
            "SELECT dependent, prerequisite, evidence FROM edges WHERE source = 'discriminator'").fetchall()}
        scored = con.execute("SELECT tool_a, tool_b, p_a_depends_on_b, p_b_depends_on_a, direction_from_names "
                             "FROM scored_pairs").fetchall()
        assert len(scored) == 10 and len(got[on]) == 10  # every unordered pair once, each an edge at cut 0
        assert sum(row[4] for row in scored) == (3 if on else 0) == out["datasets"]["bare"]["pairs_directed_by_names"]
        params = json.loads(con.execute("SELECT params_json FROM edge_lineage WHERE source = 'discriminator'"
                                        ).fetchone()[0])
        assert params["lifecycle_direction"] is on
        for a, b, p0, p2, from_names in scored:  # each edge goes the way the stored probabilities say
            dependent, prerequisite = (a, b) if p0 >= p2 else (b, a)
            assert (dependent, prerequisite) in got[on]
            assert from_names == (on and first_of(a, b) is not None)
    ordered = {("book_flight", "flight_search"), ("flight_ticket_cancel", "flight_search"),
               ("flight_ticket_cancel", "book_flight")}
    assert ordered <= set(got[True])
    assert all(got[True][e].startswith("direction from the names' lifecycle: ") for e in ordered)
    assert got[True][("book_flight", "flight_search")].endswith("find (search) before create (book) of flight")
    unordered = lambda edges: {e for e in edges if frozenset(e) not in {frozenset(o) for o in ordered}}
    assert unordered(got[True]) == unordered(got[False])  # the rest as the model said
    assert all(v is None for v in got[False].values())


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from tests.test_discriminator import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def test_the_bench_counts_the_names_against_the_gold_and_both_decisions_by_hand():
    from bench.lifecycle_direction import decisions, gold_directions

    edges = [DependencyEdge("g", "book_flight", "flight_search"), DependencyEdge("g", "flight_search", "book_flight"),
             DependencyEdge("g", "weather_now", "flight_search")]
    assert gold_directions(edges) == {"right": 1, "wrong": 1, "silent": 1}
    examples = [PairExample(json.dumps(bare(a)), json.dumps(bare(b)), y, "toy/g", a, b)
                for a, b, y in [("flight_search", "book_flight", B), ("weather_now", "flight_search", NONE)]]
    probs = np.array([[0.8, 0.1, 0.1], [0.3, 0.6, 0.1]])  # the gold pair the wrong way; the none pair called
    got = decisions(examples, probs, 0.35, np.array([1.0, 4.0]))
    # the model: 0 right of 2 called; the names: 1 of 2, the none pair counting 4 at the prior
    assert got["cross-encoder's direction"][0] == (0.0, 0.0, 0.0)
    assert got["names' lifecycle (build-graph)"][0] == pytest.approx((0.5, 1.0, 2 / 3))
    assert got["names' lifecycle (build-graph)"][1] == pytest.approx((0.2, 1.0, 1 / 3))
