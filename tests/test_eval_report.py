"""The evaluate stage's trajectory viewer (artifacts/eval/report.html) in a real headless Chromium, and the
episodes it logs as MLflow traces, read back from the real sqlite store. One small real run: prepare, index,
base_model, 2 training steps (one evaluation step) and the evaluation of the agent and three baselines."""

import json
import os
from pathlib import Path

import mlflow
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from components.evaluation.html_report import render
from components.evaluation.agent_eval import AgentResult
from tests.browser import screenshot
from tests.conftest import START_CWD
from tests.evaluated_project import SETS, SYSTEMS, TRACES


def test_the_project_fixture_leaves_the_working_directory_and_store_alone(evaluated):
    """The fixture builds in its own directory and MLflow store; its tests run where the session started."""
    assert Path.cwd() == START_CWD != evaluated.root
    assert evaluated.uri not in (os.environ.get("MLFLOW_TRACKING_URI"), mlflow.get_tracking_uri())


def _visible(browser) -> list:
    return [e for e in browser.find_elements(By.CSS_SELECTOR, ".traj") if e.is_displayed()]


def test_report_filters_in_a_real_browser(evaluated, browser, tmp_path):
    project = evaluated.root
    report = json.loads((project / "artifacts" / "metrics" / "eval.json").read_text())
    predictions = [json.loads(line) for line in (project / "artifacts" / "eval" / "predictions.jsonl").open()]
    n = {s: 8 for s in SETS}
    browser.get((project / "artifacts" / "eval" / "report.html").as_uri())
    shot = screenshot(browser, tmp_path / "report.png")
    assert len(_visible(browser)) == len(predictions) == len(SYSTEMS) * sum(n.values())
    assert "At most 100 trajectories per system and set" in browser.find_element(By.ID, "cap").text

    Select(browser.find_element(By.ID, "f-system")).select_by_value("direct")
    shown = _visible(browser)
    assert len(shown) == sum(n.values()) and {e.get_attribute("data-system") for e in shown} == {"direct"}
    rows = [r for r in browser.find_elements(By.CSS_SELECTOR, "#metrics .row") if r.is_displayed()]
    assert [r.get_attribute("data-system") for r in rows] == ["direct", "direct"]

    Select(browser.find_element(By.ID, "f-system")).select_by_value("")
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("wrong")
    wrong = _visible(browser)
    ems = {"agent": report["em"]} | {s: report["baseline"][s]["em"] for s in SYSTEMS[1:]}
    expected = sum(round(n[s] * (1 - ems[sys][s.split("/")[0]]["dev"])) for sys in SYSTEMS for s in SETS)
    assert len(wrong) == expected == sum(p["em"] == 0 for p in predictions)
    assert all(e.get_attribute("data-correct") == "0" and "EM 0" in e.text for e in wrong)
    assert browser.find_element(By.ID, "shown").text == str(expected)

    Select(browser.find_element(By.ID, "f-set")).select_by_value("synthetic_cf/dev")
    assert {e.get_attribute("data-set") for e in _visible(browser)} <= {"synthetic_cf/dev"}
    assert shot.stat().st_size > 10_000


def _poisoned() -> AgentResult:
    evil = '<script>window.pwned=1</script></div></pre><img src=x onerror="window.pwned=2">'
    steps = [{"kind": "model", "text": f'<tool_call>{{"name": "search", "arguments": {{"query": "{evil}"}}}}</tool_call>',
              "start_ns": 1, "end_ns": 2},
             {"kind": "tool", "name": "search", "query": evil, "ok": True, "hits": [evil], "text": f"[1] {evil}: {evil}",
              "start_ns": 2, "end_ns": 3},
             {"kind": "model", "text": f"<answer>{evil}</answer>", "start_ns": 3, "end_ns": 4}]  # fmt: skip
    return AgentResult("q:1", "synthetic", f"Who? {evil}", [evil], evil, 2, 1, 0.0, 0.0, "", steps=steps)


def test_untrusted_text_is_shown_not_run(browser, tmp_path):
    page = render([{"system": "agent", "set": "synthetic/dev", "em": 0.0, "n": 1}], {("agent", "synthetic/dev"): [_poisoned()]}, 5)
    assert "<script>window" not in page and "</div></pre><img" not in page
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    browser.get(path.as_uri())
    screenshot(browser, tmp_path / "poisoned.png")
    assert browser.execute_script("return window.pwned === undefined")
    (traj,) = browser.find_elements(By.CSS_SELECTOR, ".traj")
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []  # no element injected
    assert traj.text.count('<script>window.pwned=1</script></div></pre><img src=x onerror="window.pwned=2">') >= 5
    assert len(browser.find_elements(By.CSS_SELECTOR, "#trajectories > div")) == 1  # the </div> closed nothing


def test_report_states_and_applies_its_cap():
    results = {("agent", "synthetic/dev"): [_poisoned()] * 7}
    page = render([], results, 3)
    assert page.count('class="traj') == 3 and "At most 3 trajectories per system and set" in page and "3 of 7" in page


def test_episodes_are_traces_in_the_mlflow_store(evaluated):
    project, cfg = evaluated.root, evaluated.cfg
    client = mlflow.MlflowClient(evaluated.uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    (eval_run,) = client.search_runs([exp], "tags.`agentr1.stage` = 'evaluate'")
    traces = client.search_traces(locations=[exp], filter_string="tag.`agentr1.stage` = 'evaluate'")
    assert len(traces) == len(SYSTEMS) * len(SETS) * TRACES
    predictions = {(p["system"], p["set"], p["question_id"]): p
                   for p in map(json.loads, (project / "artifacts" / "eval" / "predictions.jsonl").open())}  # fmt: skip
    seen = set()
    for tr in traces:
        tags, spans = tr.info.tags, tr.data.spans
        key = (tags["agentr1.system"], tags["agentr1.set"], tags["agentr1.question_id"])
        p = predictions[key]
        seen.add(key)
        assert tr.info.trace_metadata["mlflow.sourceRun"] == eval_run.info.run_id
        assert tr.info.trace_metadata["mlflow.trace.session"] == f"evaluate/{key[0]}/{key[1]}"
        assert float(tags["em"]) == p["em"] and float(tags["f1"]) == pytest.approx(p["f1"], abs=1e-3)
        assessments = {a.name: a.value for a in tr.info.assessments}
        assert assessments["em"] == p["em"] and assessments["f1"] == pytest.approx(p["f1"])
        root = next(s for s in spans if s.parent_id is None)
        assert root.span_type == "AGENT" and root.outputs == {"answer": p["prediction"]}
        assert root.inputs["question"] == p["question"]
        turns = [s for s in spans if s.span_type == "CHAT_MODEL"]
        tools = [s for s in spans if s.span_type == "TOOL"]
        assert len(turns) == p["turns"] and sum(s.attributes["ok"] and not s.attributes["forced"] for s in tools) == p["searches"]
        assert sum(s.attributes["forced"] for s in tools) == (key[0] == "naive_rag")  # naive RAG's one search shows
        for s in tools:
            assert s.name in ("search", "invalid") and s.attributes["hits"] == len(s.outputs["hits"])
            assert s.attributes["latency_s"] >= 0 and "query" in s.inputs
        for s in spans:
            assert root.start_time_ns <= s.start_time_ns <= s.end_time_ns <= root.end_time_ns
    first = {(s, d) for s in SYSTEMS for d in SETS}
    assert {(s, d) for s, d, _ in seen} == first  # the first TRACES questions of every pair
    train = client.search_traces(locations=[exp], filter_string="tag.`agentr1.stage` = 'train'")
    assert 1 <= len(train) <= TRACES and {t.info.tags["agentr1.step"] for t in train} == {"2"}
    assert all(any(s.span_type == "CHAT_MODEL" for s in t.data.spans) for t in train)


def test_outcome_filter_hides_correct_rows(browser, tmp_path):
    """The tiny real run scores EM 0 everywhere; here a page with both outcomes, rendered by the same code."""
    from dataclasses import replace

    bad = _poisoned()
    good = replace(bad, question_id="q:2", em=1.0, f1=1.0)
    page = render([], {("agent", "synthetic/dev"): [good, bad], ("direct", "synthetic/dev"): [bad]}, 5)
    path = tmp_path / "mixed.html"
    path.write_text(page, encoding="utf-8")
    browser.get(path.as_uri())
    outcome = Select(browser.find_element(By.ID, "f-outcome"))
    outcome.select_by_value("wrong")
    assert sorted(e.get_attribute("data-qid") for e in _visible(browser)) == ["q:1", "q:1"]
    outcome.select_by_value("correct")
    assert [e.get_attribute("data-qid") for e in _visible(browser)] == ["q:2"]
    Select(browser.find_element(By.ID, "f-system")).select_by_value("direct")
    assert _visible(browser) == [] and browser.find_element(By.ID, "shown").text == "0"


def test_report_says_what_it_evaluated_and_draws_its_charts_offline(evaluated, browser, tmp_path):
    """Context (model, run, commit, date, params digest), the legend, the EM chart and the learning curve, drawn from
    inline SVG in a real browser with every http(s) request blocked."""
    import csv

    from components.evaluation.evaluate import params_digest

    project, cfg = evaluated.root, evaluated.cfg
    dev = list(csv.DictReader((project / "artifacts" / "train" / "dev_curve.csv").open()))
    assert dev, "the train stage recorded a dev curve"
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*"]})
    try:
        browser.get((project / "artifacts" / "eval" / "report.html").as_uri())
        screenshot(browser, tmp_path / "report-context.png")
        context = browser.find_element(By.ID, "context").text
        for label in ("model", "training", "registered version", "commit", "date", "params digest"):
            assert label in context, context
        assert "tiny Qwen2" in context and params_digest(cfg) in context and "MLflow run" in context
        legend = browser.find_element(By.ID, "legend")
        assert [e.get_attribute("data-system") for e in legend.find_elements(By.CSS_SELECTOR, "[data-system]")] == SYSTEMS
        assert {e.get_attribute("data-set") for e in legend.find_elements(By.CSS_SELECTOR, "[data-set]")} == set(SETS)
        assert "counterfactual" in legend.text and "no search" in legend.text

        bars = browser.find_elements(By.CSS_SELECTOR, "#em-chart rect.bar")
        assert len(bars) == len(SYSTEMS) * len(SETS)
        report = json.loads((project / "artifacts" / "metrics" / "eval.json").read_text())
        agent_cf = next(b for b in bars if b.get_attribute("data-name") == "agent" and b.get_attribute("data-group") == "synthetic_cf/dev")
        assert float(agent_cf.get_attribute("data-value")) == pytest.approx(report["em"]["synthetic_cf"]["dev"])

        curve = browser.find_element(By.ID, "curve")
        assert curve.size["width"] > 300 and curve.size["height"] > 150  # laid out and drawn
        em_line = curve.find_element(By.CSS_SELECTOR, "polyline[data-name^='dev EM (']")
        assert len(em_line.get_attribute("points").split()) == len([r for r in dev if r["em"] != ""])
        assert browser.find_elements(By.CSS_SELECTOR, "#reward-curve polyline")
        # nothing was fetched: the page, its styles, script and charts are all inline
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
