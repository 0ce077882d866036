"""Real Prefect flow runs whose tasks ask real DVC to reproduce each stage, in ephemeral mode and against one local
Prefect server per module; the scheduled deployment served against that server retrains on a new data version end
to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import yaml

from components.config import set_dotted
from tests.project import BIN, DATA_STAGES, FOLLOWERS, env_for, run, touch
from tests.served import free_port, start, stop, wait_up

def _mlflow_runs(project):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    return client.search_runs([exp.experiment_id]) if exp else []


def rerun(output: str) -> list[str]:
    """The stages the flow re-ran, from its own summary line."""
    if "every stage up to date: nothing re-ran" in output:
        return []
    found = re.findall(r"stages re-run: ([\w, ]+)", output)
    assert found, output[-3000:]
    return found[-1].split(", ")


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory):
    """One local Prefect server (its own PREFECT_HOME) for the module's flow runs; yields its API URL."""
    home = tmp_path_factory.mktemp("prefect")
    port, log = free_port(), home / "server.log"
    server = start([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                   home, {**env_for(home), "PREFECT_HOME": str(home)}, log)  # fmt: skip
    try:
        wait_up(f"http://127.0.0.1:{port}/api/health", server, log, timeout=120)
        yield f"http://127.0.0.1:{port}/api"
    finally:
        stop(server)


@pytest.mark.slow
def test_flow_reproduces_through_dvc_only_what_changed(built, tmp_path, prefect_api):
    # The session's project was built by `python -m flows.pipeline` in Prefect's ephemeral mode, as a user runs it.
    assert "Finished in state Completed" in built.flow_output
    assert rerun(built.flow_output) == list(FOLLOWERS)
    project = built.copy(tmp_path / "p")
    flow = [sys.executable, "-m", "flows.pipeline", "--stages", ",".join(DATA_STAGES)]
    runs = _mlflow_runs(project)
    parent = [r for r in runs if r.data.tags.get("agentr1.stage") == "pipeline"]
    assert len(parent) == 1
    children = {r.data.tags["agentr1.stage"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id}
    assert set(children) == set(FOLLOWERS)  # dvc -> agentr1 CLI nested each stage under the flow's run
    assert children["retrieval_eval"].data.metrics["recall_5/hotpotqa"] > 0.3
    assert children["prepare"].data.params["data.synthetic.n_train"] == "100"

    # The same flow against a Prefect server: no ephemeral server starts per run. Nothing changed: DVC reports
    # every stage up to date, no stage runs again.
    served = {**env_for(project), "PREFECT_API_URL": prefect_api}
    out = run(flow, project, env=served)
    assert rerun(out.stdout + out.stderr) == []
    assert len(_mlflow_runs(project)) == len(runs) + 1  # only the new parent run

    # A module only retrieval_eval imports: that stage alone.
    touch(project, "components/retrieval/recall.py")
    out = run(flow, project, env=served)
    assert rerun(out.stdout + out.stderr) == ["retrieval_eval"]
    # A module validate imports: validate first, then at most what follows it.
    touch(project, "components/validation/suites.py")
    out = run(flow, project, env=served)
    again = rerun(out.stdout + out.stderr)
    assert again[0] == "validate" and set(again[1:]) <= FOLLOWERS["validate"]
    # The same answer through plain `dvc repro`: a shared module (components/io.py) re-runs from prepare on.
    touch(project, "components/io.py")
    status = json.loads(run(["dvc", "status", "--json", *DATA_STAGES], project).stdout)
    assert set(status) == set(DATA_STAGES)


TRIGGER = """
import asyncio, json
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.client.schemas.sorting import LogSort
from prefect.deployments import run_deployment

async def describe():
    async with get_client() as c:
        d = await c.read_deployment_by_name("agentr1-pipeline/nightly")
        return [(s.schedule.cron, s.schedule.timezone) for s in d.schedules], d.parameters

async def logs(flow_run_id, completed):
    # The serving process ships logs in batches after the state change: wait for the flow's summary line.
    async with get_client() as c:
        for _ in range(60):
            rows = await c.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200,
                                     sort=LogSort.TIMESTAMP_DESC)  # the newest 200, the summary among them
            text = "\\n".join(r.message for r in reversed(rows))
            if not completed or "stages re-run:" in text or "every stage up to date" in text:
                break
            await asyncio.sleep(1)
        return text

schedules, parameters = asyncio.run(describe())
flow_run = run_deployment("agentr1-pipeline/nightly", timeout=None, poll_interval=1)
print(json.dumps({"schedules": schedules, "parameters": parameters, "state": flow_run.state.type.value,
                  "message": flow_run.state.message, "logs": asyncio.run(logs(flow_run.id, flow_run.state.is_completed()))}))
"""


def _trigger(project, env) -> dict:
    """Run the deployment (registered: _serve) and wait for its end; its schedules, parameters, state and logs."""
    out = subprocess.run([sys.executable, "-c", TRIGGER], cwd=project, env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _new_data_version(project, edit, message: str):
    """Change data/, `dvc add data`, commit: a new DVC version of the raw data, as a data owner would."""
    changed = edit(project / "data")
    run(["dvc", "add", "data"], project)
    for cmd in (["git", "add", "data.dvc"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message]):
        run(cmd, project)
    return changed


def _add_corpus_page(data) -> None:
    """One more paragraph in a KILT page the small project indexes: the wiki corpus changes."""
    path = data / "wiki" / "kilt_sample_100_pages.jsonl"
    lines = path.read_text().splitlines()
    page = json.loads(lines[0])
    page["text"].append("Rutilu Vennor founded the Kestrel Harbour observatory in 1911 after a long voyage north.")
    lines[0] = json.dumps(page)
    path.write_text("\n".join(lines) + "\n")


def _bad_question(data) -> str:
    path = data / "hotpotqa" / "dev_distractor_ircot_300.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[3])
    row["question_text"] = "Which " + "very " * 400 + "long question?"
    lines[3] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    return row["question_id"]


def _serving(project) -> dict:
    """What serves: the live index version of every corpus, and the champion model version."""
    import mlflow

    manifest = json.loads((project / "artifacts" / "index" / "manifest.json").read_text())
    live = {alias: (project / "artifacts" / "index" / alias / "LIVE").read_text().strip() for alias in manifest}
    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    champion = client.get_model_version_by_alias("agentr1-search-agent", "champion")
    return {"live": live, "champion": str(champion.version)}


@pytest.mark.slow
def test_scheduled_retraining_on_a_new_data_version(built, tmp_path, prefect_api):
    import mlflow

    from components.registry.register import EVIDENCE

    project = built.copy(tmp_path / "p")  # the flow built every stage (test above); version 1 is champion
    env = env_for(project)
    env["PREFECT_API_URL"] = prefect_api
    env["PREFECT_RUNNER_POLL_FREQUENCY"] = "1"  # serve() picks up a triggered run within a second, not ten
    served = _serve(project, env, tmp_path / "serve.log")
    try:
        client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")

        before = _serving(project)
        assert before["champion"] == "1"

        # A new version of the data (one more corpus paragraph): the scheduled deployment re-indexes, retrains,
        # evaluates and registers.
        _new_data_version(project, _add_corpus_page, "data: one more wiki paragraph")
        second = _trigger(project, env)
        assert second["schedules"] == [["0 3 * * *", "UTC"]] and second["parameters"] == {"stages": None}
        assert second["state"] == "COMPLETED", second["message"]
        assert {"prepare", "validate", "index", "train", "evaluate", "register"} <= set(rerun(second["logs"]))
        after = _serving(project)
        assert after["live"]["wiki"] != before["live"]["wiki"]  # the wiki corpus was re-indexed
        assert after["live"]["synthetic"] == before["live"]["synthetic"]  # an unchanged corpus keeps its version
        decision = json.loads((project / "artifacts" / "register" / "decision.json").read_text())
        assert decision["version"] == "2" and decision["champion_version"] == "1" and decision["reason"]
        assert client.get_model_version("agentr1-search-agent", "2").tags[f"{EVIDENCE}.decision"] == decision["reason"]
        assert after["champion"] == ("2" if decision["promoted"] else "1")  # promoted or not, and why

        # Nothing changed: DVC finds every stage up to date; no stage run, no new model version.
        stage_runs = len(_mlflow_runs(project))
        third = _trigger(project, env)
        assert third["state"] == "COMPLETED", third["message"]
        assert rerun(third["logs"]) == []
        assert len(_mlflow_runs(project)) == stage_runs + 1  # the new pipeline parent run only
        assert len(client.search_model_versions("name='agentr1-search-agent'")) == 2

        # Bad new data: validation stops the run; the live indexes and the champion keep serving.
        question_id = _new_data_version(project, _bad_question, "data: a corrupted question")
        failed = _trigger(project, env)
        assert failed["state"] == "FAILED"
        assert "stage validate failed" in failed["message"]
        assert "expect_column_value_lengths_to_be_between" in failed["message"] and question_id in failed["message"]
        assert _serving(project) == after
        assert len(client.search_model_versions("name='agentr1-search-agent'")) == 2
    finally:
        stop(served)


DEPLOYMENT = "deployments/name/agentr1-pipeline/nightly"  # Prefect's REST route for read_deployment_by_name


def _serve(project, env, log):
    """`python -m flows.deploy` against the module's server, once its deployment is registered (asked over HTTP:
    a Python process per poll would import Prefect's client, seconds of CPU each, beside the starting runner)."""
    served = start([sys.executable, "-m", "flows.deploy"], project, env, log)
    wait_up(f"{env['PREFECT_API_URL']}/{DEPLOYMENT}", served, log, timeout=120)
    return served


def _stage_process(served, stage: str):
    """(the flow-run process the runner started, the `agentr1 <stage>` process under it), or (None, None)."""
    import psutil

    for flow in psutil.Process(served.pid).children():
        try:  # a short-lived child of the runner may exit while it is walked
            for proc in flow.children(recursive=True):
                try:
                    if re.search(rf"agentr1 {stage}$", " ".join(proc.cmdline())):
                        return flow, proc
                except psutil.Error:
                    continue
        except psutil.Error:
            continue
    return None, None


def _kill_flow_run(served, stage: str, ready, reboot: bool = False, timeout: float = 900) -> None:
    """SIGKILL the flow-run process and everything under it (DVC, the stage) once `stage` runs and `ready()` holds;
    with `reboot`, the serving process (the runner) too, as a host restart would."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        flow, proc = _stage_process(served, stage)
        if proc is not None and ready():
            try:
                victims = [*([psutil.Process(served.pid)] if reboot else []), flow, *flow.children(recursive=True)]
            except psutil.NoSuchProcess:  # the run moved on while it was walked: look again
                continue
            assert proc in victims and proc.is_running()
            for p in victims:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(victims, timeout=30)
            return
        time.sleep(0.05)
    raise AssertionError(f"{stage} never ran with its kill condition met")


def _set_params(project, **values) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    for key, value in values.items():
        set_dotted(params, key.replace("__", "."), value)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _trained_weights(project) -> str:
    from components.io import sha256_of

    return sha256_of(project / "artifacts" / "models" / "trained" / "model.safetensors")


@pytest.mark.slow
def test_a_scheduled_run_killed_in_train_and_in_register_is_crashed_and_the_next_run_completes(built, tmp_path, prefect_api):
    """The flow-run process SIGKILLed with DVC and the stage under it: in train after a checkpoint (with the runner, as a
    host restart), then in register while it uploads the model. Prefect shows each run CRASHED; the next scheduled run completes with no cleanup by
    hand (DVC's locks, MLflow runs and the registry are recovered); training resumes from its checkpoint to the
    weights of an uninterrupted run; the champion never points at an unfinished version."""
    import sqlite3

    import mlflow

    from components.registry.registration import COMPLETE, REGISTRATION_TAG
    from components.tracking.runs import STAGE_TAG

    longer = {"train__steps": 16, "train__checkpoint_every": 4}  # retrains: train, evaluate and register re-run
    reference = built.copy(tmp_path / "reference")
    _set_params(reference, **longer)
    run(["dvc", "repro", "train"], reference)  # the same change, uninterrupted: its weights are the reference

    project = built.copy(tmp_path / "p")
    env = {**env_for(project), "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    served = _serve(project, env, tmp_path / "serve.log")
    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    name = "agentr1-search-agent"

    def trigger_in_background():
        return subprocess.Popen([sys.executable, "-c", TRIGGER], cwd=project, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip

    def outcome(proc) -> dict:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    def champion_is_complete() -> None:
        champion = client.get_model_version_by_alias(name, "champion")
        assert champion.tags[REGISTRATION_TAG] == COMPLETE

    try:
        # 1. A host restart in train, after a checkpoint was written: the runner dies too. Its run stays RUNNING in
        # Prefect until the deployment is served again, which marks it CRASHED.
        _set_params(project, **longer)
        checkpoints = project / "artifacts" / "train" / "checkpoints"
        old = set(checkpoints.glob("*/step-*/SHA256SUMS"))  # the built run's, under its own config's folder
        killed = trigger_in_background()
        _kill_flow_run(served, "train", lambda: bool(set(checkpoints.glob("*/step-*/SHA256SUMS")) - old), reboot=True)
        served.wait(timeout=30)
        served = _serve(project, env, tmp_path / "serve-again.log")
        crashed = outcome(killed)
        assert crashed["state"] == "CRASHED" and "serving process was gone" in crashed["message"], crashed
        champion_is_complete()

        resumed = _trigger(project, env)
        assert resumed["state"] == "COMPLETED", resumed["message"]
        assert {"train", "evaluate", "register"} <= set(rerun(resumed["logs"]))
        exp = client.get_experiment_by_name("agentr1").experiment_id
        trains = client.search_runs([exp], f"tags.`{STAGE_TAG}` = 'train'", order_by=["attributes.start_time DESC"])
        assert int(trains[0].data.tags["resumed_from_step"]) >= 4 and trains[1].info.status == "KILLED"
        assert _trained_weights(project) == _trained_weights(reference)
        champion_is_complete()

        # 2. The flow run killed in register, once it has begun to store the model (a new logged model row); the
        # runner sees its process die and marks the run CRASHED.
        versions_before = {v.version for v in client.search_model_versions(f"name='{name}'")}
        decision = (project / "artifacts" / "register" / "decision.json").read_text()
        db = sqlite3.connect(project / "mlflow.db")
        logged = db.execute("select count(*) from logged_models").fetchone()[0]
        _set_params(project, registry__min_improvement=0.5)  # register alone re-runs
        killed = trigger_in_background()
        _kill_flow_run(served, "register",
                       lambda: db.execute("select count(*) from logged_models").fetchone()[0] > logged)  # fmt: skip
        crashed = outcome(killed)
        assert crashed["state"] == "CRASHED", crashed
        decided = project / "artifacts" / "register" / "decision.json"  # DVC removes it before the stage runs
        assert not decided.exists() or decided.read_text() == decision  # register had not finished
        champion_is_complete()

        again = _trigger(project, env)
        assert again["state"] == "COMPLETED", again["message"]
        assert rerun(again["logs"]) == ["register"]
        versions = client.search_model_versions(f"name='{name}'")
        assert all(v.tags[REGISTRATION_TAG] == COMPLETE for v in versions)  # nothing half-registered is left
        assert len({v.version for v in versions} - versions_before) == 1
        champion_is_complete()
        registers = client.search_runs([exp], f"tags.`{STAGE_TAG}` = 'register'", order_by=["attributes.start_time DESC"])
        assert registers[0].info.status == "FINISHED" and registers[1].info.status == "KILLED"
    finally:
        stop(served)
