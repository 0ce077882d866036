"""A disk that fills while the pipeline writes a checkpoint, an index version or the registered model: one line
naming the path and what the write needs, the previous checkpoint / index version / champion untouched, no partial
file left. The disk is a real small tmpfs that the test mounts (root or CAP_SYS_ADMIN; skipped, saying so, without)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from components.io import DiskFull, size_of

BALLAST = "ballast"


@pytest.fixture
def small_disk(tmp_path):
    """mount(dir, size): a fresh tmpfs of `size` (e.g. "4m") at `dir`; unmounted after the test."""
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                              capture_output=True, text=True)  # fmt: skip
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs at {where} (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Take all of the disk's free space but `leave` bytes."""
    free = shutil.disk_usage(disk).free
    assert free > leave, f"{disk}: only {free} bytes free, cannot leave {leave}"
    with open(disk / BALLAST, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, free - leave)
    assert shutil.disk_usage(disk).free <= leave + 4096


def digests(root: Path) -> dict[str, str]:
    """Every file under root (the ballast aside): relative path -> SHA-256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != BALLAST}  # fmt: skip


def need_mb(message: str) -> float:
    """The need the one-line message states, in MB."""
    found = re.search(r"it needs (?:about|more than) ([0-9.]+) ([KMG]B)", message)
    assert found, message
    return float(found.group(1)) * {"KB": 2**-10, "MB": 1, "GB": 2**10}[found.group(2)]


def test_checkpoint_on_a_full_disk(small_disk, tmp_path):
    import torch

    from components.train.local import checkpoint as ckpt

    disk = small_disk(tmp_path / "disk", "4m")
    root = disk / "checkpoints"
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step() -> None:
        opt.zero_grad()
        model(torch.randn(4, 256)).square().mean().backward()
        opt.step()

    step()
    first = ckpt.save(root, 1, {"policy": model}, {"policy": opt}, {"curve": [1.0]})
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    before = digests(root)
    fill(disk, leave=size_of(first) // 2)  # room for half a checkpoint
    step()
    with pytest.raises(DiskFull) as caught:
        ckpt.save(root, 2, {"policy": model}, {"policy": opt}, {"curve": [1.0, 0.5]})

    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{root / 'step-00000002'}: no space left on device")
    assert abs(need_mb(message) - size_of(first / ckpt.WEIGHTS) / 2**20) < 0.1  # what the weights file takes
    assert digests(root) == before  # the previous checkpoint is as it was, and nothing else is there
    assert sorted(p.name for p in root.iterdir()) == [".lock", first.name]
    fresh = torch.nn.Linear(256, 256)
    state = ckpt.load_latest(root, {"policy": fresh}, {"policy": torch.optim.Adam(fresh.parameters(), lr=1e-2)})
    assert state["step"] == 1 and all(torch.equal(fresh.state_dict()[k], v) for k, v in saved.items())


def _corpus(n: int, seed: int):
    import random

    from components.data.schema import Passage

    rng = random.Random(seed)
    words = [uuid.UUID(int=rng.getrandbits(128)).hex[:8] for _ in range(4000)]
    return [Passage(f"p{i}", f"title {i}", " ".join(rng.choices(words, k=60))) for i in range(n)]


def test_index_version_on_a_full_disk(small_disk, tmp_path):
    from components.config import EmbeddedConfig
    from components.retrieval.base import corpus_hash
    from components.retrieval.embedded import EmbeddedBackend

    disk = small_disk(tmp_path / "disk", "16m")
    backend = EmbeddedBackend(disk / "index", EmbeddedConfig(), seed=0)
    corpus = _corpus(2000, seed=1)
    live = backend.build("wiki", corpus)
    alias = disk / "index" / "wiki"
    before = digests(alias)
    [hits_before] = backend.search("wiki", [corpus[7].text], k=3)
    fill(disk, leave=size_of(alias / live.version) // 2)

    bigger = corpus + [replace(p, id=f"new{i}") for i, p in enumerate(_corpus(50, seed=2))]  # a new version
    with pytest.raises(DiskFull) as caught:
        backend.build("wiki", bigger)

    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{alias / corpus_hash(bigger)}: no space left on device")
    assert abs(need_mb(message) - size_of(alias / live.version) / 2**20) < 0.1  # about the size of the live version
    assert digests(alias) == before and backend.live_version("wiki") == live.version
    assert sorted(p.name for p in alias.iterdir()) == [".lock", "LIVE", live.version]
    reopened = EmbeddedBackend(disk / "index", EmbeddedConfig(), seed=0)
    [hits] = reopened.search("wiki", [corpus[7].text], k=3)
    assert hits[0].id == "p7" and [h.id for h in hits] == [h.id for h in hits_before]


def _champion_then_a_better_model(root: Path):
    """A project in `root`: version 1 registered as champion (EM 0.5), then a better model trained and evaluated
    (EM 0.9), which would become champion. Returns (cfg, the MLflow client, the champion version)."""
    import mlflow

    from components.config import parse_config
    from components.registry import register
    from components.tracking.runs import stage_run
    from tests.tiny_hf import train_and_eval

    (root / "params.yaml").write_text(f"project:\n  artifacts_dir: {root / 'artifacts'}\n")
    cfg = parse_config({"project": {"artifacts_dir": str(root / "artifacts")}})
    client = mlflow.MlflowClient()
    train_and_eval(cfg, root, 0.5)
    with stage_run(cfg, "register") as tracker:
        register.run(cfg, tracker)
    champion = client.get_model_version_by_alias(cfg.registry.model_name, "champion")
    train_and_eval(cfg, root, 0.9)
    return cfg, client, champion


def test_registered_model_on_a_full_disk(small_disk, mlflow_uri, tmp_path):
    """The MLflow artifact store fills while `agentr1 register` logs the new version: one line, no traceback; the
    champion, its files and the registry are as they were; the partial logged model is gone."""
    import mlflow
    from typer.testing import CliRunner

    from components.cli import app
    from components.registry.registration import local_dir

    store = small_disk(tmp_path / "mlartifacts", "4m")  # the sqlite store's artifact root (tracking/runs.py)
    cfg, client, champion = _champion_then_a_better_model(tmp_path)
    name = cfg.registry.model_name
    before = digests(store)
    logged = mlflow.get_logged_model(champion.source.removeprefix("models:/"))
    fill(store, leave=size_of(local_dir(logged.artifact_location)) // 2)  # room for half the model: a partial write

    out = CliRunner().invoke(app, ["register", "-p", str(tmp_path / "params.yaml")])

    assert out.exit_code == 1, out.output
    line = " ".join(out.output.split())  # rich wraps long lines at the terminal width
    assert "Traceback" not in out.output and re.search(r"agentr1 register failed: \S+: no space left on device", line)
    assert str(store) in line and abs(need_mb(line) - size_of(tmp_path / "model-0.9") / 2**20) < 0.01
    assert [str(v.version) for v in client.search_model_versions(f"name='{name}'")] == [str(champion.version)]
    assert str(client.get_model_version_by_alias(name, "champion").version) == str(champion.version)
    assert digests(store) == before  # the champion's files as they were, nothing of the new model left
    assert f"models:/{mlflow.models.get_model_info(f'models:/{name}@champion').model_id}" == champion.source


def test_registered_model_on_a_full_temp_dir(small_disk, mlflow_uri, tmp_path, monkeypatch):
    """MLflow saves the model in the temp dir before it uploads it: a full temp dir is named as the path."""
    import tempfile

    import mlflow

    from components.config import parse_config
    from components.registry import register
    from components.tracking.runs import stage_run
    from tests.tiny_hf import train_and_eval

    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "artifacts")}})
    train_and_eval(cfg, tmp_path, 0.5)
    temp = small_disk(tmp_path / "tmp", "1m")
    fill(temp, leave=size_of(tmp_path / "model-0.5") // 2)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(DiskFull) as caught:
        with stage_run(cfg, "register") as tracker:
            register.run(cfg, tracker)
    monkeypatch.undo()
    assert str(caught.value).startswith(f"{temp}: no space left on device: it needs about ")
    assert mlflow.MlflowClient().search_model_versions(f"name='{cfg.registry.model_name}'") == []
    assert [p.name for p in temp.iterdir() if not p.name.startswith("agentr1-")] == [BALLAST]  # + the store locks



@pytest.mark.parametrize("fills", ["model copy", "database"])
def test_registered_model_on_one_full_disk_with_the_store_and_the_temp_dir(small_disk, tmp_path, monkeypatch, fills):
    """As in a plain checkout, one disk holds the sqlite store, its artifacts and the temp dir MLflow saves the model
    in first. It fills while `agentr1 register` copies the new version into the store (the need counts both
    copies), or as the store's database writes the run: one line, no traceback (MLflow's logged ones included),
    the champion and the registry as they were."""
    import mlflow

    from tests.project import BIN

    disk = small_disk(tmp_path / "disk", "32m")
    (disk / "tmp").mkdir()
    uri = f"sqlite:///{disk / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(disk)  # the store's artifact root: <project>/mlartifacts (tracking/runs.py)
    mlflow.set_tracking_uri(uri)
    cfg, client, champion = _champion_then_a_better_model(disk)
    name = cfg.registry.model_name
    (disk / "model-0.9" / "extra.bin").write_bytes(os.urandom(4 << 20))  # a model big against the database's pages
    size = size_of(disk / "model-0.9")
    fill(disk, leave=size * 3 // 2 if fills == "model copy" else 16 << 10)  # the temp copy fits, the store's not

    out = subprocess.run([str(BIN / "agentr1"), "register", "-p", str(disk / "params.yaml")], cwd=disk,
                         env={**os.environ, "TMPDIR": str(disk / "tmp")}, capture_output=True, text=True)  # fmt: skip

    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-3000:]
    line = " ".join(out.stderr.split())
    assert re.search(rf"agentr1 register failed: {re.escape(str(disk))}\S*: no space left on device", line), line
    if fills == "model copy":
        assert abs(need_mb(line) - 2 * size / 2**20) < 0.06, line  # MLflow's temp copy and the store's (0.1 MB shown)
    assert [str(v.version) for v in client.search_model_versions(f"name='{name}'")] == [str(champion.version)]
    assert str(client.get_model_version_by_alias(name, "champion").version) == str(champion.version)
