"""EM/F1 with the official SQuAD/HotpotQA normalisation, the outcome reward and per-call process rewards."""

import pytest

from components.agent.rewards import exact_match, f1, is_yes_no, normalize_answer, outcome_reward, process_reward
from components.config import RewardConfig


@pytest.mark.parametrize(
    "raw, norm",
    [("The  Eiffel Tower!", "eiffel tower"), ("an Apple, a day", "apple day"), ("U.S.A.", "usa"), ("Theatre", "theatre"),
     ("KKR &amp; Co.", "kkr co")],  # the model's copy of an escaped passage reads as the text it stands for
)
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_and_f1():
    assert exact_match("the Kelitu", ["Kelitu"]) == 1.0
    assert exact_match("Kelitu Bavo", ["Kelitu"]) == 0.0
    assert exact_match(None, ["Kelitu"]) == 0.0
    assert exact_match("KKR &amp; Co.", ["KKR & Co"]) == 1.0 and f1("Tom &amp; Jerry", ["Tom & Jerry"]) == 1.0
    assert f1("Kelitu Bavo", ["Kelitu"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1("x", ["a", "x"]) == 1.0  # best over gold answers
    assert f1("yes", ["no"]) == 0.0 and f1("no", ["no"]) == 1.0  # HotpotQA yes/no rule
    assert f1(None, ["a"]) == 0.0


def test_outcome_reward_terms():
    w = RewardConfig(format_penalty=0.5, answer_metric="f1")
    assert outcome_reward(None, ["x"], w) == -0.5
    assert outcome_reward("x y", ["x"], w) == pytest.approx(2 / 3)
    assert outcome_reward("x y", ["x"], RewardConfig()) == 0.0


def test_process_reward_terms():
    w = RewardConfig(valid_call=0.1, invalid_call=0.2, supporting=0.3, new_info=0.05, search_cost=0.01)
    assert process_reward(False, (), set(), [], w) == pytest.approx(-0.2)
    assert process_reward(True, ("p1",), set(), ["p1"], w) == pytest.approx(0.1 - 0.01 + 0.05 + 0.3)
    assert process_reward(True, ("p1",), {"p1"}, ["p1"], w) == pytest.approx(0.1 - 0.01)  # nothing new
    assert process_reward(True, ("p2",), {"p1"}, ["p1"], w) == pytest.approx(0.1 - 0.01 + 0.05)


def test_subem_is_a_whole_word_gold_inside_the_answer():
    from components.agent.rewards import sub_exact_match

    assert sub_exact_match("It is the Kelitu of Bavo", ["kelitu"]) == 1.0
    assert sub_exact_match("Kelitus", ["Kelitu"]) == 0.0 and sub_exact_match("not now", ["no"]) == 0.0
    assert sub_exact_match(None, ["x"]) == 0.0 and sub_exact_match("x", [""]) == 0.0


def test_answer_format_and_metric_in_the_outcome():
    w = RewardConfig(answer_metric="subem", answer_format=0.5, format_penalty=0.2)
    assert outcome_reward("the rival is Kelitu", ["Kelitu"], w) == pytest.approx(1.5)
    assert outcome_reward("Dozi", ["Kelitu"], w) == pytest.approx(0.5)  # well-formed, wrong
    assert outcome_reward(None, ["Kelitu"], w) == pytest.approx(-0.2)


def test_yes_no_answers_are_the_collapse_monitors_guesses():
    assert [is_yes_no(a) for a in ("Yes", " no.", "The yes", "No way", "Norway", "", None)] == [
        True, True, True, False, False, False, False]
