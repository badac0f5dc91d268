"""Stress: kill -9 in every phase, a read-only data dir, a full disk. A small C tree shaped like llama.cpp
(conftest.write_fake_tree) stands in for llama.cpp so that each case takes seconds."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import WORKS, buildmgr, make_env, write_fake_tree

# Where each kill lands: just after the line that starts a phase. "✓ smoke" is the last line before buildmgr hashes
# the staged files, fsyncs them and renames the staging dir into place (publishing).
PHASES = ("▸ configure", "▸ build", "▸ install", "▸ smoke", "✓ smoke")
# 48 MiB of initialised data per tool makes installing and publishing take long enough for the kill to land in them.
BALLAST = "char ballast[48 << 20] = {1};\n"


def listed(env) -> list[str]:
    return [b["id"] for b in json.loads(buildmgr(env, "list", "--json").stdout)["builds"]]


def mount_tmpfs(path: Path, options: str) -> bool:
    """A small tmpfs at path, where this machine allows mounting (CI runs as root)."""
    command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def start(env, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "buildmgr", *args], env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


@pytest.mark.parametrize("phase", PHASES)
def test_kill_9_in_any_phase_leaves_no_half_build_and_the_next_run_finishes(tmp_path, phase):
    tree = write_fake_tree(tmp_path / "src", BALLAST + WORKS)
    env = make_env(tmp_path)
    process = start(env, "build", "--source", str(tree))
    seen = ""
    deadline = time.monotonic() + 120
    while phase not in seen and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen += line
    assert phase in seen, seen
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    builds = tmp_path / "data" / "buildmgr" / "builds"
    visible = [
        p for v in builds.glob("*") if not v.name.startswith(".") for p in v.iterdir() if not p.name.startswith(".")
    ]
    for prefix in visible:  # a build is whole or absent
        assert (prefix / "buildmgr-receipt.json").exists(), f"half a build is visible: {prefix}"
    assert len(listed(env)) == len(visible)
    if phase in ("▸ install", "✓ smoke"):  # killed between staging and publishing: the staging dir is what is left
        assert not visible and list((builds / ".staging").iterdir())
    again = buildmgr(env, "build", "--source", str(tree))
    assert again.returncode == 0, again.stderr
    [build_id] = listed(env)
    assert not list((builds / ".staging").iterdir())  # the next run cleaned up after the killed one
    receipt = json.loads(next(builds.glob(f"*/{build_id}/buildmgr-receipt.json")).read_text())
    assert receipt["smoke"]["passed"]


def test_two_different_builds_at_once_both_succeed(tmp_path):
    tree = write_fake_tree(tmp_path / "src", WORKS)
    env = make_env(tmp_path)
    first, second = (
        start(env, "build", "--source", str(tree)),
        start(env, "build", "--source", str(tree), "-D", "X_FOO=1"),
    )
    assert first.wait(timeout=300) == 0 and second.wait(timeout=300) == 0, (first.stderr.read(), second.stderr.read())
    assert len(listed(env)) == 2


def test_a_read_only_data_dir_is_one_line(tmp_path):
    """A read-only tmpfs where mounting is allowed (root ignores permission bits); else a dir without write bits."""
    data = tmp_path / "data"
    data.mkdir()
    mounted = mount_tmpfs(data, "ro,size=64k")
    if not mounted:
        data.chmod(0o500)
    tree = write_fake_tree(tmp_path / "src", WORKS)
    try:
        result = buildmgr(make_env(tmp_path), "build", "--source", str(tree))
    finally:
        if mounted:
            subprocess.run(["umount", str(data)], check=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot write to" in result.stderr


def test_a_full_disk_during_install_is_one_line_and_leaves_no_staging(tmp_path):
    """The data dir on a 40 KiB tmpfs (where mounting is allowed; else RLIMIT_FSIZE): the tools do not fit."""
    import resource

    tree = write_fake_tree(tmp_path / "src", WORKS)
    env = make_env(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    mounted = mount_tmpfs(data, "size=40k")

    def small_files():
        if not mounted:
            resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    try:
        result = subprocess.run(
            [sys.executable, "-m", "buildmgr", "build", "--source", str(tree)],
            env=env,
            capture_output=True,
            text=True,
            preexec_fn=small_files,
            check=False,
        )
        assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr
        if mounted:  # the compile fits (the build tree is elsewhere); installing the tools does not
            assert "✓ build" in result.stderr and "No space left on device" in result.stderr.strip().splitlines()[-1]
        assert listed(env) == []
        staging = data / "buildmgr" / "builds" / ".staging"
        assert not staging.exists() or not list(staging.iterdir())
    finally:
        if mounted:
            subprocess.run(["umount", str(data)], check=True)
