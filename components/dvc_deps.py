"""dvc.yaml's code deps, generated: each stage depends on exactly the components/ files its function imports.

`make dvc-deps` rewrites them; tests/test_dvc_deps.py fails while dvc.yaml differs from what this writes. A package
all of whose files a stage imports is listed as its folder. The rest of dvc.yaml (inputs, params, comments) is kept
as written: ruamel.yaml, which DVC itself uses for dvc.yaml, round-trips it.
"""

from __future__ import annotations

import io
from pathlib import Path

from ruamel.yaml import YAML

from components.import_graph import ROOT, closure
from components.stages import STAGES

PACKAGE = "components"


class MissingStage(ValueError):
    """dvc.yaml lacks a stage that components/stages.py defines."""


def collapse(files: set[str], root: Path = ROOT) -> list[str]:
    """`files` sorted, with each folder all of whose files are among them named once, as the folder."""
    out, whole = set(files), []
    for folder in sorted({Path(f).parent for f in files}, key=lambda p: len(p.parts)):  # outermost first
        if any(folder.is_relative_to(w) for w in whole):
            continue
        inside = {p.relative_to(root).as_posix() for p in (root / folder).rglob("*") if _tracked(p)}
        if inside <= files:
            whole.append(folder)
            out = (out - inside) | {folder.as_posix()}
    return sorted(out)


def _tracked(path: Path) -> bool:
    """A file DVC hashes in a folder dep (.dvcignore leaves out bytecode)."""
    return path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"


def code_deps(module: str, root: Path = ROOT) -> list[str]:
    """The dvc.yaml deps for the code of a stage whose function lives in `module`."""
    return collapse(closure(module, root), root)


def _yaml() -> YAML:
    yaml = YAML()  # round-trip mode: comments and key order stay
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def generate(text: str) -> str:
    """dvc.yaml `text` with each stage's components/ deps replaced by the generated ones, after its other deps."""
    yaml = _yaml()
    doc = yaml.load(text)
    for name, stage in STAGES.items():
        if name not in doc["stages"]:
            raise MissingStage(f"dvc.yaml has no stage {name!r}, which components/stages.py names")
        deps = doc["stages"][name]["deps"]
        for i in reversed(range(len(deps))):
            if isinstance(deps[i], str) and deps[i].split("/")[0] == PACKAGE:
                del deps[i]
        deps.extend(code_deps(stage.module))
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def write(path: Path = ROOT / "dvc.yaml") -> bool:
    """Rewrite `path`'s code deps; True if it changed."""
    text = path.read_text()
    new = generate(text)
    if new != text:
        path.write_text(new)
    return new != text
