"""The layer rules: a module imports only its own package and packages of strictly lower layers (LAYERS,
bottom to top: a package or top-level module of components/; flows/ above everything). Inside a package, imports
point one way too: no module imports itself back through others (no cycle). Lazy imports count."""

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
    {"rl", "validation", "serving"},  # the local trainer; GX suites; ask, pyfunc agent
    {"registry"},  # the champion: the register stage, the gate, registration, promote and rollback
    {"verl_backend"},  # verl on Ray + vLLM (uses rl's estimator table)
    {"training", "stages"},  # stage functions and the stage table
    {"dvc_deps"},  # dvc.yaml's code deps, from the stage table and the import graph
    {"cli"},  # the agentr1 command
    {"flows"},  # the Prefect orchestrator
]
MODULE_LAYER: dict[str, str] = {}  # a module placed above the rest of its package (none now)

RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def unit(module: str) -> str | None:
    """The layer unit of a dotted module name: a components package or top-level module, or flows."""
    if module in MODULE_LAYER:
        return MODULE_LAYER[module]
    parts = module.split(".")
    if parts[0] == "flows":
        return "flows"
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
            # `from components import artifacts` imports the submodule: judge each name as a module
            found += [(node.lineno, f"{base}.{a.name}" if base in ("components", "flows") else base) for a in node.names]
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
    (root / "components" / "verl_backend").mkdir(parents=True)
    (root / "flows").mkdir()
    (root / "components" / "config.py").write_text("import os\nfrom components.verl_backend.config import X\n")
    (root / "components" / "verl_backend" / "config.py").write_text("from components.config import Config\n")
    (root / "components" / "cli.py").write_text("def f():\n    from flows.pipeline import pipeline\n")
    (root / "flows" / "pipeline.py").write_text("from components import cli\n")
    assert violations(root) == [
        f"components/cli.py:2: components.cli (cli) imports flows.pipeline (flows): layer {RANK['flows']} is not "
        f"below layer {RANK['cli']}",
        "components/config.py:2: components.config (config) imports components.verl_backend.config (verl_backend): "
        f"layer {RANK['verl_backend']} is not below layer {RANK['config']}",
    ]


def test_every_package_has_a_layer():
    units = {unit(dotted) for _, dotted in _modules(ROOT)} - {None}
    assert not units - set(RANK), f"packages without a layer in tests/test_layers.py: {sorted(units - set(RANK))}"
