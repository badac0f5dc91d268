"""The scripts under bench/ (benchmarks run here, and the recorders run on a lent GPU machine) import buildmgr from
Python inside the shell (heredocs, `python3 -c`) and run its modules (`python3 -m buildmgr.…`), which no linter reads:
a module moved or a name renamed left three of them failing at the first step (install-from.sh's proof_models,
gpu-noop.sh's RECEIPT_SCHEMA, gpu-virtual.sh's write_tiny_model). Each such import must name a module and a name
that exist today. Read statically (the AST of the module named), so the check needs none of the scripts' own
dependencies."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPTS = sorted(p for p in (ROOT / "bench").rglob("*") if p.suffix in (".sh", ".py"))
FROM = re.compile(r"\bfrom (buildmgr(?:\.\w+)*) import ([\w ,]+?)(?:;|$|\"|'|\))", re.MULTILINE)
MODULE = re.compile(r"(?:\bimport|-m) (buildmgr(?:\.\w+)+)")


def module_file(dotted: str) -> Path | None:
    path = ROOT.joinpath(*dotted.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def names(module: Path) -> set[str]:
    """What `from module import X` can name: its top-level definitions, assignments and imports, and (for a
    package) its submodules."""
    found: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if module.name == "__init__.py":
        found |= {p.stem for p in module.parent.glob("*.py")} | {
            p.name for p in module.parent.iterdir() if (p / "__init__.py").is_file()
        }
    return found


def uses(script: Path) -> list[tuple[str, str | None]]:
    text = script.read_text()
    found: list[tuple[str, str | None]] = [(m, None) for m in MODULE.findall(text)]
    for module, imported in FROM.findall(text):
        for part in imported.split(","):
            name = part.split(" as ")[0].strip()
            if name:
                found.append((module, name))
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_buildmgr_import_of_a_script_exists(script: Path) -> None:
    missing = []
    for module, name in uses(script):
        path = module_file(module)
        if path is None:
            missing.append(f"{module}: no such module")
        elif name is not None and name not in names(path):
            missing.append(f"{module}.{name}: no such name")
    assert missing == [], missing
