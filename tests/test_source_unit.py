import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from buildmgr.building.source.tree import parse_source_spec, read_llama_version
from buildmgr.core.errors import UserError
from buildmgr.core.extract import safe_extract

TOP = "llama_cpp_python-0.3.36"


def make_tar(path: Path, entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
            else:
                name, data = entry
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def link(name: str, target: str, hard: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info


GOOD = [
    (f"{TOP}/setup.py", b"x"),
    (f"{TOP}/vendor/llama.cpp/CMakeLists.txt", b'project("llama.cpp")'),
    (f"{TOP}/vendor/llama.cpp/.git", b"gitdir: ../../.git/modules/vendor/llama.cpp"),
    (f"{TOP}/vendor/llama.cpp/src/llama.cpp", b"int x;"),
]


def test_extracts_only_the_subdir_and_drops_the_gitdir_pointer(tmp_path: Path):
    archive = make_tar(tmp_path / "a.tar.gz", [*GOOD, link(f"{TOP}/vendor/llama.cpp/src/alias.cpp", "llama.cpp")])
    safe_extract(archive, "vendor/llama.cpp", tmp_path / "out")
    files = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    assert files == ["CMakeLists.txt", "src", "src/alias.cpp", "src/llama.cpp"]
    assert (tmp_path / "out" / "src" / "alias.cpp").read_text() == "int x;"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ((f"{TOP}/vendor/llama.cpp/../../../evil", b"x"), "'..' in path"),
        (("/etc/evil", b"x"), "absolute path"),
        (link(f"{TOP}/vendor/llama.cpp/up", "../../../../etc/passwd"), "leaves the tree"),
        (link(f"{TOP}/vendor/llama.cpp/abs", "/etc/passwd"), "absolute link"),
        (link(f"{TOP}/vendor/llama.cpp/sibling", "../../setup.py"), "leaves the tree"),
        (link(f"{TOP}/vendor/llama.cpp/hard", f"{TOP}/setup.py", hard=True), "hard link"),
    ],
)
def test_unsafe_entries_are_refused_before_anything_is_written(tmp_path: Path, entry, reason):
    archive = make_tar(tmp_path / "a.tar.gz", [*GOOD, entry])
    with pytest.raises(UserError, match=reason):
        safe_extract(archive, "vendor/llama.cpp", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "evil").exists()


def test_archive_without_the_subdir_is_refused(tmp_path: Path):
    archive = make_tar(tmp_path / "a.tar.gz", [(f"{TOP}/setup.py", b"x")])
    with pytest.raises(UserError, match=re.escape("has no vendor/llama.cpp/")):
        safe_extract(archive, "vendor/llama.cpp", tmp_path / "out")


def test_not_a_tar_is_refused(tmp_path: Path):
    bogus = tmp_path / "a.tar.gz"
    bogus.write_bytes(b"not a tar")
    with pytest.raises(UserError, match="not a readable tar archive"):
        safe_extract(bogus, "vendor/llama.cpp", tmp_path / "out")


def test_source_spec(tmp_path: Path):
    assert parse_source_spec(None).kind == "pinned"
    assert parse_source_spec(str(tmp_path)).kind == "path"
    spec = parse_source_spec("https://github.com/ggml-org/llama.cpp@b6000")
    assert (spec.kind, spec.location, spec.ref) == ("git", "https://github.com/ggml-org/llama.cpp", "b6000")
    spec = parse_source_spec("git@github.com:ggml-org/llama.cpp.git@master")
    assert (spec.location, spec.ref) == ("git@github.com:ggml-org/llama.cpp.git", "master")
    assert parse_source_spec(f"{tmp_path}@main").kind == "git"
    for bad in ("/no/such/dir", "git@github.com:ggml-org/llama.cpp.git", "https://x/y@"):
        with pytest.raises(UserError, match="neither an existing directory nor a git URL@REF"):
            parse_source_spec(bad)


def test_read_llama_version(tmp_path: Path):
    with pytest.raises(UserError, match=re.escape("not a llama.cpp source tree")):
        read_llama_version(tmp_path)
    (tmp_path / "ggml").mkdir()
    (tmp_path / "ggml" / "CMakeLists.txt").write_text("")
    (tmp_path / "CMakeLists.txt").write_text(
        'project("llama.cpp" C CXX)\nset(LLAMA_VERSION_MAJOR 0)\nset(LLAMA_VERSION_MINOR 5)\nset(LLAMA_VERSION_PATCH 1)\n'
    )
    assert read_llama_version(tmp_path) == "0.5.1"


def test_a_git_checkout_gives_upstreams_build_number_and_a_dirty_tree_says_so(tmp_path: Path):
    from conftest import write_fake_tree

    from buildmgr.building.source.checkout import local_tree
    from buildmgr.building.source.tree import build_label

    root = write_fake_tree(tmp_path / "llama.cpp", "int main(void) { return 0; }\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for message in ("one", "two"):
        (root / "tool.c").write_text(f"/* {message} */ int main(void) {{ return 0; }}\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", message], check=True)
    tree = local_tree(root)
    assert (tree.build_number, tree.state, tree.fingerprint) == (2, "clean", tree.commit)
    assert isinstance(tree.commit_time, int)
    assert build_label(tree.build_number, tree.state, tree.commit, tree.fingerprint) == "b2"
    (root / "tool.c").write_text("int main(void) { return 1; }\n")
    dirty = local_tree(root)
    assert dirty.state == "dirty" and dirty.fingerprint != dirty.commit
    assert build_label(dirty.build_number, dirty.state, dirty.commit, dirty.fingerprint).startswith("local-")
    shutil.rmtree(root / ".git")
    untracked = local_tree(root)
    assert (untracked.commit, untracked.build_number, untracked.state) == (None, 0, "untracked")
