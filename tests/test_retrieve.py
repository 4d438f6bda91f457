"""Tools for a request from the warehouse, with what each needs first (warehouse/retrieve.py)."""
from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

from tests.test_tool_specs import LOOKUP, SEND, chat_tools

NOTIFY = {"name": "notify_followers", "description": "Tell a user's followers about the message just sent.",
          "parameters": {"type": "object", "properties": {"message_id": {
              "type": "string", "description": "The id returned by send_message."}}, "required": ["message_id"]}}
WEATHER = {"name": "get_weather", "description": "Weather forecast for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
# as an MCP server lists it: the one format that declares outputs
SEND_MCP = {"name": SEND["name"], "description": SEND["description"], "inputSchema": SEND["parameters"],
            "outputSchema": {"type": "object", "properties": {"message_id": {"type": "string"}}}}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, prefect_harness):
    """A warehouse of one agent's tools built without a discriminator: the name rule's edges
    get_user_id -> send_message (user_id), send_message -> notify_followers (message_id)."""
    from flows.build_graph import build_graph, parse_args

    folder = tmp_path_factory.mktemp("retrieve")
    file = folder / "my_agent.json"
    file.write_text(json.dumps(chat_tools(LOOKUP) + [SEND_MCP] + chat_tools(NOTIFY, WEATHER)))
    target = folder / "tgr.duckdb"
    build_graph(parse_args(["--toolset", str(file), "--warehouse", str(target), "--no-discriminator"]))
    return target


def own_embedding(con, tool):
    """An encoder that answers every request with ``tool``'s base embedding: the ranking is then known."""
    (vec,) = con.execute("SELECT embedding FROM tool_embeddings WHERE dataset = 'my_agent' AND kind = 'base' "
                         "AND tool_id = ?", [tool]).fetchone()
    return lambda texts: np.array([vec], dtype=np.float32)


@pytest.mark.slow
def test_hits_carry_their_prerequisites_and_the_missed_ones_are_listed(warehouse):
    from warehouse.retrieve import as_text, retrieve

    con = duckdb.connect(str(warehouse), read_only=True)
    edges = con.execute("SELECT dependent, prerequisite FROM edges WHERE dataset = 'my_agent' AND source = 'schema' "
                        "ORDER BY dependent").fetchall()
    assert edges == [("notify_followers", "send_message"), ("send_message", "get_user_id")]
    result = retrieve(con, "my_agent", "tell my followers", k=1, encode=own_embedding(con, "notify_followers"))
    assert result.graph == "schema" and result.encoder == "offline-minilm" and result.embedding == "base"
    (hit,) = result.hits
    assert (hit.rank, hit.tool_id) == (1, "notify_followers") and hit.score == pytest.approx(1.0, abs=1e-5)
    assert [(p.tool_id, p.depth, p.kind, p.then) for p in hit.prerequisites] == [
        ("send_message", 1, "data", []), ("get_user_id", 2, "data", ["send_message"])]
    assert result.also_needed == {"send_message": ["notify_followers"], "get_user_id": ["notify_followers"]}
    text = as_text(result)
    assert "needs first: send_message, get_user_id (then send_message)" in text
    assert "not in the top 1, but needed first:" in text
    # the docs state the first need: its sentence beside it (the edge of the schema graph, stated in the docs too)
    assert hit.prerequisites[0].said == "The id returned by send_message." and hit.prerequisites[1].said is None
    assert "as the docs say:\n     notify_followers needs send_message: 'The id returned by send_message.'" in text
    stated = retrieve(con, "my_agent", "tell my followers", k=1, graph="stated",
                      encode=own_embedding(con, "notify_followers"))
    assert [(p.tool_id, p.depth, p.kind) for p in stated.hits[0].prerequisites] == [("send_message", 1, "data")]
    # --depth 1: the hit's own prerequisites only
    shallow = retrieve(con, "my_agent", "x", k=1, depth=1, encode=own_embedding(con, "notify_followers"))
    assert [p.tool_id for p in shallow.hits[0].prerequisites] == ["send_message"]
    assert shallow.also_needed == {"send_message": ["notify_followers"]}
    # a prerequisite among the hits is not "missed"; one needed by two hits names both, best hit first
    both = retrieve(con, "my_agent", "x", k=4, encode=own_embedding(con, "notify_followers"))
    assert sorted(h.tool_id for h in both.hits) == ["get_user_id", "get_weather", "notify_followers", "send_message"]
    assert both.also_needed == {}
    # a graph named outright: the gold edges this set does not have are an error, not an empty answer
    with pytest.raises(duckdb.Error, match="has no edge source manual"):
        retrieve(con, "my_agent", "x", graph="manual", encode=own_embedding(con, "get_weather"))


@pytest.mark.slow
def test_the_datasets_own_encoder_finds_a_tool_by_its_own_text(warehouse):
    from warehouse.retrieve import retrieve

    con = duckdb.connect(str(warehouse), read_only=True)
    (text,) = con.execute("SELECT embed_text FROM tools WHERE dataset = 'my_agent' AND tool_id = 'get_weather'"
                          ).fetchone()
    result = retrieve(con, "my_agent", text, k=2)  # encoded by datasets.encoder, as the tools were
    assert result.hits[0].tool_id == "get_weather" and result.hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert result.hits[0].prerequisites == []


@pytest.mark.slow
def test_bad_requests_are_one_line_errors(warehouse, capsys):
    from warehouse.retrieve import main, retrieve

    con = duckdb.connect(str(warehouse), read_only=True)
    with pytest.raises(ValueError, match=r"--dataset 'nope': not in this warehouse \(it has: my_agent\)"):
        retrieve(con, "nope", "x")
    with pytest.raises(ValueError, match="the request is empty"):
        retrieve(con, "my_agent", "  ")
    with pytest.raises(ValueError, match="--depth 0: at least 1"):
        retrieve(con, "my_agent", "x", depth=0)
    assert main(["x", "--dataset", "nope", "--warehouse", str(warehouse)]) == 2
    assert capsys.readouterr().err.strip() == ("python -m warehouse.retrieve: --dataset 'nope': not in this warehouse "
                                               "(it has: my_agent)")
    with pytest.raises(SystemExit):
        main(["x", "--dataset", "my_agent", "--warehouse", str(warehouse.parent / "missing.duckdb")])
    assert "--warehouse" in capsys.readouterr().err
