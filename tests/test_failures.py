"""A build that fails to compile, or builds but does not run, is never published and keeps its log."""

import re
import subprocess
from pathlib import Path

from conftest import buildmgr, write_fake_tree

BROKEN = "int main(void) { return 0 }\n"  # missing ';'
WONT_RUN = "int main(void) { return 3; }\n"


def prefixes(root: Path) -> list[Path]:
    builds = root / "data" / "buildmgr" / "builds"
    return list(builds.glob("*/*")) if builds.exists() else []


def staging_left(root: Path) -> list[Path]:
    staging = root / "data" / "buildmgr" / "builds" / ".staging"
    return list(staging.iterdir()) if staging.exists() else []


def log_path(stderr: str) -> Path:
    match = re.search(r"full log: (\S+)", stderr)
    assert match, stderr
    return Path(match.group(1))


def test_compile_error_exits_1_keeps_log_and_shows_the_error(tmp_path: Path, tmp_env):
    tree = write_fake_tree(tmp_path / "src", BROKEN)
    result = buildmgr(tmp_env, "build", "--source", str(tree))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "buildmgr: error: build failed" in result.stderr
    assert "FAILED: " in result.stderr and "tool.c:1:26: error: expected" in result.stderr
    log = log_path(result.stderr)
    assert "tool.c:1:26: error: expected" in log.read_text()
    assert prefixes(tmp_path) == [] and staging_left(tmp_path) == []


def test_a_build_that_does_not_run_is_not_published(tmp_path: Path, tmp_env):
    tree = write_fake_tree(tmp_path / "src", WONT_RUN)
    result = buildmgr(tmp_env, "build", "--source", str(tree))
    assert result.returncode == 1, result.stderr
    assert "smoke run failed (llama-cli --version: exit 3," in result.stderr
    assert "the build was not published" in result.stderr
    assert "smoke: " in log_path(result.stderr).read_text()
    assert prefixes(tmp_path) == [] and staging_left(tmp_path) == []


def test_git_url_at_ref_clones_and_builds_that_commit(tmp_path: Path, tmp_env):
    repo = write_fake_tree(tmp_path / "repo", WONT_RUN)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", "first"], check=True)
    (repo / "tool.c").write_text(BROKEN)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "-am", "second, broken"], check=True)
    first = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD~1"], capture_output=True, text=True, check=True
    ).stdout.strip()

    at_first = buildmgr(tmp_env, "build", "--source", f"{repo}@{first}")
    assert f"({first[:7]})" in at_first.stderr, at_first.stderr
    assert "smoke run failed" in at_first.stderr  # it compiled: the first commit was checked out
    at_main = buildmgr(tmp_env, "build", "--source", f"{repo}@main")
    assert "build failed" in at_main.stderr and "tool.c:1:26: error" in at_main.stderr  # main is the broken one
    assert buildmgr(tmp_env, "build", "--source", f"{repo}@no-such-ref").returncode == 2
