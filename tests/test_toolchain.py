"""Toolchain detection runs every tool once; later, while no program changed, it runs none."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from buildmgr.tools import toolchain


def refuse_programs(monkeypatch) -> None:
    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"started {args!r}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def test_a_remembered_toolchain_starts_no_program(tmp_path, monkeypatch):
    cache = tmp_path / "toolchain.json"
    found = toolchain.detect(os.environ, cache)
    assert found.cmake.found and found.cc.found
    toolchain.remember(found, cache)
    refuse_programs(monkeypatch)
    assert toolchain.detect(os.environ, cache) == found


def test_a_changed_compiler_is_detected_again(tmp_path, monkeypatch):
    fake_cc = tmp_path / "bin" / "fake-cc"
    fake_cc.parent.mkdir()
    fake_cc.write_text("#!/bin/sh\necho 'fake-cc 1.0'\n")
    fake_cc.chmod(fake_cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(fake_cc))
    cache = tmp_path / "toolchain.json"
    first = toolchain.detect(os.environ, cache)
    assert first.cc.version == "fake-cc 1.0"
    toolchain.remember(first, cache)

    fake_cc.write_text("#!/bin/sh\necho 'fake-cc 2.0 (upgraded)'\n")
    os.utime(fake_cc, ns=(0, fake_cc.stat().st_mtime_ns + 10**9))
    assert toolchain.detect(os.environ, cache).cc.version == "fake-cc 2.0 (upgraded)"


@pytest.mark.parametrize("content", ["", "{not json", '{"fingerprint": "x", "tools": {}}', "[]"])
def test_an_unreadable_or_stale_cache_means_detecting_again(tmp_path, monkeypatch, content):
    cache = tmp_path / "toolchain.json"
    cache.write_text(content)
    started = []
    real_init = subprocess.Popen.__init__

    def counting(self, args, *rest, **kwargs):
        started.append(args)
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", counting)
    found = toolchain.detect(os.environ, cache)
    assert started, "the bad cache was trusted: no program was asked for its version"
    assert found.cmake.found and found.cmake.version


def test_no_cache_file_is_written_by_detect(tmp_path):
    toolchain.detect(os.environ, tmp_path / "toolchain.json")
    assert list(Path(tmp_path).iterdir()) == []


def test_compilers_are_found_on_the_path_of_the_environment_given(tmp_path):
    """The environment a command was given decides which `cc` is found and what it sees, not this process's own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cc").write_text('#!/bin/sh\necho "given-cc $MARK"\n')
    (bin_dir / "cc").chmod(0o755)
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MARK": "seen"}
    found = toolchain.detect(environ)
    assert (found.cc.path, found.cc.version) == (str(bin_dir / "cc"), "given-cc seen")
    assert toolchain.detect({"PATH": str(tmp_path / "nothing")}).cc.found is False
    assert toolchain.problems(found, ("cc",), environ) == []
