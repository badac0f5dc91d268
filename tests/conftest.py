from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nethosts import test_host  # noqa: F401  (a fixture: a host of its own in a network namespace)

# One compile cache for every run of the suite on this machine: repeated runs are fast,
# and the first run on a fresh machine proves the cold path.
TEST_CCACHE = Path(os.environ.get("BUILDMGR_TEST_CCACHE", Path.home() / ".cache" / "buildmgr-tests" / "ccache"))
# and one shader cache beside it, for the same reason: glslc's 1,100 runs are most of a Vulkan build with warm ccache
TEST_SHADERS = TEST_CCACHE.parent / "shader-cache"
# and Mesa's own cache of the pipelines lavapipe compiled with LLVM (keyed by their SPIR-V and the driver): an empty one
# in each test's XDG_CACHE_HOME cost ~170 s of every fresh data dir's first Vulkan run; the pipelines still run
TEST_MESA_CACHE = TEST_CCACHE.parent / "mesa-shader-cache"


COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def receipt_json(build_id: str = "cpu-0123abcd", *, recipe=None, source=None, host=None, runtime=None, **top) -> dict:
    """A receipt of the shape buildmgr writes, for tests that need one without building; nested parts merge."""
    import platform

    from buildmgr.store.receipt import SCHEMA

    return {
        "schema": SCHEMA,
        "id": build_id,
        "buildmgr": "0.1.0",
        "recipe": {
            "name": build_id.rsplit("-", 1)[0],
            "description": "",
            "backends": ["CPU"],
            "targets": ["llama-cli"],
            "tools": ["llama-cli"],
            "defines": {},
            "resolved_defines": {"GGML_NATIVE": "OFF"},
            "arch": "",
        }
        | (recipe or {}),
        "host_defines": {},
        "backend_versions": {},
        "source": {
            "origin": "pypi:llama-cpp-python==0.3.36",
            "path": "/src",
            "commit": COMMIT,
            "build_number": 11312,
            "llama_version": "0.5.0",
            "fingerprint": COMMIT,
            "state": "pinned",
            "commit_time": 1790812800,
        }
        | (source or {}),
        "toolchain": {},
        "host": {"hostname": "h", "system": "Linux", "os": "Linux-6", "machine": platform.machine(), "cpus": 2}
        | (host or {}),
        "jobs": 2,
        "started": "2026-11-30T00:00:00+00:00",
        "finished": "2026-11-30T00:00:00+00:00",
        "seconds": 1.0,
        "phases": {},
        "ccache": None,
        "shader_cache": None,
        "smoke": {"passed": True, "checks": [], "devices": []},
        "runtime": {
            "elf_files": 0,
            "glibc": None,
            "glibc_file": None,
            "libstdcxx": None,
            "libstdcxx_file": None,
            "needed": {},
            "device_code": {},
        }
        | (runtime or {}),
        "log": "/dev/null",
        "files": {},
    } | top


def make_receipt(build_id: str = "cpu-0123abcd", **parts):
    from buildmgr.store.receipt import Receipt

    return Receipt.from_json(receipt_json(build_id, **parts))


def make_env(root: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XDG_", "CCACHE_", "BUILDMGR_SHADER_CACHE", "MESA_SHADER_CACHE"))
    }
    env.update(
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
        XDG_CONFIG_HOME=str(root / "config"),
        CCACHE_DIR=str(TEST_CCACHE),
        BUILDMGR_SHADER_CACHE=str(TEST_SHADERS),
        MESA_SHADER_CACHE_DIR=str(TEST_MESA_CACHE),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def user_recipe(root: Path, name: str, text: str) -> Path:
    """`<config>/recipes/NAME.toml` of make_env(root), written."""
    path = root / "config" / "buildmgr" / "recipes" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def buildmgr(env: dict[str, str], *args: str, timeout: float = 3000) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "buildmgr", *args],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
        check=False,
    )


def assert_user_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, one line on stderr, no traceback, and the line says what is wrong."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("buildmgr: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# A tool that passes the smoke run: --version, --list-devices, and llama-bench's JSON for the tiny model.
WORKS = r"""
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) { fprintf(stderr, "version: 9 (fake)\n"); return 0; }
        if (!strcmp(argv[i], "--list-devices")) { printf("Available devices:\n  (none)\n"); return 0; }
        if (!strcmp(argv[i], "-m")) { printf("[{\"n_prompt\": 16, \"n_gen\": 0, \"avg_ts\": 1.0, \"devices\": \"none\"}]\n"); return 0; }
    }
    return 0;
}
"""


@pytest.fixture
def tmp_env(tmp_path: Path) -> dict[str, str]:
    return make_env(tmp_path)


# ci/test.sh installs glslc and lavapipe (Mesa's CPU Vulkan driver), and says so
VULKAN_PROVISIONED = pytest.mark.skipif(not os.environ.get("BUILDMGR_TEST_VULKAN"), reason="run ci/test.sh for Vulkan")


@pytest.fixture(scope="session")
def vulkan_toolchain() -> dict:
    """`buildmgr toolchain add vulkan` for real, once a run: the next Debian release's header packages (this Debian 12
    host's own are too old for the pinned llama.cpp), downloaded once and used by every test that needs them. Its
    `--json`, and `root`: the data dirs it was added to, where tests/test_vulkan_build.py builds. The root is one path
    every run, made anew: the headers' path is in every compile's ccache key, and a new one each run missed on
    ggml-vulkan.cpp, the largest object, every time."""
    root = TEST_CCACHE.parent / "vulkan-session"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    added = buildmgr(make_env(root), "toolchain", "add", "vulkan", "--json")
    assert added.returncode == 0, added.stderr[-3000:]
    return json.loads(added.stdout) | {"root": root}


def write_fake_tree(root: Path, tool_source: str) -> Path:
    """A tiny CMake project shaped like llama.cpp (same markers, targets and install rules).

    Used only where a real llama.cpp cannot show the behaviour cheaply: a compile error,
    a tool that does not run.
    """
    (root / "ggml").mkdir(parents=True)
    (root / "ggml" / "CMakeLists.txt").write_text("add_library(ggml-cpu STATIC cpu.c)\n")
    (root / "ggml" / "cpu.c").write_text("int ggml_cpu(void) { return 0; }\n")
    (root / "tool.c").write_text(tool_source)
    (root / "CMakeLists.txt").write_text(
        textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.18)
        project("llama.cpp" C)
        set(LLAMA_VERSION_MAJOR 9)
        set(LLAMA_VERSION_MINOR 8)
        set(LLAMA_VERSION_PATCH 7)
        foreach(opt LLAMA_BUILD_TESTS LLAMA_BUILD_EXAMPLES LLAMA_BUILD_TOOLS LLAMA_BUILD_SERVER GGML_CCACHE GGML_NATIVE)
            option(${opt} "" OFF)
        endforeach()
        add_subdirectory(ggml)
        foreach(tool llama-server llama-cli llama-bench llama-completion llama-fit-params)
            add_executable(${tool} tool.c)
            install(TARGETS ${tool} RUNTIME)
        endforeach()
        """)
    )
    return root


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    """A static file server for the repository tests: silent, and a missing file a 404."""

    def log_message(self, *args: object) -> None:
        pass

    def served(self) -> Path | None:
        """The file the request names, or None once a 404 was sent."""
        path = Path(self.translate_path(self.path))
        if path.is_file():
            return path
        self.send_error(404)
        return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def redis(tmp_path):
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    process = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


def redis_keys(url: str) -> int:
    """How many keys the Redis server at redis://127.0.0.1:PORT holds (DBSIZE over its own protocol)."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"DBSIZE\r\n")
        reply = conn.recv(64)
    assert reply.startswith(b":"), reply
    return int(reply[1:].split(b"\r\n")[0])


def captured(nvidia=(), vulkan=()) -> dict[str, list]:
    """The vendor tools' captures as identity and the inventory take them: per backend name."""
    return {"CUDA": list(nvidia), "Vulkan": list(vulkan)}


class Registry:
    """Debian's docker-registry (the reference OCI distribution server) on 127.0.0.1, its storage under `root`:
    started and stopped by the tests, and stoppable mid-test (a registry that goes away)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.storage = root / "storage"
        self.config = root / "config.yml"
        root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "version: 0.1\nlog:\n  level: error\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def url(self, name: str = "llama/builds") -> str:
        return f"oci://127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        server = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        self.process = subprocess.Popen(
            [server, "serve", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("docker-registry did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def blob_file(self, sha256: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes (to change them behind the registry's back)."""
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / sha256[:2] / sha256 / "data"


@pytest.fixture
def registry(tmp_path):
    server = Registry(tmp_path / "registry")
    yield server
    server.stop()
