"""The whole command line under hypothesis, in-process: any argv either works, or exits with one `buildmgr: error:`
line; an exit 2 (a user error) writes nothing at all; no input writes outside the data dirs; nothing is a
traceback. A `subprocess.Popen` that raises stands for "went on to run a program" (cmake, pip, a tool): the input was
accepted up to there, and a fake build is never compiled; what it was given must be an argument list without NUL. 500 examples per property, with NUL bytes, '../',
absolute paths, very long names and text that is not UTF-8 (surrogates) among them."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import hostile

from buildmgr import cli

EXAMPLES = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
COMMANDS = [
    "build", "list", "which", "run", "check", "remove", "gc", "recipes", "doctor", "devices", "source", "verify",
    "cache", "matrix", "package", "install-artifact", "key", "publish", "repo", "install",
]  # fmt: skip
OPTIONS = [
    "--", "--archive", "--check", "--cold", "--cpu-arch", "--format", "--gfx", "--jobs", "--json", "--os",
    "--output", "--parse", "--prefer", "--rebuild", "--refresh", "--source", "--sm", "-D", "-j", "-o", "sync", "cpu",
    "cuda+vulkan", "universal+vulkan", "llama-cli", "--configure-only", "--vulkaninfo", "--help", "--to", "--sign",
    "--from", "--dry-run", "--allow-unsigned", "generate", "trust", "untrust", "--for", "list", "forget",
]  # fmt: skip


class Started(Exception):
    """A program was about to start: the command got past every check of its input."""


def refuse(*args, **kwargs):
    """What reached a program is an argument list of text, never a shell line, and holds no NUL byte (which
    would cut an argument short): anything else fails the property here instead of counting as accepted."""
    argv = args[0] if args else kwargs.get("args")
    assert not kwargs.get("shell"), f"a shell was asked for: {argv!r}"
    assert isinstance(argv, (list, tuple)) and argv, f"not an argument list: {argv!r}"
    assert all(isinstance(a, (str, Path)) and "\0" not in str(a) for a in argv), f"a bad argument: {argv!r}"
    raise Started(argv)


def tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")}


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """XDG dirs and the working directory inside one root, so any write anywhere under it is seen."""
    for name in ("DATA", "CACHE", "CONFIG"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(tmp_path / "xdg" / name.lower()))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setattr(subprocess, "Popen", refuse)
    return tmp_path


def run_cli(argv: list[str], root: Path) -> None:
    before = tree(root)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except Started:
            code = None
        except SystemExit as exit:  # --help and --version, from argparse
            code = exit.code
    after = tree(root)
    outside = [path for path in after if not path.startswith("xdg") and path != "cwd"]
    assert not outside, f"{argv!r} wrote outside the data dirs: {outside}"
    if code in (None, 0):
        return
    lines = err.getvalue().strip().splitlines()
    assert lines and lines[-1].startswith("buildmgr: error: "), f"{argv!r} → {code}: {err.getvalue()!r}"
    if code == 2:
        assert len(lines) == 1, f"{argv!r}: a user error is one line: {lines}"
        assert after == before, f"{argv!r}: a user error wrote {set(after) ^ set(before)}"


def test_any_command_line(sandbox):
    @EXAMPLES
    @given(st.sampled_from(COMMANDS), st.lists(st.one_of(hostile, st.sampled_from(OPTIONS)), max_size=6))
    def any_command_line(command, args):
        run_cli([command, *args], sandbox)

    any_command_line()


def test_any_build_request(sandbox):
    recipes = st.builds(
        "+".join, st.lists(st.sampled_from(["cpu", "cuda", "vulkan", "hip", "universal", "x"]), max_size=3)
    )
    flag = st.sampled_from(["--sm", "--gfx", "--source", "-D", "-j"])

    @EXAMPLES
    @given(st.one_of(recipes, hostile), st.lists(st.tuples(flag, hostile), max_size=4))
    def any_build_request(recipe, pairs):
        run_cli(["build", recipe, *(item for pair in pairs for item in pair)], sandbox)

    any_build_request()
