"""dvc.yaml is the one owner of "what must re-run": its deps and params must cover what each stage really reads."""

from __future__ import annotations

import pytest
import yaml

from components import dvc_deps
from components.import_graph import closure
from components.stages import STAGES
from tests.project import FOLLOWERS, ROOT, ran, run, touch

DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
PROFILES = {f"profiles/{p.name}": yaml.safe_load(p.read_text()) for p in sorted((ROOT / "profiles").glob("*.yaml"))}


def _param_keys(stage: dict, file: str | None = None) -> list[str]:
    keys: list[str] = []
    for item in stage.get("params", []):
        if isinstance(item, str) and file is None:
            keys.append(item)
        elif isinstance(item, dict) and file in item:
            keys += item[file]
    return keys


def _has(tree: dict, dotted: str) -> bool:
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_dvc_yaml_code_deps_are_the_generated_ones():
    text = (ROOT / "dvc.yaml").read_text()
    assert dvc_deps.generate(text) == text, "dvc.yaml code deps are stale: run `make dvc-deps`"


def _files(dep: str) -> set[str]:
    path = ROOT / dep
    return {dep} if path.is_file() else {p.relative_to(ROOT).as_posix() for p in path.rglob("*.py")}


def test_each_stage_depends_on_what_it_imports_and_nothing_else():
    for name, stage in STAGES.items():
        listed = set().union(*(_files(d) for d in DVC[name]["deps"] if d.startswith("components")))
        imported = closure(stage.module)
        missed, extra = sorted(imported - listed), sorted(listed - imported)
        assert not missed and not extra, f"dvc.yaml {name}: deps miss {missed} and add {extra}"
    # A module only evaluate imports does not re-run train; the one register imports alone re-runs only register.
    assert "components/evaluation/eval_json.py" not in closure(STAGES["train"].module)
    assert "components/registry/register.py" not in closure(STAGES["evaluate"].module)


def test_a_new_module_is_found_however_it_is_loaded(tmp_path):
    files = {
        "pkg/__init__.py": '"""A package."""',
        "pkg/a.py": "def f():\n    from . import b",  # function-level, relative
        "pkg/b.py": 'from pathlib import Path\nW = Path(__file__).with_name("worker.py")\nM = "pkg.sub.d.Manager"',
        "pkg/worker.py": "import os",
        "pkg/sub/__init__.py": '"""Sub."""',
        "pkg/sub/d.py": "from ..c import x",
        "pkg/c.py": "x = 1",
        "pkg/unused.py": "import pkg.a",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert closure("pkg.a", tmp_path) == set(files) - {"pkg/unused.py"}
    want = ["pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/c.py", "pkg/sub", "pkg/worker.py"]  # sub/: every file
    assert dvc_deps.code_deps("pkg.a", tmp_path) == want
    assert dvc_deps.code_deps("pkg.unused", tmp_path) == ["pkg"]


def test_a_stage_missing_from_dvc_yaml_is_one_line():
    text = (ROOT / "dvc.yaml").read_text().replace("\n  register:\n", "\n  registered:\n")
    one_line = "^dvc.yaml has no stage 'register', which components/stages.py names$"
    with pytest.raises(dvc_deps.MissingStage, match=one_line):
        dvc_deps.generate(text)


def test_no_dep_is_an_empty_file():
    """DVC warns "'<dep>' is empty" for each empty file dep on every repro: a package's __init__.py holds a docstring."""
    empty = sorted({d for s in DVC.values() for d in s.get("deps", []) if (ROOT / d).is_file() and (ROOT / d).stat().st_size == 0})
    assert not empty, f"dvc.yaml deps on empty files (give each a docstring): {empty}"
    assert not [p for p in (ROOT / "components").rglob("__init__.py") if p.stat().st_size == 0]


def test_closure_sees_the_gaps_the_old_dvc_yaml_had():
    """The check is not vacuous: train imports train/stage.py, model/, retrieval/ and config.py; evaluate model/."""
    train = closure(STAGES["train"].module)
    assert {"components/train/stage.py", "components/config.py", "components/model/loading.py",
            "components/retrieval/factory.py", "components/io.py"} <= train  # fmt: skip
    assert {"components/model/loading.py", "components/retrieval/factory.py"} <= closure(STAGES["evaluate"].module)


def test_params_are_keys_and_every_profile_overlay_is_tracked_per_key():
    assert {"profiles/real.yaml", "profiles/qwen.yaml"} <= set(PROFILES)
    for name in STAGES:
        keys = _param_keys(DVC[name])
        for key in keys:
            assert _has(PARAMS, key), f"dvc.yaml {name}: param {key} is not in params.yaml"
        for file, profile in PROFILES.items():
            profiled = _param_keys(DVC[name], file)
            # A key the stage reads that the profile overrides must be tracked in the profile too (same key).
            expected = [k for k in keys if k != "profile" and _has(profile, k)]
            assert sorted(profiled) == sorted(expected), f"dvc.yaml {name}: {file} params {profiled} != {expected}"
            if profiled:
                assert "profile" in keys, f"dvc.yaml {name}: reads {file} but not the `profile` switch"
    # Whole sections only where the stage reads the section whole; e.g. evaluate names model keys.
    assert "model" not in _param_keys(DVC["evaluate"]) and "model.autocast" in _param_keys(DVC["evaluate"])
    assert "retrieval" not in {k for n in STAGES for k in _param_keys(DVC[n])}


@pytest.mark.slow
def test_dvc_repro_reruns_the_changed_stage_and_only_what_follows(built, tmp_path):
    project = built.copy(tmp_path / "p")  # built by the Prefect flow: DVC finds nothing to re-run
    assert ran(run(["dvc", "repro"], project).stdout) == []
    # train once missed its stage module; evaluate and register share eval_json.py; register alone imports register.py.
    for module, stage in [("components/train/stage.py", "train"), ("components/evaluation/eval_json.py", "evaluate"),
                          ("components/registry/register.py", "register")]:  # fmt: skip
        touch(project, module)
        again = ran(run(["dvc", "repro"], project).stdout)
        assert again and again[0] == stage and set(again[1:]) <= FOLLOWERS[stage], (module, again)
    assert ran(run(["dvc", "repro"], project).stdout) == []
