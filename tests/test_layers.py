"""The layer rules: a module imports only its own package and packages of strictly lower layers (LAYERS,
bottom to top: a package or top-level module of components/, or a nested package of NESTED; flows/ above
everything). Inside a package, imports point one way too: no module imports itself back through others (no cycle).
Lazy imports count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[set[str]] = [
    {"secrets", "io", "env", "import_graph"},  # no project imports
    {"config"},  # the one typed config; imports no backend
    {"artifacts"},  # every artifact path
    {"data", "tracking"},  # records and their Parquet files; MLflow runs, logged models, traces
    {"retrieval"},  # search backends over passages
    {"agent"},  # tools, ToolEnv, the tool-call syntax, rewards
    {"rollout"},  # chat format, episode set-up, multi-turn generation, trajectories
    {"model"},  # loading, attention, the frozen top layers, the tiny model
    {"base_model", "evaluation"},  # the base_model stage (sources, priming, warm-up); agent and baselines scored
    {"train.local", "validation", "serving"},  # the local train backend; GX suites; ask, pyfunc agent
    {"registry"},  # the champion: the register stage, the gate, registration, promote and rollback
    {"train.verl"},  # the verl train backend on Ray + vLLM (uses the local backend's grpo_process, question split)
    {"train", "stages"},  # the train stage over its two backends (components/train/stage.py); the stage table
    {"dvc_deps"},  # dvc.yaml's code deps, from the stage table and the import graph
    {"cli"},  # the agentr1 command
    {"flows"},  # the Prefect orchestrator
]
MODULE_LAYER: dict[str, str] = {}  # a module placed above the rest of its package (none now)
# Packages nested in a components package that are layer units of their own, named "<package>.<name>": the train
# stage's backends sit below it (the stage imports them; neither imports the stage, the local one not the verl one).
NESTED: tuple[str, ...] = ("components.train.local", "components.train.verl")
_NESTED_PARENTS = {n.rpartition(".")[0] for n in NESTED}

RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def unit(module: str) -> str | None:
    """The layer unit of a dotted module name: a nested package of NESTED, a components package or top-level
    module, or flows."""
    if module in MODULE_LAYER:
        return MODULE_LAYER[module]
    parts = module.split(".")
    if parts[0] == "flows":
        return "flows"
    for nested in NESTED:
        if module == nested or module.startswith(nested + "."):
            return nested.removeprefix("components.")
    if parts[0] == "components" and len(parts) > 1:
        return parts[1]
    return None


def _modules(root: Path) -> list[tuple[Path, str]]:
    out = []
    for path in sorted((root / "components").rglob("*.py")) + sorted((root / "flows").rglob("*.py")):
        dotted = ".".join(path.relative_to(root).with_suffix("").parts)
        out.append((path, dotted.removesuffix(".__init__")))
    return out


def _imports(path: Path, dotted: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import, lazy ones inside functions included."""
    found = []
    package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from components import artifacts` (or `from components.train import local`) imports the submodule:
            # judge each name as a module
            judge_names = base in ("components", "flows") or base in _NESTED_PARENTS
            found += [(node.lineno, f"{base}.{a.name}" if judge_names else base) for a in node.names]
    return found


def violations(root: Path = ROOT) -> list[str]:
    bad = []
    for path, dotted in _modules(root):
        src = unit(dotted)
        if src is None:
            continue
        for line, module in _imports(path, dotted):
            dst = unit(module)
            if dst is None or dst == src:
                continue
            where = f"{path.relative_to(root)}:{line}: {dotted} ({src}) imports {module} ({dst})"
            if src not in RANK or dst not in RANK:
                bad.append(f"{where}: {src if src not in RANK else dst!r} has no layer (add it to LAYERS)")
            elif RANK[dst] >= RANK[src]:
                bad.append(f"{where}: layer {RANK[dst]} is not below layer {RANK[src]}")
    return bad


def _module_imports(path: Path, dotted: str, modules: dict) -> list[tuple[int, str]]:
    """(line, project module) of every import; `from pkg import mod` names the submodule when there is one."""
    package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                name = f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                if name in modules:
                    found.append((node.lineno, name))
    return found


def cycles(root: Path = ROOT) -> list[str]:
    """Import cycles among the modules of one layer unit, each as "a -> b -> a (file:line, ...)"."""
    modules = dict((dotted, path) for path, dotted in _modules(root))
    edges: dict[str, dict[str, str]] = {m: {} for m in modules}  # module -> {imported module: "file:line"}
    for dotted, path in modules.items():
        for line, target in _module_imports(path, dotted, modules):
            if target != dotted and unit(target) == unit(dotted) is not None:
                edges[dotted].setdefault(target, f"{path.relative_to(root)}:{line}")
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                loop = stack[stack.index(n):] + [m, n] if n in stack else [m, n]
                where = ", ".join(edges[a][b] for a, b in zip(loop, loop[1:]))
                found.append(f"{' -> '.join(loop)} ({where})")
            elif n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
    return found


def test_no_import_cycle_inside_a_package():
    found = cycles()
    assert not found, "import cycles (tests/test_layers.py):\n" + "\n".join(found)


def test_the_cycle_rule_catches_a_circle(tmp_path):
    """Two modules of one package that import each other (one lazily) are a cycle, named with file:line."""
    (tmp_path / "components" / "serving").mkdir(parents=True)
    (tmp_path / "flows").mkdir()
    (tmp_path / "components" / "serving" / "ask.py").write_text("from components.serving.pyfunc import load\n")
    (tmp_path / "components" / "serving" / "pyfunc.py").write_text("def f():\n    from components.serving import ask\n")
    (tmp_path / "components" / "serving" / "agent.py").write_text("import os\n")
    assert cycles(tmp_path) == ["components.serving.ask -> components.serving.pyfunc -> components.serving.ask "
                                "(components/serving/ask.py:1, components/serving/pyfunc.py:2)"]
    (tmp_path / "components" / "serving" / "pyfunc.py").write_text("from components.serving.agent import x\n")
    assert cycles(tmp_path) == []


def test_no_import_points_upwards_or_sideways():
    problems = violations()
    assert not problems, "layer rules broken (tests/test_layers.py):\n" + "\n".join(problems)


def test_the_rules_catch_a_violation(tmp_path):
    """A config module importing a backend, and a component importing flows, are named with file:line."""
    root = tmp_path
    (root / "components" / "train" / "verl").mkdir(parents=True)
    (root / "flows").mkdir()
    (root / "components" / "config.py").write_text("import os\nfrom components.train.verl.config import X\n")
    (root / "components" / "train" / "verl" / "config.py").write_text("from components.config import Config\n")
    (root / "components" / "cli.py").write_text("def f():\n    from flows.pipeline import pipeline\n")
    (root / "flows" / "pipeline.py").write_text("from components import cli\n")
    assert violations(root) == [
        f"components/cli.py:2: components.cli (cli) imports flows.pipeline (flows): layer {RANK['flows']} is not "
        f"below layer {RANK['cli']}",
        "components/config.py:2: components.config (config) imports components.train.verl.config (train.verl): "
        f"layer {RANK['train.verl']} is not below layer {RANK['config']}",
    ]


def test_the_train_backends_sit_below_their_stage(tmp_path):
    """The stage imports both backends and the verl backend the local one; a backend importing the stage, or the
    local backend importing the verl one (lazily, as `from components.train import verl`), is named."""
    train = tmp_path / "components" / "train"
    (train / "local").mkdir(parents=True)
    (train / "verl").mkdir()
    (tmp_path / "flows").mkdir()
    (train / "stage.py").write_text("from components.train.local.train import run\n"
                                    "from components.train.verl import launch\n")
    (train / "verl" / "launch.py").write_text("from components.train.local import grpo_process\n")
    (train / "local" / "grpo_process.py").write_text("from components.train.local.batch import Batch\n")
    assert violations(tmp_path) == []
    (train / "local" / "train.py").write_text("from components.train import stage\n"
                                              "def f():\n    from components.train import verl\n")
    (train / "verl" / "export.py").write_text("from components.train.stage import CurveRecorder\n")
    assert unit("components.train") == unit("components.train.stage") == "train"
    assert violations(tmp_path) == [
        "components/train/local/train.py:1: components.train.local.train (train.local) imports components.train.stage "
        f"(train): layer {RANK['train']} is not below layer {RANK['train.local']}",
        "components/train/local/train.py:3: components.train.local.train (train.local) imports components.train.verl "
        f"(train.verl): layer {RANK['train.verl']} is not below layer {RANK['train.local']}",
        "components/train/verl/export.py:1: components.train.verl.export (train.verl) imports components.train.stage "
        f"(train): layer {RANK['train']} is not below layer {RANK['train.verl']}",
    ]


def test_every_package_has_a_layer():
    units = {unit(dotted) for _, dotted in _modules(ROOT)} - {None}
    assert not units - set(RANK), f"packages without a layer in tests/test_layers.py: {sorted(units - set(RANK))}"
