"""bench.precondition_judge: the hand reading's tables become labelled pairs, each pair goes to agent 3 as its own
precondition request, and the verdicts are counted against the reading (the local OpenAI server answers)."""
from __future__ import annotations

import json

import pytest

import tests.openai_server as openai_server
from bench.precondition_judge import SAMPLE, hand_labels, main
from schemas.toolset import Tool, ToolSet
from tasks.toolsets.readers import write_toolset_dir
from tests.openai_server import FakeOpenAIServer

READING = """# Sample

## Mined pairs (2026-11-30, twenty-second session)

| # | producer | consumer | verdict | why |
|---|---|---|---|---|
| 1 | `os.getcwd` | `os.chdir` | right | not a tool pair: another section |

## Edges (2026-11-30, twenty-seventh session)

| # | producer (first) | consumer | p | gold | verdict | why |
|---|---|---|---|---|---|---|
| 1 | `check_route`: Check a route. | `schedule_pickup`: Schedule a pickup. | 0.71 | no | right, precondition | checked first |
| 2 | `check_weather`: Check the weather. | `update_weather`: Update it. | 0.72 | no | wrong | an update needs no check |
| 3 | `plan_course` | `build_course` | 0.60 | yes | gold | |

## Check pairs (2026-11-30, twenty-ninth session)

| # | prerequisite (checks) | dependent | p | added | gold | verdict | why |
|---|---|---|---|---|---|---|---|
| 1 | `check_weather` | `update_weather`: Update it. | 0.40 | no | no | right | read again: the first verdict stands |
| 2 | `check_route` | `launch_drone` | 0.45 | no | no | borderline | a route, if it flies one |
"""


def _api(name: str) -> Tool:
    return Tool(name, "g", {"name": name, "description": f"{name.replace('_', ' ')}.",
                            "input_params": [{"name": "x", "type": "string", "description": "x"}], "output_params": []})


@pytest.fixture
def reading(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text(READING)
    names = ("check_route", "schedule_pickup", "check_weather", "update_weather", "plan_course", "build_course",
             "launch_drone")
    folder = write_toolset_dir(ToolSet("toy", [_api(n) for n in names]), tmp_path / "toy")
    return sample, folder


def test_the_tables_of_the_named_sections_become_labels_gold_counting_as_right(reading):
    sample, _ = reading
    labels = [(x.prerequisite, x.dependent, x.verdict) for x in hand_labels(sample)]
    assert labels == [("check_route", "schedule_pickup", "right"), ("check_weather", "update_weather", "wrong"),
                      ("plan_course", "build_course", "right"), ("check_route", "launch_drone", "borderline")]


def test_the_projects_own_reading_holds_tool_pairs_of_every_verdict():
    labels = hand_labels(SAMPLE)
    assert {x.verdict for x in labels} == {"right", "borderline", "wrong"}
    assert len({(x.prerequisite, x.dependent) for x in labels}) == len(labels) >= 150


def test_each_pair_is_judged_by_agent_3_and_counted_against_the_reading(reading, tmp_path, monkeypatch):
    sample, folder = reading
    asked: list[str] = []
    real = openai_server.canned_answer

    def required_when_a_route_is_checked(agent, user_text):
        if agent != "precondition_verdict":
            return real(agent, user_text)
        asked.append(user_text)
        first = json.loads(user_text.split("API A:\n", 1)[1].split("\n\nAPI B:", 1)[0])["name"]
        return {"result": int(first == "check_route"), "reason": "r"}

    monkeypatch.setattr(openai_server, "canned_answer", required_when_a_route_is_checked)
    out = tmp_path / "judged.json"
    with FakeOpenAIServer() as server:
        result = main(["--toolset", str(folder), "--sample", str(sample), "--base-url", server.base_url,
                       "--model", "m", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)])
    assert len(asked) == 4 and all("A is called before B" in q for q in asked)  # agent 3's own prompt
    assert result["by_verdict"] == {"right": {"pairs": 2, "required": 1, "not required": 1},
                                    "borderline": {"pairs": 1, "required": 1},
                                    "wrong": {"pairs": 1, "not required": 1}}
    assert result["precision"] == 1.0 and result["recall"] == 0.5
    assert [row["required"] for row in json.loads(out.read_text())] == [True, False, False, True]


def test_a_pair_whose_tool_the_folder_lacks_is_refused_by_name(reading, tmp_path):
    sample, _ = reading
    other = write_toolset_dir(ToolSet("other", [_api("check_route")]), tmp_path / "other")
    with pytest.raises(SystemExit, match="no tool 'build_course'"):
        main(["--toolset", str(other), "--sample", str(sample), "--base-url", "http://127.0.0.1:1/v1"])
