"""The project modules a module loads, transitively, read from the source with `ast` (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The file that defines `module` under `root` (a package's __init__.py), or None if it is not a project module."""
    base = root.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def imports(path: Path, module: str, package: str) -> set[str]:
    """Modules of `package` that the file loads: by any import (function-level ones included), by a dotted name in a
    string (`"components.x.y.Class"`, which another process imports), or as a sibling file
    (`Path(__file__).with_name("worker.py")`, which it runs or hands on)."""
    parent = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from . import x`, `from ..a import b`
                parts = parent.split(".")[: len(parent.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}  # `from pkg import module` names a module too
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _dotted(node.value):
            found.add(node.value)
        elif (sibling := _sibling(node)) is not None and (path.parent / sibling).is_file():
            found.add(f"{parent}.{sibling.removesuffix('.py')}")
    return {m for m in found if m.split(".")[0] == package}


def _dotted(text: str) -> bool:
    return "." in text and all(part.isidentifier() for part in text.split("."))


def _sibling(node: ast.AST) -> str | None:
    """The file name in a call `<path>.with_name("x.py")`, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "with_name":
        arg = node.args[0] if len(node.args) == 1 else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.endswith(".py"):
            return arg.value
    return None


def closure(module: str, root: Path = ROOT) -> set[str]:
    """Files, relative to `root`, of `module` and every module of its top package that it imports, transitively."""
    package = module.split(".")[0]
    seen: set[str] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__.py and a/b/__init__.py too
            name = ".".join(parts[:i])
            path = module_file(name, root)
            if path is not None and name not in seen:
                seen.add(name)
                todo += imports(path, name, package)
    return {module_file(m, root).relative_to(root).as_posix() for m in seen}
