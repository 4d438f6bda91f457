"""Dependencies the tools' own docs state (tasks/graph/stated.py): what the rule reads, what it refuses, and how
build-graph and the evaluate-only rows take them."""
from __future__ import annotations

import numpy as np
import pytest

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.graph.scoring import PredictedEdge
from tasks.graph.stated import (MAX_NAMED, STATED_PROB, stated_dependencies, stated_edges, stated_parameter_edges,
                                stated_probs, with_stated)


def tool(name, description="", inputs=(), group="g"):
    doc = {"name": name, "description": description,
           "input_params": [{"name": n, "type": "string", "description": d} for n, d in inputs], "output_params": []}
    return Tool(name, group, doc)


def found(tools):
    """(dependent, prerequisite, param, kind) by tool name."""
    return {(tools[s.dependent].tool_id, tools[s.prerequisite].tool_id, s.param, s.kind)
            for s in stated_dependencies(tools)}


def test_an_inputs_description_names_the_source_of_its_value():
    tools = [tool("Shop::products/search", "Search products"),
             tool("Shop::products/detail", "Product details", [("sku", "The value of sku returned in "
                                                                      ".../products/search endpoint.")])]
    assert found(tools) == {("Shop::products/detail", "Shop::products/search", "sku", "data")}
    [s] = stated_dependencies(tools)
    assert "products/search" in s.sentence


def test_a_plain_word_name_counts_only_quoted_or_as_an_endpoint():
    tools = [tool("Anime::Get All", "All anime"), tool("Anime::Search", "Search anime"),
             tool("Anime::Get by id", "ID is got from 'Get All' endpoint. Search by keyword works too.", [("id", "")]),
             tool("Anime::Random", "Get all anime in a random order.")]
    # 'Get All' quoted: stated; "Search" unquoted, and "Get all" as a sentence's words: not names
    assert found(tools) == {("Anime::Get by id", "Anime::Get All", None, "data")}
    with_endpoint = [tool("Langs::Languages", "List languages"),
                     tool("Langs::Speak", "Speak", [("lang", "Hit Languages endpoint to list the languages.")])]
    assert found(with_endpoint) == {("Langs::Speak", "Langs::Languages", "lang", "data")}


def test_only_tools_of_one_provider_and_group():
    tools = [tool("Realty::getListings", "List listings"),
             tool("Other::getItem", "Item", [("identifier", "The id you got before from getListings.")]),
             tool("getListings", "List listings", group="h"),
             tool("getItem", "Item", [("identifier", "The id you got before from getListings.")])]
    assert found(tools) == set()  # another provider; another group
    same = [tool("Realty::getListings", "List listings"),
            tool("Realty::getListing", "One listing", [("identifier", "The id you got before from getListings.")])]
    # getListing is inside getListings' name: no mention of itself, and no partial match of the other
    assert found(same) == {("Realty::getListing", "Realty::getListings", "identifier", "data")}


def test_a_tools_own_name_and_longer_names_win():
    tools = [tool("Movies::/titles", "Titles"), tool("Movies::/titles/series/{id}", "Movies::/titles/series/{id}"),
             tool("Movies::search", "Search"), tool("Movies::products/search", "Search products"),
             tool("Movies::detail", "Detail", [("sku", "from the products/search endpoint")])]
    # /titles inside the tool's own name is no mention; products/search is named, not the shorter search
    assert found(tools) == {("Movies::detail", "Movies::products/search", "sku", "data")}


def test_a_name_two_tools_share_names_neither():
    tools = [tool("check_out", "Check out of a hotel", group="hotel"),
             tool("check_out", "Check out a cart", group="hotel"),
             tool("pay", "Pay", [("cart", "the cart after check_out")], group="hotel")]
    assert found(tools) == set()


def test_a_tool_description_must_say_why_and_may_state_an_order():
    tools = [tool("file_write", "Write a file."), tool("file_modify", "Modify a file."),
             tool("file_delete", "Delete a file. After performing file_write or file_modify operations, this API "
                                 "can be executed to delete it."),
             tool("file_read", "Reads what file_write wrote or file_modify changed, like cat.")]
    got = found(tools)
    assert ("file_delete", "file_write", None, "precondition") in got
    assert ("file_delete", "file_modify", None, "precondition") in got
    # file_read's sentence uses "wrote", "changed": no word that says where a value comes from or what comes first
    assert not any(d == "file_read" for d, *_ in got)


def test_pointers_listings_and_forward_references():
    tools = [tool("Giphy::translate_gif", "Turn words into GIFs."),
             tool("Giphy::translate_sticker", "Using the same algorithm as the translate_gif endpoint, it turns words "
                                              "into stickers."),
             tool("Coins::c/list", "List"), tool("Coins::c/search", "Search"), tool("Coins::c/pairs", "Pairs"),
             tool("Coins::c/top", "Top"),
             tool("Coins::chart", "Chart", [("pair_id", "Value of pair_id returned in c/list, c/search, c/pairs, "
                                                        "c/top, etc...")]),
             tool("Tasks::create_task", "Create a trace task. The result can be obtained after a minute by calling "
                                        "result_task/{id}."),
             tool("Tasks::result_task/{id}", "The trace", [("id", "")]),
             tool("Food::List of Foods", "Mexican foods with their IDs, which must be provided in the "
                                         "\"Detailed Recipe by ID\" endpoint to receive the recipe."),
             tool("Food::Detailed Recipe by ID", "A recipe", [("id", "")]),
             tool("Giphy::get_gifs", "A multiget version of the translate_gif endpoint, using ids."),
             tool("Loc::autocomplete", "The Autocomplete API is a variant of the Loc::search API. Requires a key."),
             tool("Loc::search", "Search places"),
             tool("Realty::transactions", "To get further detail, use the summary_v2 API."),
             tool("Realty::summary_v2", "Summary")]
    assert MAX_NAMED < 4
    # pointers name no need; a list of four names is a list; the result, and the IDs, go to the tool named after
    assert found(tools) == {("Tasks::result_task/{id}", "Tasks::create_task", None, "data"),
                            ("Food::Detailed Recipe by ID", "Food::List of Foods", None, "data")}


def test_a_statement_is_of_data_when_it_names_a_value_even_inside_an_identifier():
    tools = [tool("Gis::get_regions", "Regions"), tool("Gis::get_cities", "- region_code can be fetched from "
                                                                          "get_regions first."),
             tool("Deals::get_summary", "Summary"), tool("Deals::get_detail", "It requires to call get_summary first.")]
    assert found(tools) == {("Gis::get_cities", "Gis::get_regions", None, "data"),
                            ("Deals::get_detail", "Deals::get_summary", None, "precondition")}


def test_the_docs_contradicting_themselves_state_nothing_and_an_inputs_word_wins():
    both = [tool("a_x", "Use b_y first."), tool("b_y", "Use a_x first.")]
    assert found(both) == set()
    one_input = [tool("a_x", "Use b_y first."), tool("b_y", "Y", [("token", "the token returned by a_x")])]
    assert found(one_input) == {("b_y", "a_x", "token", "data")}


def _stated_tools():
    return [tool("Shop::products/search", "Search products"),
            tool("Shop::products/detail", "Details", [("sku", "The sku returned in .../products/search endpoint")]),
            tool("Shop::cart", "Cart")]


def test_with_stated_replaces_the_models_edge_between_the_two_tools():
    tools = _stated_tools()
    stated = stated_dependencies(tools)
    wrong_way = DependencyEdge("g", "Shop::products/search", "Shop::products/detail", "discriminator", "data")
    model = [PredictedEdge(wrong_way, 0.9, LABEL_A_DEPENDS_ON_B, 0.8),
             PredictedEdge(DependencyEdge("g", "Shop::cart", "Shop::products/detail", "discriminator", None),
                           0.7, LABEL_A_DEPENDS_ON_B, 0.6)]
    out = with_stated(tools, model, stated)
    assert [(p.edge.dependent, p.edge.prerequisite, p.prob, p.edge.kind, p.edge.source) for p in out] == [
        ("Shop::cart", "Shop::products/detail", 0.7, None, "discriminator"),
        ("Shop::products/detail", "Shop::products/search", STATED_PROB, "data", "discriminator")]
    [(edge, sentence)] = stated_edges(tools, stated)
    assert edge.source == "stated" and "returned in" in sentence
    [param] = stated_parameter_edges(tools, stated)
    assert (param.dependent, param.prerequisite, param.consumer_param, param.source) == (
        "Shop::products/detail", "Shop::products/search", "sku", "stated")


def test_stated_probs_decide_both_orders_of_a_stated_pair_and_leave_the_rest():
    tools = _stated_tools()
    probs = np.array([[0.1, 0.8, 0.1], [0.2, 0.5, 0.3], [0.6, 0.3, 0.1]])
    ordered = [(1, 0), (0, 1), (2, 0)]
    out = stated_probs(ordered, probs, stated_dependencies(tools))
    assert out[0].tolist() == np.eye(3)[LABEL_A_DEPENDS_ON_B].tolist()  # detail depends on search
    assert out[1].tolist() == np.eye(3)[LABEL_B_DEPENDS_ON_A].tolist()  # the same pair, the other order
    assert out[2].tolist() == probs[2].tolist() and probs[0, LABEL_NO_DEPENDENCY] == 0.8  # no copy changed


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from tests.test_discriminator import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.mark.parametrize("discriminator", [False, True])
def test_build_graph_writes_stated_edges_with_their_sentence(discriminator, tiny_checkpoint, tmp_path,
                                                            prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    tools = [*_stated_tools(), tool("Shop::reviews", "Reviews of a product", [("product", "a product name")])]
    folder = write_toolset_dir(ToolSet("shop", tools, [], [Query("q1", "find a product", ["Shop::products/search"])]),
                               tmp_path / "shop")
    target = tmp_path / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), progress=False,
                                  discriminator=str(tiny_checkpoint) if discriminator else None, threshold=1.0))
    con = connect(target)
    assert con.execute("SELECT dependent, prerequisite, prob, kind, evidence FROM edges WHERE source = 'stated'"
                       ).fetchall() == [("Shop::products/detail", "Shop::products/search", 1.0, "data",
                                         "The sku returned in .../products/search endpoint")]
    assert con.execute("SELECT dependent, prerequisite, consumer_param, probability FROM parameter_edges "
                       "WHERE source = 'stated'").fetchall() == [
        ("Shop::products/detail", "Shop::products/search", "sku", 1.0)]
    assert con.execute("SELECT count(*) FROM edge_lineage WHERE source = 'stated'").fetchone()[0] == 1
    # at a cut of 1 the model joins no pair: the discriminator's graph is what the docs state
    disc = con.execute("SELECT dependent, prerequisite, prob FROM edges WHERE source = 'discriminator'").fetchall()
    assert disc == ([("Shop::products/detail", "Shop::products/search", 1.0)] if discriminator else [])
    assert out["datasets"]["shop"]["stated_edges"] == 1
    off = tmp_path / "off.duckdb"
    build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(off), progress=False, stated_edges=False,
                            discriminator=str(tiny_checkpoint) if discriminator else None, threshold=1.0))
    con = connect(off)
    assert con.execute("SELECT count(*) FROM edges WHERE source IN ('stated', 'discriminator')").fetchone()[0] == 0


def test_long_prose_and_non_text_descriptions_state_nothing():
    named = "the id returned by get_regions " * 40  # one "sentence" of 1,240 characters: prose or data, not read
    tools = [tool("Gis::get_regions", "Regions"), tool("Gis::get_cities", "Cities", [("region", named)]),
             Tool("Gis::get_towns", "g", {"name": "Gis::get_towns", "description": {"not": "text"},
                                          "input_params": [{"name": "r", "description": 7}, "junk"]})]
    assert len(named) > 1000 and found(tools) == set()
