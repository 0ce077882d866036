"""One walk over an episode's log serves `agentr1 ask`, the served model (turns) and the report's traces
(episode_steps): the environment's own first search first, then each model turn with its call and observation."""

from __future__ import annotations

from components.agent.tool_env import Episode
from components.agent.turns import turns
from components.data.schema import Question
from components.rollout.steps import episode_steps
from components.rollout.trajectory import Trajectory

CALL = '<tool_call>{"name": "search", "arguments": {"query": "Paris mayor"}}</tool_call>'
HITS = "[1] Paris: capital of France\n[2] Anne Hidalgo: mayor of Paris"


def _episode(forced: bool) -> Episode:
    q = Question("hotpotqa:1", "Who is the mayor of Paris?", ["Anne Hidalgo"], "hotpotqa", "dev")
    ep = Episode(q, first_search="[1] Paris: a city" if forced else None)
    ep.log = [("user", q.question), ("assistant", CALL), ("tool", HITS), ("assistant", "no markup here"),
              ("tool", "Error: no tool call"), ("assistant", "<answer>Anne Hidalgo</answer>")]  # fmt: skip
    return ep


def test_turns_pair_each_model_turn_with_its_call_and_observation():
    got = turns(_episode(forced=True))
    assert [(t.text, t.observation) for t in got] == [
        ("", "[1] Paris: a city"),
        (CALL, HITS),
        ("no markup here", "Error: no tool call"),
        ("<answer>Anne Hidalgo</answer>", None),
    ]
    assert got[0].call == {"name": "search", "arguments": {"query": "Who is the mayor of Paris?"}}
    assert got[1].call == {"name": "search", "arguments": {"query": "Paris mayor"}}
    assert got[2].call is None and got[3].call is None


def test_episode_steps_follow_the_same_turns_with_their_times():
    for forced in (False, True):
        t = Trajectory(_episode(forced), prompt_len=0, turn_times=[(1, 2), (3, 4), (5, 6)], tool_times=[(2, 3), (4, 5)])
        steps = episode_steps(t)
        if forced:
            first = steps.pop(0)
            assert first["forced"] and first["hits"] == ["Paris"] and first["query"] == "Who is the mayor of Paris?"
        assert [s["kind"] for s in steps] == ["model", "tool", "model", "tool", "model"]
        assert [(s["start_ns"], s["end_ns"]) for s in steps] == [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
        search, invalid = steps[1], steps[3]
        assert (search["name"], search["query"], search["ok"], search["hits"]) == ("search", "Paris mayor", True,
                                                                                  ["Paris", "Anne Hidalgo"])  # fmt: skip
        assert (invalid["name"], invalid["query"], invalid["ok"], invalid["hits"]) == ("invalid", None, False, [])
