"""The shape the import contracts keep (pyproject's [tool.importlinter], run by ci/test.sh): every module of buildmgr
is in exactly one layer, and every module outside backends/ is held to the registry, so a new module cannot slip past
the contracts by being left out of them."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def modules() -> set[str]:
    """Every module and package of buildmgr, dotted below it (cli, bench.runner, backends …); the packages whose
    modules sit in different layers are listed by module."""
    split = {
        "core",
        "tools",
        "trust",
        "devices",
        "proof",
        "building",
        "placement",
        "artifacts",
        "bench",
        "tune",
        "fleet",
    }
    found = set()
    for path in (ROOT / "buildmgr").iterdir():
        name = path.stem
        if path.is_dir() and name in split:
            found |= {f"{name}.{p.stem}" for p in path.glob("*.py") if p.stem != "__init__"}
            found |= {f"{name}.{p.name}" for p in path.iterdir() if (p / "__init__.py").is_file()}
        elif (path.is_dir() and (path / "__init__.py").is_file()) or (path.suffix == ".py" and name != "__init__"):
            found.add(name)
    return found


def contract(name: str) -> dict:
    return next(c for c in CONTRACTS if c["name"].startswith(name))


def test_every_module_is_in_exactly_one_layer():
    layered = [m.strip() for layer in contract("layers")["layers"] for m in layer.replace("|", ":").split(":")]
    assert sorted(layered) == sorted(set(layered)), "a module in two layers"
    assert set(layered) == modules(), (modules() - set(layered), set(layered) - modules())


def test_every_module_outside_backends_is_kept_from_the_backend_packages():
    forbidden = contract("no module outside backends/")
    sources = {m.removeprefix("buildmgr.") for m in forbidden["source_modules"]}
    tops = {m.split(".")[0] for m in modules()} - {"backends", "__main__"}
    # primitives below the backends cannot import them anyway (the layers contract); the rest must be listed
    below = {m for layer in contract("layers")["layers"][-2:] for m in layer.split(" : ")}
    assert tops - below - sources == set()
    # every child of backends/ is a backend package (the registry finds them by looking), so one wildcard holds them
    assert forbidden["forbidden_modules"] == ["buildmgr.backends.*"]
    children = {p.stem for p in (ROOT / "buildmgr" / "backends").iterdir() if p.name != "__pycache__"} - {"__init__"}
    assert all((ROOT / "buildmgr" / "backends" / c / "__init__.py").is_file() for c in children), children
    assert contract("each backend package")["modules"] == ["buildmgr.backends.*"]


def test_no_module_is_over_400_lines():
    """Issue #48: runner.py planned, checked the host, ran, aggregated and serialized in 622 lines; issue #66:
    artifacts/repo.py held six jobs in 877; issue #67: captures.py (628), source.py, the registry and the backend shapes.
    One job per module keeps each short enough to read whole: every module of buildmgr, at any depth."""
    folder = Path(__file__).parent.parent / "buildmgr"
    long = {str(p.relative_to(folder)): n for p in folder.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
