"""The MLflow UI as a person sees it: a real `mlflow server` on the project's store after two small real pipeline
runs (different train params), started as `make ui` starts it, driven in headless Chromium.

Checked in the browser: the URL `make ui` prints opens the runs' chart view with each pipeline run's headline metrics
(EM/F1 per set and system, the champion version); the experiment's runs page shows one collapsed parent row per pipeline run (its name), all
stage runs nested under them; the compare view lists both train runs, the param that differs and their metric names;
the registered model page shows the `champion` alias, each version page its evidence tags, and the description's
"evaluation run" link opens the evaluate run. The compare view prints metric values in a separate, rounded column
layout, so the values themselves are read back through the same server's REST API (runs/get). Screenshots are left
in the test's tmp dir (`ui-*.png`).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

import mlflow
import psutil
import pytest

from components.config import parse_config
from components import artifacts
from components.stages import run_stage
from components.tracking.runs import pipeline_run
from tests.browser import screenshot
from tests.served import NAME, PRIMED, free_port, start, stop, wait_up

ROOT = Path(__file__).resolve().parents[1]
METRIC = "em/synthetic/dev"
# the primed fixture's world and prompt (tests/test_learning.py), a few steps and a small evaluation
BASE = {"project": {"seed": 20251}, "data": {"datasets": [], "synthetic": {"seed": 20251 + 7}},
        "agent": {"system_prompt": False, "max_turns": 3}, "retrieval": {"top_k": 1},
        "train": {"num_threads": 1, "steps": 3, "questions_per_step": 4, "group_size": 4, "eval_every": 0},
        "evaluate": {"sets": [{"dataset": "synthetic", "split": "dev", "limit": 8}], "baselines": ["direct"]}}  # fmt: skip
EXPERIMENTS = {"grpo-lr1e-3": {"algorithm": "grpo", "lr": 1e-3}, "rloo-lr5e-4": {"algorithm": "rloo", "lr": 5e-4}}


def _pipeline(tmp_path: Path, name: str, train: dict) -> str:
    raw = json.loads(json.dumps(BASE))
    raw["project"]["artifacts_dir"] = str(tmp_path / "artifacts")
    raw["train"] |= train
    cfg = parse_config(raw)
    for d in (artifacts.base_model(cfg), artifacts.pretrained_model(cfg)):
        if not d.exists():
            shutil.copytree(PRIMED, d)
    with pipeline_run(cfg, name) as parent:
        for stage in ("prepare", "index", "train", "evaluate", "register"):
            run_stage(stage, cfg, parent_run_id=parent)
    return parent


def _wait_text(drv, *needles: str, timeout: float = 60) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    def body(d):
        text = d.find_element("tag name", "body").text
        return text if all(n in text for n in needles) else False

    try:
        return WebDriverWait(drv, timeout).until(body)
    except Exception:
        text = drv.find_element("tag name", "body").text
        raise AssertionError(f"page {drv.current_url} lacks {[n for n in needles if n not in text]}:\n{text[:3000]}") from None


@pytest.mark.slow
def test_mlflow_ui_shows_pipelines_compare_and_champion_evidence(mlflow_uri, tmp_path, browser):
    parents = {name: _pipeline(tmp_path, name, train) for name, train in EXPERIMENTS.items()}
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name("agentr1")
    train_runs = {name: client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{pid}' and tags.`agentr1.stage` = 'train'")[0]
                  for name, pid in parents.items()}  # fmt: skip
    champion = client.get_model_version_by_alias(NAME, "champion")

    port = free_port()
    log = tmp_path / "server.log"
    # `make ui`'s server: one worker and no job runner (which alone starts 7 huey consumers: 33 s of CPU in `make test`)
    proc = start(["make", "-s", "--no-print-directory", "-C", str(ROOT), "ui", f"UI_PORT={port}", f"UI_STORE={mlflow_uri}"],
                 tmp_path, dict(os.environ), log)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_up(f"{base}/health", proc, log)
        headline = f"{base}/#/experiments/{exp.experiment_id}/runs?viewStateShareKey=agentr1-headline"
        assert log.read_text().splitlines()[0] == f"MLflow UI: {headline}"  # the URL it prints opens the headline view
        servers = [p.cmdline() for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(servers) <= 2 and not any("huey" in " ".join(c) for c in servers), servers  # server + its one worker

        # the experiment: one parent row per pipeline run (its name), the stage runs folded under them
        total = len(client.search_runs([exp.experiment_id]))
        assert total == 2 + 2 * 5
        browser.get(f"{base}/#/experiments/{exp.experiment_id}/runs")
        text = _wait_text(browser, *EXPERIMENTS, f"{total} matching runs")
        assert "evaluate" not in text.split(f"{total} matching runs")[0]  # children stay folded under their parent
        screenshot(browser, tmp_path / "ui-experiment.png")

        # compare the two train runs: both listed, the param that differs, their metrics
        ids = [r.info.run_id for r in train_runs.values()]
        query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([exp.experiment_id])})
        browser.get(f"{base}/#/compare-runs?{query}")
        text = _wait_text(browser, "Comparing 2 Runs", f"Run ID: {ids[0]} {ids[1]}", "train/reward", "stage_seconds")
        algs = " ".join(r.data.params["train.algorithm"] for r in train_runs.values())
        assert f"train.algorithm {algs}" in text
        screenshot(browser, tmp_path / "ui-compare.png")
        for run in train_runs.values():
            with urllib.request.urlopen(f"{base}/api/2.0/mlflow/runs/get?run_id={run.info.run_id}") as r:
                served = {m["key"]: m["value"] for m in json.loads(r.read())["run"]["data"]["metrics"]}
            assert served["train/reward"] == pytest.approx(run.data.metrics["train/reward"])

        # the registered model: the champion alias on its version; each version's evidence; the evaluation-run link
        browser.get(f"{base}/#/models/{NAME}")
        _wait_text(browser, "@ champion", "gate.vs_champion")
        screenshot(browser, tmp_path / "ui-model.png")
        for mv in client.search_model_versions(f"name = '{NAME}'"):
            browser.get(f"{base}/#/models/{NAME}/versions/{mv.version}")
            needles = ["gate.vs_champion", mv.tags["gate.vs_champion"], "evidence.decision", METRIC,
                       "data.questions.sha256", mv.tags["data.questions.sha256"], "index.synthetic.version"]  # fmt: skip
            text = _wait_text(browser, f"Version {mv.version}", *needles)
            assert ("@ champion" in text) == (str(mv.version) == str(champion.version)), text[:800]
            screenshot(browser, tmp_path / f"ui-version-{mv.version}.png")
        link = browser.find_element("link text", "evaluation run")
        eval_run_id = link.get_attribute("href").rsplit("/", 1)[-1]
        assert client.get_run(eval_run_id).data.tags["agentr1.stage"] == "evaluate"
        home, before = browser.current_window_handle, set(browser.window_handles)
        link.click()  # the description's markdown link opens in a new tab
        (tab,) = set(browser.window_handles) - before or {home}
        browser.switch_to.window(tab)
        _wait_text(browser, "evaluate", eval_run_id, METRIC)
        screenshot(browser, tmp_path / "ui-eval-run.png")
        if tab != home:
            browser.close()
            browser.switch_to.window(home)

        # each pipeline run carries its headline: EM/F1 per set and system, the champion decision
        for i, pid in enumerate(parents.values()):
            parent = client.get_run(pid)
            evaluate = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{pid}' and tags.`agentr1.stage` = 'evaluate'")[0]
            assert parent.data.metrics["em/synthetic/dev/agent"] == evaluate.data.metrics[METRIC]
            assert parent.data.metrics["f1/synthetic/dev/direct"] == evaluate.data.metrics["baseline/direct/f1/synthetic/dev"]
            # the first registration is always promoted; after the last one the champion is whichever won
            assert parent.data.metrics["champion_version"] == (1.0 if i == 0 else float(champion.version))
            assert "champion" in parent.data.tags["agentr1.decision"]
        # the runs table as `make ui` opens it: one row per pipeline run, its EM per set and system and the champion
        browser.get(headline)
        text = _wait_text(browser, "em/synthetic/dev/agent", "em/synthetic/dev/direct", "champion_version", *EXPERIMENTS)
        assert "evaluate" not in text and "Exit shared view" in text  # the pipeline rows, their stages folded
        shot = screenshot(browser, tmp_path / "ui-headline.png")
        assert shot.stat().st_size > 20_000
    finally:
        stop(proc)
