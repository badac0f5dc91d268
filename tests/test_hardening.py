"""Promises under stress and hostile input (the hardening issue): each test failed before its fix."""

import json
import os
from pathlib import Path

import pytest
from conftest import assert_user_error, buildmgr

from buildmgr import store
from buildmgr.config import Dirs
from buildmgr.errors import UserError
from buildmgr.inventory import load
from buildmgr.source import parse_source_spec


def fake_build(dirs: Dirs, name: str, recipe: str = "cpu", version_dir: str = "0.5.0-0c1e570") -> Path:
    prefix = dirs.builds / version_dir / name
    (prefix / "bin").mkdir(parents=True)
    tool = prefix / "bin" / "llama-cli"
    tool.write_text("#!/bin/sh\necho fake\n")
    tool.chmod(0o755)
    receipt = {"schema": store.RECEIPT_SCHEMA, "id": name.lstrip("."), "recipe": {"name": recipe, "backends": ["CPU"]}}
    (prefix / store.RECEIPT).write_text(json.dumps(receipt | {"finished": "2026-11-30T00:00:00+00:00"}))
    return prefix


def dirs_of(env: dict[str, str]) -> Dirs:
    old = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    os.environ.update({k: env[k] for k in old})
    try:
        return Dirs.from_environment()
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_half_removed_or_replaced_prefixes_are_never_listed(tmp_env):
    dirs = dirs_of(tmp_env)
    fake_build(dirs, ".removing-cpu-11111111")
    fake_build(dirs, ".old-cpu-22222222-abcd1234")
    assert json.loads(buildmgr(tmp_env, "list", "--json").stdout)["builds"] == []
    assert_user_error(buildmgr(tmp_env, "which", "cpu"), "no installed build 'cpu'")


def test_removing_again_after_an_interrupted_remove_works(tmp_env):
    dirs = dirs_of(tmp_env)
    prefix = fake_build(dirs, "cpu-33333333")
    leftover = prefix.with_name(f".removing-{prefix.name}")
    (leftover / "bin").mkdir(parents=True)
    (leftover / "bin" / "half-deleted").write_text("x")  # what a killed `remove` leaves
    result = buildmgr(tmp_env, "remove", "cpu-33333333")
    assert result.returncode == 0, result.stderr
    assert not prefix.exists()


def test_replacing_a_prefix_has_no_moment_without_it(tmp_path, monkeypatch):
    """--rebuild swaps staging and prefix in one step: a crash after any single rename leaves a whole build."""
    prefix = tmp_path / "builds" / "v" / "cpu-44444444"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "old").write_text("old")
    staging = tmp_path / "staging" / "cpu-44444444.1.x"
    (staging / "bin").mkdir(parents=True)
    (staging / "bin" / "new").write_text("new")
    real_rename = os.rename
    renames = []

    def crash_after_first_rename(source, destination):
        if renames:
            raise KeyboardInterrupt  # the process dies between two renames
        renames.append((source, destination))
        real_rename(source, destination)

    monkeypatch.setattr(os, "rename", crash_after_first_rename)
    try:
        store.publish(staging, prefix)
    except KeyboardInterrupt:
        pass
    assert (prefix / "bin").is_dir(), "the prefix vanished"
    monkeypatch.undo()
    store.publish(staging, prefix) if staging.exists() else None
    assert (prefix / "bin" / "new").read_text() == "new" and not (prefix / "bin" / "old").exists()
    assert not staging.exists() and not list(prefix.parent.glob(".*"))


@pytest.mark.parametrize("tool", ["/bin/sh", "../../../../bin/sh", "..", "bin/llama-cli", ""])
def test_tool_names_stay_inside_the_prefix(tmp_env, tool):
    dirs = dirs_of(tmp_env)
    fake_build(dirs, "cpu-55555555")
    assert_user_error(buildmgr(tmp_env, "which", "cpu", tool), "tool")
    assert_user_error(buildmgr(tmp_env, "run", "cpu", "--", tool, "-c", "echo escaped"), "tool")


@pytest.mark.parametrize(
    "text",
    [
        "--upload-pack=touch /tmp/pwned ://x@main",
        "-c core.sshCommand=evil ssh://host/repo@main",
        "https://github.com/ggml-org/llama.cpp@--orphan",
    ],
)
def test_a_source_that_git_would_read_as_an_option_is_refused(text):
    with pytest.raises(UserError, match="option"):
        parse_source_spec(text)


def test_an_inventory_of_the_wrong_shape_is_set_aside_not_a_crash(tmp_path):
    path = tmp_path / "host.json"
    path.write_text('{"schema": 1, "builds": []}')
    warnings = []
    assert load(path, warnings.append) == {"schema": 1, "builds": {}}
    assert "moved aside" in warnings[0] and list(tmp_path.glob("host.json.corrupt-*"))


def test_an_inventory_from_a_newer_buildmgr_is_refused_and_kept(tmp_path):
    path = tmp_path / "host.json"
    path.write_text('{"schema": 99, "builds": {}}')
    with pytest.raises(UserError, match="written by a newer buildmgr"):
        load(path)
    assert path.read_text() == '{"schema": 99, "builds": {}}'


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device", "/data/buildmgr/staging/x"),
        OSError(30, "Read-only file system", "/data/buildmgr/builds"),
        PermissionError(13, "Permission denied", "/data/buildmgr/inventory"),
    ],
)
def test_an_os_error_is_one_line_with_the_path(monkeypatch, capsys, error):
    from buildmgr import cli

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(store, "installed", fail)
    assert cli.main(["list"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"buildmgr: error: {error.strerror}: {error.filename}")
