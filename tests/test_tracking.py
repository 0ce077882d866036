"""Real MLflow sqlite store and registry in a temp dir."""

import json
import os
import warnings

import mlflow
import pandas as pd
import pytest

from components.config import Config, parse_config
from components.registry import register
from components.tracking.owners import ENDED_TAG
from components.tracking.runs import STAGE_TAG, commit, pipeline_run, stage_run
from tests.tiny_hf import train_and_eval


def _cfg(tmp_path) -> Config:
    return parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}})


def test_stage_runs_nest_under_pipeline_and_log_params_metrics_inputs(mlflow_uri, tmp_path):
    cfg = _cfg(tmp_path)
    data = tmp_path / "q.parquet"
    pd.DataFrame({"id": ["a", "b"], "question": ["x?", "y?"]}).to_parquet(data)
    with pipeline_run(cfg) as parent:
        with stage_run(cfg, "prepare", parent_run_id=parent) as tracker:
            tracker.log_metrics({"recall@5/hotpotqa": 0.5})
            tracker.log_metrics({"reward": 1.0}, step=3)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # MLflow's "source can be interpreted in multiple ways" stays away
                tracker.log_input(data, context="output")
    client = mlflow.MlflowClient()
    child = client.get_run(tracker.run_id)
    assert child.data.tags["mlflow.parentRunId"] == parent
    assert client.get_run(parent).info.run_name == f"flow @ {commit()}"  # named after the commit
    assert child.data.tags[STAGE_TAG] == "prepare"
    assert child.data.params["retrieval.top_k"] == str(cfg.retrieval.top_k)
    assert child.data.metrics["recall_5/hotpotqa"] == 0.5
    assert [m.step for m in client.get_metric_history(tracker.run_id, "reward")] == [3]
    (ds_input,) = child.inputs.dataset_inputs
    assert ds_input.dataset.name == "q" and len(ds_input.dataset.digest) == 16
    assert ds_input.dataset.source_type == "local" and json.loads(ds_input.dataset.source) == {"uri": str(data.resolve())}


def test_failed_stage_marks_run_failed(mlflow_uri, tmp_path):
    cfg = _cfg(tmp_path)
    with pytest.raises(RuntimeError):
        with stage_run(cfg, "validate") as tracker:
            raise RuntimeError("boom")
    assert mlflow.MlflowClient().get_run(tracker.run_id).info.status == "FAILED"


def test_a_sqlite_store_keeps_its_locks_beside_its_database(mlflow_uri, tmp_path, monkeypatch):
    """The setup lock of a stage run lives beside mlflow.db, so it goes with the store, not in the temp dir."""
    temp = tmp_path / "system-temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    with stage_run(_cfg(tmp_path), "prepare") as tracker:
        tracker.log_metrics({"n": 1.0})
    assert (tmp_path / "mlflow.db.setup.lock").exists() and not list(temp.iterdir())


def test_champion_moves_only_on_a_win(mlflow_uri, tmp_path, capfd):
    cfg = _cfg(tmp_path)
    client = mlflow.MlflowClient()
    name = cfg.registry.model_name
    decisions = []
    for em in (0.5, 0.4, 0.9):
        train_and_eval(cfg, tmp_path, em)
        capfd.readouterr()
        with stage_run(cfg, "register") as tracker:
            out = register.run(cfg, tracker)
        said = capfd.readouterr().err
        assert ("already exists" in said) == (em != 0.5), said  # the first registration creates the model quietly
        decisions.append(json.loads((cfg.artifacts / "register" / "decision.json").read_text()))
        assert out["em/synthetic/dev"] == em
    assert [d["promoted"] for d in decisions] == [True, False, True]
    assert "does not beat champion 0.5000 (v1)" in decisions[1]["reason"]
    champion = client.get_model_version_by_alias(name, "champion")
    assert str(champion.version) == "3" and champion.tags["em/synthetic/dev"] == "0.9"
    v2 = client.get_model_version(name, 2)
    assert "does not beat" in v2.tags["evidence.decision"]
    # compact evidence: the decision metric, what it was compared with, lineage, the evaluation run; no other metric
    assert champion.tags["gate.vs_champion"] == "0.9 vs 0.5 (v1): beats"
    assert client.get_model_version(name, 1).tags["gate.vs_champion"] == "0.5 vs none: no champion"
    assert "em/hotpotqa/dev" not in champion.tags and not any(k.startswith("baseline/") for k in champion.tags)
    eval_run_id = champion.tags["evidence.eval_run"].rsplit("/", 1)[-1]
    assert client.get_run(eval_run_id).data.metrics["em/synthetic/dev"] == 0.9
    assert champion.tags["evidence.eval_run"] in champion.description
    assert "Agent-R1" in client.get_registered_model(name).description
    evidence = {k for k in champion.tags if not k.startswith("champion.")}  # champion.*: the alias moves (promote)
    assert evidence == {"em/synthetic/dev", "gate.vs_champion", "gate.vs_base_agent", "gate.vs_naive_rag",
                        "evidence.decision", "evidence.eval_run", "agentr1.registration"}
    assert champion.tags["agentr1.registration"] == "complete"
    # every metric stays on the register run and on the logged model
    reg_run = client.get_run(champion.run_id)
    assert reg_run.data.metrics["em/hotpotqa/dev"] == 0.45 and reg_run.data.metrics["baseline/direct/em/synthetic/dev"] == 0.0
    logged = mlflow.get_logged_model(champion.source.removeprefix("models:/"))
    assert {m.key: m.value for m in logged.metrics}["em/hotpotqa/dev"] == 0.45
    # the version is the servable agent: a pyfunc logged from code (nothing pickled) with its weights, its config and
    # an input example; the signature declares the outputs only (an input schema makes the server coerce null to "None")
    meta = mlflow.models.get_model_info(f"models:/{name}@champion")
    pyfunc = meta.flavors["python_function"]
    assert pyfunc["model_code_path"].endswith("model_code.py") and "python_model" not in pyfunc
    assert meta.signature.inputs is None and "answer" in meta.signature.outputs.input_names()
    assert meta.saved_input_example_info["type"] == "json_object"
    assert champion.description.startswith("tiny Qwen2 model (")  # the version says what the model is


def test_register_names_missing_metric(mlflow_uri, tmp_path):
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}, "registry": {"metric": "em/nope"}})
    train_and_eval(cfg, tmp_path, 0.5)
    with pytest.raises(KeyError, match="em/nope"):
        with stage_run(cfg, "register") as tracker:
            register.run(cfg, tracker)


def _stored_anywhere(db, secret: str) -> bool:
    import sqlite3

    with sqlite3.connect(db) as con:
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            for row in con.execute(f'SELECT * FROM "{table}"'):
                if any(secret in str(v) for v in row):
                    return True
    return False


def test_no_secret_reaches_the_params_table(mlflow_uri, tmp_path, repo_root):
    """Credentials in a params URL stop the stage before any run; secret-shaped values that reach a run anyway
    (a config built without validation) are redacted in the real store's params table."""
    import subprocess
    import sys

    url = "http://elastic:hunter2@127.0.0.1:9201"
    env = {**__import__("os").environ, "MLFLOW_TRACKING_URI": mlflow_uri}
    proc = subprocess.run([sys.executable, "-m", "components.cli", "index", "-p", str(repo_root / "params.yaml"),
                           "-S", "retrieval.backend=elasticsearch", "-S", f"retrieval.elasticsearch.url={url}"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and "ES_USERNAME/ES_PASSWORD" in " ".join(proc.stderr.split())
    assert "hunter2" not in proc.stderr + proc.stdout

    cfg = _cfg(tmp_path)
    es = cfg.retrieval.elasticsearch.model_copy(update={"url": url})  # model_copy does not validate
    cfg = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(update={"elasticsearch": es})})
    with stage_run(cfg, "index") as tracker:
        run_id = tracker.run_id
    params = mlflow.get_run(run_id).data.params
    assert params["retrieval.elasticsearch.url"] == "http://***@127.0.0.1:9201"
    db = tmp_path / "mlflow.db"
    assert db.is_file() and not _stored_anywhere(db, "hunter2")


def test_cli_stage_nests_under_AGENTR1_PARENT_RUN_ID(mlflow_uri, tmp_path, monkeypatch):
    """The contract with whoever drives the CLI as one pipeline run: every stage run nests under the given id."""
    from typer.testing import CliRunner

    from components.cli import app
    from components.tracking.runs import PARENT_ENV

    cfg = _cfg(tmp_path)
    (tmp_path / "params.yaml").write_text(json.dumps({"project": {"artifacts_dir": str(cfg.artifacts)}}))
    train_and_eval(cfg, tmp_path, 0.5)
    with pipeline_run(cfg, "driver") as parent:
        pass
    monkeypatch.setenv(PARENT_ENV, parent)
    out = CliRunner().invoke(app, ["register"])
    assert out.exit_code == 0, out.output
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (reg,) = client.search_runs([exp.experiment_id], filter_string=f"tags.`{STAGE_TAG}` = 'register'")
    assert reg.data.tags["mlflow.parentRunId"] == parent

    monkeypatch.setenv(PARENT_ENV, "0123456789abcdef0123456789abcdef")
    out = CliRunner().invoke(app, ["register"])
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert f"{PARENT_ENV}=0123456789abcdef0123456789abcdef: no such MLflow run" in " ".join(out.output.split())
    assert len(client.search_runs([exp.experiment_id], filter_string=f"tags.`{STAGE_TAG}` = 'register'")) == 1


def test_traces_are_written_synchronously_unless_the_user_chose_async(tmp_path, monkeypatch):
    """Each flush of MLflow's async trace queue idles about a second; a batch stage writes each trace as it logs it."""
    from components.env import apply_defaults

    monkeypatch.delenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", raising=False)
    apply_defaults(tmp_path)
    assert os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] == "false"
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "true")
    apply_defaults(tmp_path)
    assert os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] == "true"


KILLED_REGISTER = """
import os, shutil, signal, sys
from components.config import parse_config
from components.registry import register
from components.stages import run_stage

def die():
    print("KILLED", sys.argv[2], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[2] == "upload":  # the third file copied into the artifact store: the logged model is half written
    copyfile, copied = shutil.copyfile, []
    def copyfile_(src, dst, *args, **kwargs):
        out = copyfile(src, dst, *args, **kwargs)
        copied.extend([dst] if "mlartifacts" in str(dst) else [])
        if len(copied) == 3:
            die()
        return out
    shutil.copyfile = copyfile_
else:  # "version": the version exists, its description and the complete tag are not yet written
    register.about_model = lambda *args, **kwargs: die()
run_stage("register", parse_config({"project": {"artifacts_dir": sys.argv[1]}}))
"""


def _killed_register(cfg, tmp_path, where: str) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}  # MLFLOW_TRACKING_URI: the test's store (mlflow_uri)
    proc = subprocess.run([sys.executable, "-c", KILLED_REGISTER, str(cfg.artifacts), where], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == -9 and f"KILLED {where}" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.e2e  # a process killed mid-run
def test_killed_registrations_are_cleaned_up_and_never_champion(mlflow_uri, tmp_path):
    """register SIGKILLed while it uploads the model, and again right after the version is made: the champion stays,
    the half-registered version cannot be promoted, and the next register run removes both leftovers."""
    from mlflow.entities import LoggedModelStatus

    from components.registry.promote import PromotionError, promote
    from components.registry.registration import REGISTRATION_TAG, local_dir

    cfg = _cfg(tmp_path)
    client = mlflow.MlflowClient()
    name = cfg.registry.model_name
    train_and_eval(cfg, tmp_path, 0.5)
    with stage_run(cfg, "register") as tracker:
        register.run(cfg, tracker)
    train_and_eval(cfg, tmp_path, 0.7)  # would win: a finished registration would move the alias

    _killed_register(cfg, tmp_path, "upload")
    exp = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    (partial,) = [m for m in client.search_logged_models([exp]) if m.status == LoggedModelStatus.PENDING]
    partial_dir = local_dir(partial.artifact_location)
    assert 0 < len([p for p in partial_dir.rglob("*") if p.is_file()]) < 10  # some of its files, not all
    _killed_register(cfg, tmp_path, "version")  # that run first removed the half-uploaded model
    (killed,) = client.search_runs([exp], f"tags.`{STAGE_TAG}` = 'register' and tags.recovered != ''")
    assert f"logged model {partial.model_id} (PENDING): unfinished" in killed.data.tags["recovered"]
    assert not partial_dir.parent.exists()
    versions = {str(v.version): v for v in client.search_model_versions(f"name='{name}'")}
    assert sorted(versions) == ["1", "2"] and versions["2"].tags[REGISTRATION_TAG] == "pending"
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    with pytest.raises(PromotionError, match="v2: its registration has not finished"):
        promote(cfg, 2, "by hand")

    train_and_eval(cfg, tmp_path, 0.9)
    with stage_run(cfg, "register") as tracker:
        out = register.run(cfg, tracker)
    recovered = client.get_run(tracker.run_id).data.tags["recovered"]
    assert f"{name} v2: its registration did not finish; deleted" in recovered
    versions = {str(v.version): v for v in client.search_model_versions(f"name='{name}'")}
    new = str(int(out["registered_version"]))
    assert sorted(versions) == ["1", new] and versions[new].tags[REGISTRATION_TAG] == "complete"
    assert str(client.get_model_version_by_alias(name, "champion").version) == new
    assert all(m.status == LoggedModelStatus.READY for m in client.search_logged_models([exp]))

    with stage_run(cfg, "register") as tracker:  # nothing left to recover
        register.run(cfg, tracker)
    assert "recovered" not in client.get_run(tracker.run_id).data.tags
    # the two killed processes could not end their runs; the next stage to start did, as KILLED
    runs = client.search_runs([exp], f"tags.`{STAGE_TAG}` = 'register'")
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3 + ["KILLED"] * 2
    assert all(r.data.tags.get(ENDED_TAG) for r in runs if r.info.status == "KILLED")


def test_a_model_stored_incomplete_is_not_registered(mlflow_uri, tmp_path, monkeypatch):
    """The artifact store silently keeps half of the weights file (a fault injected: MLflow reports the model READY):
    no version is made, the champion stays, and the incomplete logged model and its files are removed."""
    import shutil

    from mlflow.entities import LoggedModelStatus

    from components.registry.registration import RegistrationError

    cfg = _cfg(tmp_path)
    client = mlflow.MlflowClient()
    name = cfg.registry.model_name
    train_and_eval(cfg, tmp_path, 0.5)
    with stage_run(cfg, "register") as tracker:
        register.run(cfg, tracker)
    train_and_eval(cfg, tmp_path, 0.9)
    copyfile = shutil.copyfile

    def truncating(src, dst, *args, **kwargs):
        out = copyfile(src, dst, *args, **kwargs)
        if "mlartifacts" in str(dst) and str(dst).endswith(".safetensors"):
            os.truncate(dst, os.path.getsize(dst) // 2)
        return out

    monkeypatch.setattr(shutil, "copyfile", truncating)
    with pytest.raises(RegistrationError, match=r"is incomplete, not registered: artifacts/model-0\.9/model\.safetensors \("):
        with stage_run(cfg, "register") as tracker:
            register.run(cfg, tracker)
    monkeypatch.undo()
    assert [str(v.version) for v in client.search_model_versions(f"name='{name}'")] == ["1"]
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    exp = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    models = client.search_logged_models([exp])
    assert all(m.status == LoggedModelStatus.READY for m in models) and len(models) == 3  # 2 trained, 1 registered
    assert sorted(p.name for p in (tmp_path / "mlartifacts" / "models").iterdir()) == sorted(m.model_id for m in models)


def test_a_run_is_judged_dead_only_on_its_own_host_and_by_pid_and_start():
    import socket
    import subprocess
    import sys

    import psutil

    from components.tracking.owners import gone, owner

    assert not gone(owner())  # this process
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    tag = f"{socket.gethostname()}:{proc.pid}:{psutil.Process(proc.pid).create_time():.3f}"
    assert not gone(tag)
    proc.kill()
    proc.wait()
    assert gone(tag)
    assert gone(f"{socket.gethostname()}:{os.getpid()}:1.000")  # a reused pid: another start time
    assert not gone(f"another-host:{proc.pid}:1.000") and not gone("not a tag")
