"""The shader cache with the real glslc: what it serves must be what glslc writes, and any change of an included file,
a flag or glslc itself must compile again."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from buildmgr.backends.vulkan import glslc_cache

GLSLC = shutil.which("glslc") or shutil.which("glslc", path=os.path.join(os.environ.get("VULKAN_SDK", "/usr"), "bin"))
needs_glslc = pytest.mark.skipif(GLSLC is None, reason="needs glslc (apt-get install glslc)")

MAIN = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "types.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) buffer Out { VALUE_TYPE data[]; };
void main() { data[gl_GlobalInvocationID.x] = VALUE_TYPE(SCALE); }
"""


@pytest.mark.parametrize(
    ("args", "parsed"),
    [
        (
            ["-fshader-stage=compute", "a.comp", "-o", "a.spv", "-O"],
            (["-fshader-stage=compute", "-O"], "a.comp", "a.spv", None),
        ),
        (["a.comp", "-o", "-"], None),  # to stdout, as CMake's feature probes call it
        (["a.comp", "-o", "a.spv", "-MD", "-MF", "a.d"], ([], "a.comp", "a.spv", "a.d")),
        (["a.comp", "-o", "a.spv", "-MD"], None),  # glslc's own depfile name
        (["a.comp", "b.comp", "-o", "a.spv"], None),
        (["-I", "inc", "a.comp", "-o", "a.spv"], None),
        (["a.comp"], None),
    ],
)
def test_which_calls_are_cached(args, parsed):
    assert glslc_cache.parse(args) == parsed


def shaders(directory: Path, include: str = "#define VALUE_TYPE float\n") -> Path:
    directory.mkdir(parents=True)
    (directory / "types.glsl").write_text(include)
    (directory / "main.comp").write_text(MAIN)
    return directory / "main.comp"


def compile_through(launcher: Path, shader: Path, output: Path, statslog: Path, *defines: str):
    env = dict(os.environ) | {glslc_cache.STATSLOG_ENV: str(statslog)}
    command = [str(launcher), "-fshader-stage=compute", "--target-env=vulkan1.2", str(shader), "-o", str(output)]
    return subprocess.run([*command, "-O", *defines], env=env, capture_output=True, text=True, check=False)


def words(statslog: Path) -> list[str]:
    return statslog.read_text().split() if statslog.exists() else []


@needs_glslc
def test_a_hit_is_glslcs_own_output_and_any_input_change_compiles_again(tmp_path):
    cache, statslog = tmp_path / "cache", tmp_path / "stats"
    launcher = glslc_cache.launcher(tmp_path / "tree-a", GLSLC, cache)
    shader = shaders(tmp_path / "tree-a" / "src")
    direct = tmp_path / "direct.spv"
    command = [GLSLC, "-fshader-stage=compute", "--target-env=vulkan1.2", str(shader), "-o", str(direct), "-O"]
    subprocess.run([*command, "-DSCALE=2"], check=True)

    first = compile_through(launcher, shader, tmp_path / "1.spv", statslog, "-DSCALE=2")
    assert first.returncode == 0, first.stderr
    other_tree = shaders(tmp_path / "tree-b" / "src")  # the same sources at another path: a fresh build tree
    second = compile_through(launcher, other_tree, tmp_path / "2.spv", statslog, "-DSCALE=2")
    assert second.returncode == 0, second.stderr
    assert words(statslog) == ["miss", "hit"]
    assert (tmp_path / "1.spv").read_bytes() == (tmp_path / "2.spv").read_bytes() == direct.read_bytes()

    compile_through(launcher, shader, tmp_path / "3.spv", statslog, "-DSCALE=3")  # another define
    (shader.parent / "types.glsl").write_text("#define VALUE_TYPE int\n")  # an included file changed
    compile_through(launcher, shader, tmp_path / "4.spv", statslog, "-DSCALE=2")
    assert words(statslog)[2:] == ["miss", "miss"]
    assert (tmp_path / "4.spv").read_bytes() != direct.read_bytes()


@needs_glslc
@pytest.mark.parametrize(
    ("include", "failed", "message"),
    [
        ("#define VALUE_TYPE not_a_type\n", True, "main.comp:5: error"),  # glslc's own message, passed through
        ("#define VALUE_TYPE float\n#extension GL_EXT_no_such_thing : warn\n", False, "warning"),
    ],
    ids=["error", "warning"],
)
def test_a_compile_that_fails_or_warns_shows_glslcs_message_and_is_not_stored(tmp_path, include, failed, message):
    """A warning is kept out of the cache too, so that it is shown again next time."""
    cache, statslog = tmp_path / "cache", tmp_path / "stats"
    launcher = glslc_cache.launcher(tmp_path / "tree", GLSLC, cache)
    shader = shaders(tmp_path / "src", include=include)
    for _ in range(2):
        result = compile_through(launcher, shader, tmp_path / "out.spv", statslog, "-DSCALE=2")
        assert (result.returncode != 0) == failed and message in result.stderr, result.stderr
        if not failed:
            assert (tmp_path / "out.spv").read_bytes()[:4] == b"\x03\x02\x23\x07"  # SPIR-V's magic
    assert words(statslog) == ["miss", "miss"]
    assert not any(path.is_file() for path in cache.rglob("*"))


@needs_glslc
def test_a_call_it_does_not_cache_is_glslc_itself(tmp_path):
    """`-o -` (CMake's probes) runs glslc in the launcher's place: the same bytes on stdout, the same exit status."""
    statslog = tmp_path / "stats"
    launcher = glslc_cache.launcher(tmp_path / "tree", GLSLC, tmp_path / "cache")
    shader = shaders(tmp_path / "src")
    args = ["-fshader-stage=compute", "--target-env=vulkan1.2", str(shader), "-o", "-", "-DSCALE=2"]
    env = dict(os.environ) | {glslc_cache.STATSLOG_ENV: str(statslog)}
    through = subprocess.run([str(launcher), *args], env=env, capture_output=True, check=False)
    direct = subprocess.run([GLSLC, *args], capture_output=True, check=False)
    assert through.returncode == direct.returncode == 0
    assert through.stdout == direct.stdout and through.stdout.startswith(b"\x03\x02\x23\x07")  # SPIR-V's magic
    failed = subprocess.run([str(launcher), *args[:-1]], env=env, capture_output=True, check=False)  # SCALE undefined
    assert failed.returncode == subprocess.run([GLSLC, *args[:-1]], capture_output=True, check=False).returncode != 0
    assert words(statslog) == ["direct", "direct"]


@needs_glslc
def test_a_hit_writes_the_depfile_that_glslc_wrote(tmp_path):
    """vulkan-shaders-gen asks for a depfile on one variant per shader and ninja reads it: a hit must write it too."""
    statslog = tmp_path / "stats"
    launcher = glslc_cache.launcher(tmp_path / "tree", GLSLC, tmp_path / "cache")
    shader = shaders(tmp_path / "src")
    depfiles = []
    for run in ("1", "2"):
        output, depfile = tmp_path / f"{run}.spv", tmp_path / f"{run}.d"
        result = compile_through(launcher, shader, output, statslog, "-DSCALE=2", "-MD", "-MF", str(depfile))
        assert result.returncode == 0, result.stderr
        target, _, deps = depfile.read_text().partition(":")
        depfiles.append((target, sorted(Path(d).resolve() for d in deps.split())))
        assert target == str(output)
    assert words(statslog) == ["miss", "hit"]
    assert depfiles[0][1] == depfiles[1][1] == sorted([shader.resolve(), (shader.parent / "types.glsl").resolve()])


def test_gc_prunes_only_shaders_unused_for_30_days(tmp_path):
    from buildmgr.core.config import Dirs
    from buildmgr.store import gc

    dirs = Dirs(tmp_path / "data", tmp_path / "cache", tmp_path / "config")
    old, recent = dirs.shader_cache / "ab" / ("ab" + "0" * 62), dirs.shader_cache / "cd" / ("cd" + "0" * 62)
    for entry in (old, recent):
        entry.parent.mkdir(parents=True)
        entry.write_bytes(b"spirv")
    month_ago = old.stat().st_mtime - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    assert [item.path for item in gc(dirs)] == [old]
    assert not old.exists() and recent.read_bytes() == b"spirv"


def test_buildmgr_shader_cache_moves_the_cache_that_builds_use_and_gc_prunes(tmp_path):
    """BUILDMGR_SHADER_CACHE is read like CCACHE_DIR: the cache lives there, not under <cache>."""
    from conftest import buildmgr, make_env

    moved = tmp_path / "shaders"
    env = make_env(tmp_path) | {"BUILDMGR_SHADER_CACHE": str(moved)}
    old, beside = moved / "ab" / ("ab" + "0" * 62), tmp_path / "cache" / "buildmgr" / "shader-cache" / "ab" / "x"
    for entry in (old, beside):
        entry.parent.mkdir(parents=True)
        entry.write_bytes(b"spirv")
        os.utime(entry, (time.time() - 31 * 86400,) * 2)
    collected = buildmgr(env, "gc")
    assert collected.returncode == 0, collected.stderr
    assert not old.exists() and beside.exists()


def test_the_launcher_outlives_the_buildmgr_that_wrote_it(tmp_path):
    """A pip upgrade (or a re-synced checkout) replaces buildmgr's files while a build runs: the launcher must not
    import from there. Seen on the H200 machine: a re-synced tree failed every shader compiled meanwhile."""
    import importlib.util

    package = tmp_path / "site" / "glslc_cache.py"
    package.parent.mkdir()
    shutil.copy(glslc_cache.__file__, package)
    spec = importlib.util.spec_from_file_location("glslc_cache_elsewhere", package)
    elsewhere = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(elsewhere)
    fake_glslc = tmp_path / "glslc"
    fake_glslc.write_text('#!/bin/sh\necho "glslc $*"\n')
    fake_glslc.chmod(0o755)
    launcher = elsewhere.launcher(tmp_path / "tree", str(fake_glslc), tmp_path / "cache")
    shutil.rmtree(package.parent)
    ran = subprocess.run([str(launcher), "a.comp", "-o", "-"], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, "glslc a.comp -o -\n"), ran.stderr
