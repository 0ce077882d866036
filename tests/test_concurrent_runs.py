"""Two pipeline runs at once, through real DVC and the real sqlite MLflow store: two queued experiments run by
`dvc exp run --run-all -j 2` in a fresh project (so they also create the store together). Each runs in its own
temporary workspace under .dvc/tmp/exps/; both must be tracked in the project's one mlflow.db, and the DVC cache must
hold what each produced."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.project import env_for, make_project, ran, run

EXPS = {"conc-a": 1, "conc-b": 2}  # experiment name -> data.synthetic.seed
STAGES = ["prepare", "validate"]  # the cheap stages; each logs params, metrics, datasets and artifacts


def _runs(project):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    assert exp is not None, f"no run reached the project's store {project / 'mlflow.db'}"
    return client.search_runs([exp.experiment_id], max_results=1000)


@pytest.mark.slow
def test_two_queued_experiments_at_once_share_one_store_and_one_cache(tmp_path):
    project = make_project(tmp_path / "p")
    assert not (project / "mlflow.db").exists()  # the two runs create the store at the same time
    for name, seed in EXPS.items():
        run(["dvc", "exp", "run", "--queue", "-n", name, "-S", f"data.synthetic.seed={seed}", *STAGES], project)

    both = subprocess.Popen(["dvc", "exp", "run", "--run-all", "-j", "2"], cwd=project, env=env_for(project),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    head = [both.stdout.readline()]  # printed once its workers started, while it holds the workspace's repo lock
    assert head[0].startswith("Following logs"), head
    # Meanwhile a `dvc repro` in the workspace fails, naming the lock, and runs nothing.
    blocked = run(["dvc", "repro", "validate"], project, check=False)
    out = "".join(head) + both.communicate(timeout=600)[0]
    assert blocked.returncode != 0 and "Unable to acquire lock" in blocked.stderr, blocked.stdout + blocked.stderr
    assert ran(blocked.stdout) == []

    # `--run-all` exits 0 even when an experiment failed: the queue says how each ended.
    status = run(["dvc", "queue", "status"], project).stdout
    ended = {line.split()[1]: line.split()[-1] for line in status.splitlines()[1:] if len(line.split()) >= 4}
    assert {name: ended.get(name) for name in EXPS} == {name: "Success" for name in EXPS}, status + out[-3000:]
    assert "database is locked" not in out and "OperationalError" not in out, out[-3000:]
    assert not list((project / ".dvc" / "tmp" / "exps").glob("tmp*/mlflow.db")), "a run went to a throwaway store"

    runs = _runs(project)
    assert [r.info.run_name for r in runs if r.info.status != "FINISHED"] == []  # none left RUNNING or FAILED
    parents = {r.data.tags["agentr1.dvc_exp"]: r for r in runs if r.data.tags["agentr1.stage"] == "pipeline"}
    assert set(parents) == set(EXPS)
    a, b = (parents[name].info for name in EXPS)
    assert a.start_time < b.end_time and b.start_time < a.end_time, "the two experiments ran at the same time"
    for name, seed in EXPS.items():
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[name].info.run_id]
        assert sorted(r.data.tags["agentr1.stage"] for r in children) == STAGES
        assert {r.data.params["data.synthetic.seed"] for r in children} == {str(seed)}
        for r in children:  # artifacts in the project's mlartifacts/, not in the experiment's temporary copy
            assert r.info.artifact_uri.startswith((project / "mlartifacts").as_uri()), r.info.artifact_uri
        assert "n_questions" in next(r for r in children if r.data.tags["agentr1.stage"] == "validate").data.metrics

    # DVC: each experiment's commit holds its params and dvc.lock; checking those out takes its outputs from the
    # shared cache, and DVC then finds them up to date. (Outputs with `cache: false`, such as validate's report and
    # summary.json, are gitignored under artifacts/: a queued experiment keeps those only in MLflow.)
    assert run(["git", "status", "--porcelain", "params.yaml"], project).stdout == ""  # the workspace is untouched
    refs = run(["git", "for-each-ref", "refs/exps", "--format=%(refname)"], project).stdout.split()
    prepared = {}
    for name, seed in EXPS.items():
        (ref,) = [r for r in refs if r.endswith(f"/{name}")]
        run(["git", "checkout", ref, "--", "params.yaml", "dvc.lock"], project)
        assert yaml.safe_load((project / "params.yaml").read_text())["data"]["synthetic"]["seed"] == seed
        run(["dvc", "checkout", "--with-deps", "validate"], project)
        assert "Data and pipelines are up to date" in run(["dvc", "status", "prepare"], project).stdout
        lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
        prepared[name] = lock["prepare"]["outs"][0]["md5"]
        assert {d["path"]: d["md5"] for d in lock["validate"]["deps"]}["artifacts/prepared"] == prepared[name]
    assert prepared["conc-a"] != prepared["conc-b"]  # two different datasets, both in the cache


def test_register_refuses_a_queued_experiments_temporary_copy(tmp_path, repo_root):
    """A queued experiment's copy is deleted when it ends: a model registered there would name a missing index.
    The real CLI refuses with one line that says how to register, before it touches the registry."""
    import shutil
    import sys

    copy = tmp_path / "p" / ".dvc" / "tmp" / "exps" / "tmpabc123"
    copy.mkdir(parents=True)
    shutil.copy(repo_root / "params.yaml", copy)
    shutil.copytree(repo_root / "profiles", copy / "profiles")
    proc = subprocess.run([sys.executable, "-m", "components.cli", "register"], cwd=copy, capture_output=True,
                          text=True, env=env_for(copy) | {"PYTHONPATH": str(repo_root)})  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "temporary copy" in proc.stderr and "dvc exp apply" in proc.stderr, proc.stderr
    assert not (copy / "artifacts").exists()
