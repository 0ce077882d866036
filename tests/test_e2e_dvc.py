"""The pipeline through real DVC: data stages in a fresh temp copy of the project, the full pipeline and its variant in
a copy of the session's flow-built project (tests/built_project.py)."""

from __future__ import annotations

import json

import pytest

from components.config import load_config
from tests.project import DATA_STAGES, make_project, ran, restored, run

def _mlflow_stage_runs(project):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    return {r.data.tags["agentr1.stage"]: r for r in client.search_runs([exp.experiment_id])}


def _all_runs(project):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name("agentr1").experiment_id])


@pytest.mark.slow
def test_dvc_repro_noop_and_exp_run_only_dependents(tmp_path):
    project = make_project(tmp_path / "p")
    out = run(["dvc", "repro", "retrieval_eval"], project)
    assert ran(out.stdout) == DATA_STAGES
    # quiet: no DVC warning (e.g. an empty file as a dep) and no Python warning (e.g. MLflow's dataset sources)
    noisy = [line for line in (out.stdout + out.stderr).splitlines() if "WARNING" in line or "Warning:" in line]
    assert not noisy, noisy
    metrics = json.loads((project / "artifacts" / "metrics" / "retrieval.json").read_text())
    assert metrics["recall@5/hotpotqa"] > 0.5
    runs = _mlflow_stage_runs(project)
    assert set(DATA_STAGES) <= set(runs)
    assert runs["retrieval_eval"].data.metrics["recall_5/hotpotqa"] == pytest.approx(metrics["recall@5/hotpotqa"])
    params = load_config(project / "params.yaml")
    assert runs["prepare"].data.params["retrieval.top_k"] == str(params.retrieval.top_k)  # the run's own params
    assert runs["prepare"].inputs.dataset_inputs, "prepare logs its outputs with digests"
    # one `dvc repro` = one parent run, named after the commit, its stage runs nested under it
    parent = runs["pipeline"]
    assert parent.info.run_name.startswith("dvc repro @ ") and parent.info.status == "FINISHED"
    assert {runs[s].data.tags["mlflow.parentRunId"] for s in DATA_STAGES} == {parent.info.run_id}

    again = run(["dvc", "repro", "retrieval_eval"], project)
    assert ran(again.stdout) == []

    exp = run(["dvc", "exp", "run", "-S", "retrieval.eval_k=[1,3]", "retrieval_eval"], project)
    assert ran(exp.stdout) == ["retrieval_eval"]
    metrics = json.loads((project / "artifacts" / "metrics" / "retrieval.json").read_text())
    assert "recall@3/hotpotqa" in metrics and "recall@5/hotpotqa" not in metrics
    after = _all_runs(project)
    (exp_parent,) = [r for r in after if r.data.tags["agentr1.stage"] == "pipeline" and r.info.run_id != parent.info.run_id]
    exp_name = exp_parent.data.tags["agentr1.dvc_exp"]
    assert exp_name and exp_parent.info.run_name.startswith(f"dvc exp {exp_name} @ ")
    (new_eval,) = [r for r in after if r.data.tags.get("mlflow.parentRunId") == exp_parent.info.run_id]
    assert new_eval.data.tags["agentr1.stage"] == "retrieval_eval" and new_eval.data.params["retrieval.eval_k"] == "[1, 3]"


@pytest.mark.slow
def test_corrupted_dataset_stops_at_validate(tmp_path):
    project = make_project(tmp_path / "p")
    path = project / "data" / "hotpotqa" / "dev_distractor_ircot_300.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[3])
    row["question_text"] = "Which " + "very " * 400 + "long question?"
    lines[3] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")

    out = run(["dvc", "repro", "retrieval_eval"], project, check=False)
    assert out.returncode != 0
    assert ran(out.stdout) == ["prepare", "validate"]
    assert "expect_column_value_lengths_to_be_between" in out.stderr + out.stdout
    assert row["question_id"] in out.stderr + out.stdout
    assert not (project / "artifacts" / "index").exists()
    assert not (project / "artifacts" / "validation" / "summary.json").exists()
    assert list((project / "artifacts" / "validation").rglob("*.html")), "the data-docs report is still written"
    (parent,) = [r for r in _all_runs(project) if r.data.tags["agentr1.stage"] == "pipeline"]
    assert parent.info.status == "FAILED"  # the failed stage fails its pipeline's parent run


@pytest.mark.slow
def test_full_pipeline_and_algorithm_variant(built, tmp_path):
    import mlflow

    project = built.copy(tmp_path / "p")  # every stage, run by the Prefect flow through DVC (tests/test_flows.py)

    report = json.loads((project / "artifacts" / "metrics" / "eval.json").read_text())
    for system in ("direct", "naive_rag", "base_agent"):
        assert set(report["baseline"][system]["em"]) == {"synthetic", "synthetic_cf", "hotpotqa"}
    for system in ("direct", "naive_rag"):  # plain-generation baselines also report the strict parse
        assert set(report["baseline"][system]["em_strict"]) == {"synthetic", "synthetic_cf", "hotpotqa"}
    assert "em_strict" not in report and "em_strict" not in report["baseline"]["base_agent"]
    assert 0.0 <= report["em"]["synthetic"]["dev"] <= 1.0
    curve = (project / "artifacts" / "train" / "curve.csv").read_text().splitlines()
    assert curve[0].startswith("step,") and len(curve) == 3  # header + 2 steps
    dev_curve = (project / "artifacts" / "train" / "dev_curve.csv").read_text().splitlines()
    assert dev_curve == ["step,em,f1,mean_em"]  # train.eval_every 0: the DVC plot exists, with no dev points
    em = json.loads((project / "artifacts" / "metrics" / "em.json").read_text())  # the stage's DVC metric: EM only
    assert em["agent"]["synthetic/dev"] == report["em"]["synthetic"]["dev"]
    assert em["naive_rag"]["hotpotqa/dev"] == report["baseline"]["naive_rag"]["em"]["hotpotqa"]["dev"]
    table = run(["dvc", "metrics", "show"], project).stdout
    assert "agent.synthetic/dev" in table and "answered" not in table and max(map(len, table.splitlines())) < 1500
    plots = json.loads(run(["dvc", "plots", "show", "--json"], project).stdout)
    assert "errors" not in plots, plots["errors"]  # every plot's x/y names a real column
    reward = [r["train/reward"] for r in plots["data"]["artifacts/train/curve.csv"][0]["content"]["data"]["values"]]
    assert len(reward) == 2 and all(reward)  # one point per step

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    champion = client.get_model_version_by_alias("agentr1-search-agent", "champion")
    assert champion.tags["em/synthetic/dev"] == f"{report['em']['synthetic']['dev']:.6g}"
    assert "data.questions.sha256" in champion.tags and "index.synthetic.version" in champion.tags
    decision = json.loads((project / "artifacts" / "register" / "decision.json").read_text())
    assert decision["promoted"] is True

    params = (project / "params.yaml").read_bytes()
    exp = run(["scripts/run.sh", "-S", "train.algorithm=ppo"], project)  # `make run SET=train.algorithm=ppo`
    assert "EM per system and set" in exp.stdout  # the run's summary
    # Upstream stages are untouched; evaluate re-runs, comes from the run-cache, or is skipped when the
    # variant's weights are bit-identical (2 steps with no reward signal).
    assert ran(exp.stdout)[0] == "train" and "register" in ran(exp.stdout)
    assert set(ran(exp.stdout) + restored(exp.stdout)) <= {"train", "evaluate", "register"}
    runs = client.search_runs([client.get_experiment_by_name("agentr1").experiment_id],
                              filter_string="tags.`agentr1.stage` = 'train'")
    assert sorted(r.data.params["train.algorithm"] for r in runs) == ["grpo", "ppo"]
    _left_params_as_they_were(project, params)
    assert [p["train"]["algorithm"] for p in _experiments(project).values()] == ["ppo"]
    status = run(["dvc", "status"], project).stdout  # the file's params are not the experiment's (README)
    assert "train" in status and "train.algorithm" in status

    again = run(["scripts/run.sh", "-S", "train.algorithm=ppo"], project)
    assert ran(again.stdout) == []
    _left_params_as_they_were(project, params)

    failed = run(["scripts/run.sh", "-S", "train.algorithm=ppo", "-S", "retrieval.top_k=-1"], project, check=False)
    assert failed.returncode != 0 and "retrieval.top_k" in failed.stdout + failed.stderr
    _left_params_as_they_were(project, params)


def _left_params_as_they_were(project, params: bytes) -> None:
    """`make run` with overrides (scripts/run.sh) leaves params.yaml's bytes, and every tracked file, as they were."""
    assert (project / "params.yaml").read_bytes() == params
    assert run(["git", "status", "--porcelain", "--untracked-files=no"], project).stdout == ""


def _experiments(project) -> dict[str, dict]:
    """`dvc exp show --json`: each experiment's name -> its params.yaml values."""
    shown = json.loads(run(["dvc", "exp", "show", "--json"], project).stdout)
    return {rev["name"]: rev["data"]["params"]["params.yaml"]["data"]
            for base in shown for exp in base.get("experiments") or [] for rev in exp["revs"]}


@pytest.mark.slow
def test_dvc_plots_render_offline_with_the_bundled_template(built, tmp_path, browser):
    """`make plots`: `dvc plots show` with vega, vega-lite and vega-embed inlined (scripts/plots.sh) draws every plot in
    Chromium with every http(s) request blocked; DVC's own page would fetch them from a CDN and stay blank offline."""
    import subprocess

    from selenium.webdriver.support.ui import WebDriverWait

    from tests.browser import screenshot
    from tests.project import ROOT

    template = ROOT / ".cache" / "plots" / "template.html"  # where `make plots` keeps it
    if not template.is_file():
        subprocess.run([str(ROOT / "scripts" / "plots.sh"), str(template)], check=True, capture_output=True, timeout=600)
    project = built.copy(tmp_path / "p")
    run(["dvc", "plots", "show", "--html-template", str(template), "-o", str(tmp_path / "plots")], project)
    page = (tmp_path / "plots" / "index.html").read_text()
    assert "cdn.jsdelivr" not in page and "vegaEmbed(" in page

    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*"]})
    try:
        browser.get((tmp_path / "plots" / "index.html").as_uri())
        # a drawn chart for each plot with data: the reward curve and EM per eval set (this small project's training
        # ran no dev evaluation, so its dev curve is empty)
        drawn = ("return ['artifacts_train_curve_csv', 'artifacts_eval_per_dataset_csv'].every(id => "
                 "[...document.querySelectorAll(`#${id} canvas`)].some(c => c.width > 100 && c.height > 100))")  # fmt: skip
        WebDriverWait(browser, 60).until(lambda d: d.execute_script(drawn))
        assert browser.execute_script("return typeof vegaEmbed === 'function' && typeof vega.View === 'function'")
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
        shot = screenshot(browser, tmp_path / "plots.png")
        assert shot.stat().st_size > 20_000
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
