"""dvc.yaml is the one owner of "what must re-run": its deps and params must cover what each stage really reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from components.stages import STAGES
from tests.project import FOLLOWERS, ROOT, ran, run, touch

DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
PROFILES = {f"profiles/{p.name}": yaml.safe_load(p.read_text()) for p in sorted((ROOT / "profiles").glob("*.yaml"))}


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(path: Path, module: str) -> set[str]:
    """components.* modules named by any import in the file (function-level ones included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return {m for m in found if m.split(".")[0] == "components"}


def import_closure(module: str) -> set[str]:
    """Files (relative to the repo) of every components/ module `module` imports, transitively, packages included."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            name = ".".join(parts[:i])
            path = _module_file(name)
            if path is not None and name not in seen:
                seen.add(name)
                todo += _imports(path, name)
    return {str(_module_file(m).relative_to(ROOT)) for m in seen}


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


def test_every_stage_depends_on_every_module_it_imports():
    missing = {}
    for name, stage in STAGES.items():
        deps = [d for d in DVC[name]["deps"] if d.startswith("components")]
        for dep in deps:
            assert (ROOT / dep).exists(), f"dvc.yaml {name}: dep {dep} does not exist"
        uncovered = sorted(f for f in import_closure(stage.module) if not any(f == d or f.startswith(d + "/") for d in deps))
        if uncovered:
            missing[name] = uncovered
    assert not missing, f"dvc.yaml deps miss modules the stage imports: {missing}"


def test_no_dep_is_an_empty_file():
    """DVC warns "'<dep>' is empty" for each empty file dep on every repro: a package's __init__.py holds a docstring."""
    empty = sorted({d for s in DVC.values() for d in s.get("deps", []) if (ROOT / d).is_file() and (ROOT / d).stat().st_size == 0})
    assert not empty, f"dvc.yaml deps on empty files (give each a docstring): {empty}"
    assert not [p for p in (ROOT / "components").rglob("__init__.py") if p.stat().st_size == 0]


def test_closure_sees_the_gaps_the_old_dvc_yaml_had():
    """The check is not vacuous: train imports training.py, model/, retrieval/ and config.py; evaluate model/."""
    train = import_closure(STAGES["train"].module)
    assert {"components/training.py", "components/config.py", "components/model/loading.py",
            "components/retrieval/factory.py", "components/io.py"} <= train  # fmt: skip
    assert {"components/model/loading.py", "components/retrieval/factory.py"} <= import_closure(STAGES["evaluate"].module)


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
    # train once missed training.py; evaluate and register share report.py; register alone imports register.py.
    for module, stage in [("components/training.py", "train"), ("components/evaluation/report.py", "evaluate"),
                          ("components/registry/register.py", "register")]:  # fmt: skip
        touch(project, module)
        again = ran(run(["dvc", "repro"], project).stdout)
        assert again and again[0] == stage and set(again[1:]) <= FOLLOWERS[stage], (module, again)
    assert ran(run(["dvc", "repro"], project).stdout) == []
