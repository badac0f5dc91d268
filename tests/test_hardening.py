"""Promises under stress and hostile input (the hardening issue): each test failed before its fix."""

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_user_error, buildmgr, make_receipt, user_recipe

from buildmgr import store
from buildmgr.building.source.tree import parse_source_spec
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.devices.inventory import load
from buildmgr.devices.inventory_file import Inventory


def fake_build(dirs: Dirs, name: str, recipe: str = "cpu", version_dir: str = "0.5.0-0c1e570") -> Path:
    prefix = dirs.builds / version_dir / name
    (prefix / "bin").mkdir(parents=True)
    tool = prefix / "bin" / "llama-cli"
    tool.write_text("#!/bin/sh\necho fake\n")
    tool.chmod(0o755)
    store.write_receipt(prefix, make_receipt(name.lstrip("."), recipe={"name": recipe}))
    return prefix


def dirs_of(env: dict[str, str]) -> Dirs:
    old = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    os.environ.update({k: env[k] for k in old})
    try:
        return Dirs.from_environment(os.environ)
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
    result = buildmgr(tmp_env, "remove", "cpu-33333333", "--json")
    assert result.returncode == 0, result.stderr
    assert not prefix.exists()
    assert json.loads(result.stdout) == {"removed": "cpu-33333333", "prefix": str(prefix)}


PUBLISHER = """
import sys
from pathlib import Path

from buildmgr import store
from conftest import make_receipt

prefix, root = Path(sys.argv[1]), Path(sys.argv[2])
receipt = make_receipt()
for generation in range(1, 10**6):
    staging = root / f"staging-{generation}"
    (staging / "bin").mkdir(parents=True)
    for tool in range(5):
        (staging / "bin" / f"tool{tool}").write_text(str(generation))
    store.publish(staging, prefix, receipt)
    print(generation, flush=True)
"""


def _look(prefix: Path) -> str | None:
    """What is wrong with the build the prefix names, or None. Its folder is opened once and everything read through
    that handle; a folder found incomplete counts only if the path still names it afterwards (one swapped out while
    it was read is being deleted, and no reader at the path can meet it again: each publish brings a new folder)."""
    try:
        folder = os.open(prefix, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return "the prefix is gone"
    try:
        try:
            binary = os.open("bin", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
            names = sorted(os.listdir(binary))
            contents = set()
            for name in names:
                handle = os.open(name, os.O_RDONLY, dir_fd=binary)
                contents.add(os.read(handle, 64).decode())
                os.close(handle)
            os.close(binary)
            receipt = "buildmgr-receipt.json" in os.listdir(folder)
            problem = (
                None
                if names == [f"tool{n}" for n in range(5)] and len(contents) == 1 and receipt
                else f"{names} {contents} receipt={receipt}"
            )
        except FileNotFoundError as err:
            problem = f"missing: {err.filename}"
        try:
            still_there = os.stat(prefix).st_ino == os.fstat(folder).st_ino
        except FileNotFoundError:
            return "the prefix is gone"
        return problem if problem and still_there else None
    finally:
        os.close(folder)


def test_replacing_a_prefix_has_no_moment_without_a_whole_build(tmp_path):
    """The real race: another process publishes new builds over the prefix as fast as it can (--rebuild's path, the
    atomic swap) while this one looks at it thousands of times, then kill -9 lands at a random moment. Every look
    finds the prefix there, with its receipt and every file of one build, never two builds mixed or none."""
    prefix = tmp_path / "builds" / "v" / "cpu-44444444"
    (prefix / "bin").mkdir(parents=True)
    for tool in range(5):
        (prefix / "bin" / f"tool{tool}").write_text("0")
    store.write_receipt(prefix, make_receipt())
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parent.parent)])}
    child = subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, str(prefix), str(tmp_path / "work")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    looks, wrong = 0, []
    deadline = time.monotonic() + 3 + random.random()
    try:
        while time.monotonic() < deadline:
            problem = _look(prefix)
            looks += 1
            wrong += [problem] if problem else []
    finally:
        child.kill()  # kill -9, wherever the publisher is
        child.wait()
    published = int((child.stdout.read() if child.stdout else "").split()[-1])
    assert not wrong, wrong[:5]
    assert published > 10 and looks > 1000, (published, looks)  # the race really ran: many builds, many looks
    assert _look(prefix) is None  # and after the kill, a whole build


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
    assert load(path, warnings.append) == Inventory.empty()
    assert (
        "builds: expected an object, got []" in warnings[0]
        and "moved aside" in warnings[0]
        and list(tmp_path.glob("host.json.corrupt-*"))
    )


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

    monkeypatch.setattr(store, "scan", fail)
    assert cli.main(["list"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"buildmgr: error: {error.strerror}: {error.filename}")


def test_no_code_from_an_unverified_sdist_runs(tmp_path, tmp_env):
    """A tampered sdist on the user's index: pip must refuse it before running its build backend."""
    import tarfile

    marker = tmp_path / "backend-ran"
    package = tmp_path / "src" / "llama_cpp_python-0.3.36"
    package.mkdir(parents=True)
    (package / "setup.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup()\n"
    )
    (package / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.36\n")
    index = tmp_path / "index"
    index.mkdir()
    with tarfile.open(index / "llama_cpp_python-0.3.36.tar.gz", "w:gz") as tar:
        tar.add(package, arcname=package.name)
    result = buildmgr(tmp_env | {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}, "source", "sync")
    assert result.returncode == 1 and "its sha256 is not the lock's 832db069" in result.stderr, result.stderr
    assert not marker.exists(), "the sdist's setup.py ran before its hash was checked"
    assert not list((tmp_path / "data").rglob("CMakeLists.txt"))


def test_every_installed_file_reaches_the_disk_before_the_build_appears(tmp_path, monkeypatch):
    staging = tmp_path / "staging" / "cpu-66666666.1.x"
    (staging / "bin").mkdir(parents=True)
    (staging / "bin" / "llama-cli").write_text("tool")
    (staging / "lib").mkdir()
    (staging / "lib" / "libllama.so.0").write_text("lib")
    (staging / "lib" / "libllama.so").symlink_to("libllama.so.0")
    (staging / store.RECEIPT).write_text("{}")
    synced: set[str] = set()
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def rename(source, destination):
        files = {str(p) for p in Path(source).rglob("*") if not p.is_symlink()} | {str(source)}
        assert files <= synced, f"not on disk before publishing: {sorted(files - synced)}"
        real_rename(source, destination)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    store.publish(staging, tmp_path / "builds" / "v" / "cpu-66666666", make_receipt("cpu-66666666"))
    assert (tmp_path / "builds" / "v" / "cpu-66666666" / "bin" / "llama-cli").read_text() == "tool"


@pytest.mark.parametrize(
    ("define", "says"),
    [
        ("CMAKE_CUDA_ARCHITECTURES=90", "use --sm"),
        ("LLAMA_BUILD_COMMIT=deadbee", "it comes from the source"),
        ("CMAKE_INSTALL_RPATH=/opt/lib", "$ORIGIN RPATH"),
        ("CMAKE_C_COMPILER_LAUNCHER=sccache", "runs ccache itself"),
    ],
)
def test_defines_buildmgr_owns_are_refused_not_silently_overridden(tmp_path, tmp_env, define, says):
    assert_user_error(buildmgr(tmp_env, "build", "-D", define), "is set by buildmgr", says)
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'backends = ["CPU", "Vulkan"]\ntargets = ["x"]\n[conflicts.hip]\nreason = "r"\nunless = "ON"',
            "unless must be a table",
        ),
        ('backends = []\ntargets = ["x"]', "must each name at least one"),
        ('backends = ["Vulcan"]\ntargets = ["x"]', "unknown backend(s) Vulcan"),
    ],
)
def test_recipes_are_validated_when_parsed(text, message):
    from buildmgr.building.recipes import parse_recipe

    with pytest.raises(UserError, match=re.escape(message)):
        parse_recipe("mine", text, "mine.toml")


def test_a_broken_user_recipe_fails_only_the_command_that_asks_for_it(tmp_path, tmp_env):
    user_recipe(tmp_path, "mine", "backends = [")
    listed = buildmgr(tmp_env, "recipes", "--json")
    assert listed.returncode == 0 and "skipping a broken recipe" in listed.stderr and "mine.toml" in listed.stderr
    assert "cpu" in {r["name"] for r in json.loads(listed.stdout)["recipes"]}
    assert_user_error(buildmgr(tmp_env, "build", "mine"), "mine.toml", "invalid TOML")


def test_gc_goes_by_the_locks_not_by_process_ids(tmp_env):
    from buildmgr.core.fsutil import locked

    dirs = dirs_of(tmp_env)
    orphan = dirs.staging / "cpu-77777777.1.abcd1234"  # pid 1 is alive, but no build holds the lock
    running = dirs.staging / "cpu-88888888.1.abcd1234"
    extract = dirs.sources / ".extract-x1"
    download = dirs.downloads / ".pip-x2"
    clone = dirs.git / ".0123456789ab.tmp"
    for path in (orphan, running, extract, download, clone):
        (path / "sub").mkdir(parents=True)
    with locked(store.build_lock(dirs, "cpu-88888888")):
        removed = [item.path for item in store.gc(dirs)]
    assert {p for p in removed if p.suffix != ".lock"} == {orphan, extract, download, clone}
    assert running.exists() and not any(p.exists() for p in removed)


def test_gc_removes_the_lock_files_of_builds_not_running(tmp_env):
    from buildmgr.core.fsutil import locked

    dirs = dirs_of(tmp_env)
    for build_id in ("cpu-11111111", "cpu-22222222"):  # builds that finished: their lock files stay behind
        with locked(store.build_lock(dirs, build_id)):
            pass
    with locked(store.build_lock(dirs, "cpu-33333333")):
        removed = [item.path for item in store.gc(dirs)]
        assert [p.name for p in (dirs.data / "locks").iterdir()] == ["cpu-33333333.lock"]
    assert {"cpu-11111111.lock", "cpu-22222222.lock"} <= {p.name for p in removed}


def test_gc_dry_run_lists_each_item_with_why_and_removes_nothing(tmp_env):
    """Issue #35: gc removed a build tree of a build never shown in `list`, and locks, without naming them first."""
    from buildmgr.core.fsutil import locked

    dirs = dirs_of(tmp_env)
    tree = dirs.build_trees / "cpu-44444444"
    orphan = dirs.staging / "cpu-55555555.1.abcd1234"
    for path in (tree / "CMakeFiles", orphan / "sub"):
        path.mkdir(parents=True)
    with locked(store.build_lock(dirs, "cpu-66666666")):
        pass
    before = sorted(p for p in dirs.data.rglob("*"))
    dry = buildmgr(tmp_env, "gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    listed = {Path(item["path"]): item["why"] for item in json.loads(dry.stdout)["removed"]}
    assert sorted(p for p in dirs.data.rglob("*")) == before  # nothing removed
    assert listed[tree] == "build tree of cpu-44444444, which is not installed (failed or removed)"
    assert listed[orphan] == "staging of an interrupted build"
    assert listed[store.build_lock(dirs, "cpu-66666666")] == "lock file of a build not running"
    plain = buildmgr(tmp_env, "gc", "--dry-run")
    # the list is the result, on stdout (issue #52: `gc --dry-run | less` showed nothing); the count is a note
    assert f"would remove {tree} (build tree of cpu-44444444" in plain.stdout and tree.exists()
    done = buildmgr(tmp_env, "gc", "--json")
    assert {Path(item["path"]) for item in json.loads(done.stdout)["removed"]} == set(listed)
    assert not any(p.exists() for p in listed)


HOLD_THE_LOCK = """
import json, sys, time
from pathlib import Path
from buildmgr.core.fsutil import locked
with locked(Path(sys.argv[1])):
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on the host
    time.sleep(1.5)
    Path(sys.argv[2]).write_text(json.dumps([start, time.monotonic()]))
"""


def waits_on(inode: int) -> bool:
    """/proc/locks shows a process blocked on a flock as a `->` line naming the file's inode."""
    return any("->" in line and line.split()[6].endswith(f":{inode}") for line in Path("/proc/locks").open())


def test_a_lock_file_that_gc_removes_while_a_process_waits_on_it_still_excludes(tmp_path):
    """The worst interleaving, for real: gc holds an idle lock file and unlinks it while a build waits on it; after
    gc lets go, that build and a newcomer (who creates the file again) must not both hold the lock."""
    import fcntl
    import subprocess
    import sys
    import time

    lock = tmp_path / "locks" / "cpu-1.lock"
    lock.parent.mkdir()
    env = dict(os.environ) | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}

    def holder(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(lock), str(tmp_path / name)], env=env)

    with open(lock, "a") as handle:  # gc's side
        fcntl.flock(handle, fcntl.LOCK_EX)
        waiter = holder("waiter.json")
        deadline = time.monotonic() + 30
        while not waits_on(os.fstat(handle.fileno()).st_ino):
            assert time.monotonic() < deadline and waiter.poll() is None, "the waiter never blocked on the lock"
            time.sleep(0.05)
        lock.unlink()
    newcomer = holder("newcomer.json")
    assert waiter.wait(timeout=60) == 0 and newcomer.wait(timeout=60) == 0
    first, second = (json.loads((tmp_path / name).read_text()) for name in ("waiter.json", "newcomer.json"))
    assert first[1] <= second[0] or second[1] <= first[0], f"both held the lock at once: {first} {second}"


def every_path(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_source_that_is_not_llama_cpp_writes_not_even_a_directory(tmp_path, tmp_env):
    (tmp_path / "elsewhere").mkdir()
    before = every_path(tmp_path)
    assert_user_error(
        buildmgr(tmp_env, "build", "--source", str(tmp_path / "elsewhere")), "is not a llama.cpp source tree"
    )
    assert every_path(tmp_path) == before


def git_repo(path: Path) -> str:
    import subprocess

    from conftest import write_fake_tree

    write_fake_tree(path, "int main(void) { return 0; }\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(path)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_a_bad_ref_leaves_no_clone_behind(tmp_path, tmp_env):
    git_repo(tmp_path / "repo")
    assert_user_error(buildmgr(tmp_env, "build", "--source", f"{tmp_path / 'repo'}@no-such-ref"), "git checkout")
    clones = Path(tmp_env["XDG_CACHE_HOME"]) / "buildmgr" / "git"
    assert [p.name for p in clones.iterdir()] == [".lock"]


def test_a_full_commit_already_cloned_is_not_fetched_again(tmp_path, monkeypatch):
    from buildmgr.building.source import git

    commit = git_repo(tmp_path / "repo")
    dirs = Dirs(tmp_path / "data", tmp_path / "cache", tmp_path / "config")
    git.git_tree(str(tmp_path / "repo"), "main", dirs)
    calls = []
    real_git = git.run_git
    monkeypatch.setattr(git, "run_git", lambda args, cwd=None: calls.append(args[0]) or real_git(args, cwd))
    tree = git.git_tree(str(tmp_path / "repo"), commit, dirs)
    assert tree.commit == commit and "fetch" not in calls
    git.git_tree(str(tmp_path / "repo"), "main", dirs)
    assert "fetch" in calls  # a branch may have moved


@pytest.mark.parametrize(("destination", "name"), [("bin/../../../etc", "passwd"), ("bin", "../../outside")])
def test_install_rules_cannot_climb_out_of_the_prefix(tmp_path, destination, name):
    from types import SimpleNamespace

    from buildmgr.building.install import install_targets
    from buildmgr.core.errors import BuildFailed

    (tmp_path / "build" / "tool").parent.mkdir(parents=True)
    (tmp_path / "build" / "tool").write_text("x")
    target = SimpleNamespace(name="llama-cli", id="t1", dependencies=[])
    from scikit_build_core.file_api.model.directory import InstallPath

    entry = InstallPath(from_=Path("tool"), to=Path(name))  # the File API's "from"/"to" form
    rule = SimpleNamespace(type="file", destination=Path(destination), paths=[entry], targetId=None)
    reply = SimpleNamespace(
        configuration=SimpleNamespace(targets=[target], directories=[SimpleNamespace(installers=[rule])])
    )
    with pytest.raises(BuildFailed, match="outside the prefix"):
        install_targets(reply, tmp_path / "build", tmp_path / "build", ("llama-cli",), tmp_path / "prefix")
    assert not (tmp_path / "etc").exists() and not (tmp_path / "outside").exists()


def test_two_refs_get_two_trees_and_one_never_changes_under_the_other(tmp_path):
    import subprocess

    from buildmgr.building.source import git

    first = git_repo(tmp_path / "repo")
    git_cli = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path / "repo")]
    (tmp_path / "repo" / "tool.c").write_text("int main(void) { return 2; }\n")
    subprocess.run([*git_cli, "commit", "-q", "-am", "second"], check=True)
    dirs = Dirs(tmp_path / "data", tmp_path / "cache", tmp_path / "config")
    at_first = git.git_tree(str(tmp_path / "repo"), first, dirs)
    at_main = git.git_tree(str(tmp_path / "repo"), "main", dirs)
    assert at_first.path != at_main.path and at_first.commit == first != at_main.commit
    assert (at_first.path / "tool.c").read_text() == "int main(void) { return 0; }\n"  # untouched by main's checkout
    assert (at_main.path / "tool.c").read_text() == "int main(void) { return 2; }\n"
    assert git.git_tree(str(tmp_path / "repo"), first, dirs).path == at_first.path


def test_eight_refreshes_and_a_remove_at_once_keep_one_valid_inventory(tmp_env):
    from concurrent.futures import ThreadPoolExecutor

    dirs = dirs_of(tmp_env)
    for number in range(4):
        tool = fake_build(dirs, f"cpu-0000000{number}") / "bin" / "llama-cli"
        tool.write_text('#!/bin/sh\nprintf "Available devices:\\n  (none)\\n"\n')
    with ThreadPoolExecutor(9) as pool:
        refreshes = [pool.submit(buildmgr, tmp_env, "devices", "--refresh", "--json") for _ in range(8)]
        removal = pool.submit(buildmgr, tmp_env, "remove", "cpu-00000003")
        results = [f.result() for f in refreshes] + [removal.result()]
    assert [r.returncode for r in results] == [0] * 9, [r.stderr for r in results if r.returncode]
    [path] = (dirs.inventory).glob("*.json")
    data = json.loads(path.read_text())
    assert set(data["builds"]) <= {f"cpu-0000000{n}" for n in range(4)}
    assert {f"cpu-0000000{n}" for n in range(3)} <= set(data["builds"])  # none of the remaining builds was lost
    final = json.loads(buildmgr(tmp_env, "devices", "--json").stdout)
    assert set(final["builds"]) == {f"cpu-0000000{n}" for n in range(3)}
