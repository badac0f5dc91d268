"""Issue #68: llama.cpp's RPC backend, served from a build (`buildmgr rpc serve`), with real processes only: a build
of the pinned source with the RPC backend, its own ggml-rpc-server on loopback, and its own llama-bench as the
client another host would run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_user_error, buildmgr, free_port, make_env, user_recipe

# The shipped rpc recipe with llama-bench as its one tool beside the server: the client these tests run
RPC_BENCH_ONLY = """
description = "the RPC backend and ggml-rpc-server, llama-bench as the client"
backends = ["CPU", "RPC"]
targets = ["llama-bench", "ggml-rpc-server"]
tools = ["cc", "c++"]

[defines]
GGML_RPC = "ON"
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("rpc")
    user_recipe(home, "rpc", RPC_BENCH_ONLY)  # a user recipe of a shipped name overrides it
    return home


@pytest.fixture(scope="module")
def built(home) -> dict:
    result = buildmgr(make_env(home), "build", "rpc", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _serve(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "buildmgr", "rpc", "serve", *args],
        env=make_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").is_dir() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.configure
def test_a_recipe_target_this_llama_cpp_lacks_is_named_before_compiling(tmp_path):
    """The shipped rpc recipe named rpc-server, a target the pinned llama.cpp calls ggml-rpc-server: ninja would
    have stopped at it after configure; the proof names it, and the nearest target, before any compile."""
    user_recipe(tmp_path, "oldrpc", RPC_BENCH_ONLY.replace('"ggml-rpc-server"', '"rpc-server"'))
    result = buildmgr(make_env(tmp_path), "build", "oldrpc", "--configure-only")
    assert result.returncode == 1, result.stderr[-2000:]
    assert "rpc-server is not a target of this llama.cpp (did you mean ggml-rpc-server?)" in result.stderr
    shipped = buildmgr(make_env(tmp_path), "build", "rpc", "--configure-only", "--json")
    assert shipped.returncode == 0, shipped.stderr[-2000:]
    assert "ggml-rpc-server" in json.loads(shipped.stdout)["targets"]


@pytest.mark.compile
def test_serve_reports_what_it_exposes_a_client_uses_it_and_it_stops_cleanly(home, built):
    """The report is the server's own (its device list and protocol), the protocol the build's header declares; the
    build's llama-bench on the client's side lists the remote device as llama.cpp names it; SIGTERM stops it."""
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    try:
        assert serving.stdout is not None
        report = json.loads(serving.stdout.readline())
        header = Path(built["prefix"]) / "include" / "ggml-rpc.h"
        declared = {words[1]: words[2] for line in header.read_text().splitlines() if len(words := line.split()) == 3}
        assert report["protocol"] == ".".join(
            declared[f"RPC_PROTO_{part}_VERSION"] for part in ("MAJOR", "MINOR", "PATCH")
        )
        assert report["endpoint"] == f"127.0.0.1:{port}" and report["build"] == built["id"]
        assert [d["name"] for d in report["devices"]] == ["CPU"] and report["devices"][0]["memory_total_mib"] > 0
        assert _alive(report["pid"]) and not report["network"]

        client = subprocess.run(
            [str(Path(built["prefix"]) / "bin" / "llama-bench"), "--rpc", report["endpoint"], "--list-devices"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, client.stderr
        remote = [line for line in client.stdout.splitlines() if line.strip().startswith("RPC0:")]
        assert remote and f"127.0.0.1:{port}" in remote[0], client.stdout
        serving.send_signal(signal.SIGTERM)
        _, stderr = serving.communicate(timeout=30)
    finally:
        if serving.poll() is None:
            serving.kill()
    assert serving.returncode == 0, stderr
    accepted = Path(report["log"]).read_text().count("Accepted client connection")
    # every client said, the readiness check's own connection not
    assert stderr.count("a client connected") == accepted - 1 >= 1, stderr
    assert not _alive(report["pid"]) and not _listens(port)


@pytest.mark.compile
def test_a_server_killed_while_serving_is_one_error_with_its_log(home, built):
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    try:
        assert serving.stdout is not None
        report = json.loads(serving.stdout.readline())
        os.kill(report["pid"], signal.SIGKILL)
        _, stderr = serving.communicate(timeout=30)
    finally:
        if serving.poll() is None:
            serving.kill()
    assert serving.returncode == 1
    assert "ggml-rpc-server exited with code -9 while serving" in stderr and "Traceback" not in stderr
    assert f"full log: {report['log']}" in stderr and Path(report["log"]).is_file()


@pytest.mark.compile
def test_a_port_in_use_a_device_it_lacks_and_an_open_bind_are_refused(home, built):
    env = make_env(home)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_user_error(
            buildmgr(env, "rpc", "serve", "rpc", "--port", str(port)), f"port {port} on 127.0.0.1 is in use"
        )
    assert_user_error(
        buildmgr(env, "rpc", "serve", "rpc", "--bind", "192.0.2.1", "--port", str(free_port())),
        "not loopback",
        "--allow-network",
        "ssh -N -L",
    )
    every = buildmgr(env, "rpc", "serve", "rpc", "--bind", "0.0.0.0", "--allow-network", "--port", str(free_port()))
    assert_user_error(every, "every network of this host")
    assert_user_error(buildmgr(env, "rpc", "serve", "rpc", "--bind", "localhost"), "not an IPv4 address")
    lacking = buildmgr(env, "rpc", "serve", "rpc", "--device", "Vulkan9", "--port", str(free_port()))
    assert lacking.returncode == 1, lacking.stderr
    assert "it has no device 'Vulkan9' here (it has: CPU)" in lacking.stderr


def test_a_build_without_the_rpc_backend_is_refused_with_the_recipe_to_build(tmp_path):
    from conftest import make_receipt

    from buildmgr import store

    prefix = tmp_path / "data" / "buildmgr" / "builds" / "0.5.0-0c1e570" / "cpu-0123abcd"
    (prefix / "bin").mkdir(parents=True)
    store.write_receipt(prefix, make_receipt("cpu-0123abcd"))
    assert_user_error(buildmgr(make_env(tmp_path), "rpc", "serve", "cpu"), "has no RPC backend", "cpu+rpc")


@pytest.mark.compile
def test_devices_with_rpc_names_the_remote_device_as_llama_cpp_does_and_stores_nothing(home, built):
    """Each build with the RPC backend is probed with the server added as its tools' --rpc adds it: the remote
    device is RPC0, described by its endpoint, with the memory the server's own device reported."""
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    try:
        assert serving.stdout is not None
        report = json.loads(serving.stdout.readline())
        result = buildmgr(make_env(home), "devices", "--rpc", report["endpoint"], "--json")
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=30)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    probe = shown["builds"][built["id"]]["probe"]
    remote = [d for d in probe["devices"] if d["backend"] == "RPC"]
    assert [(d["name"], d["description"]) for d in remote] == [("RPC0", f"127.0.0.1:{port}")]
    assert remote[0]["memory_total_mib"] == report["devices"][0]["memory_total_mib"]
    assert remote[0]["type"] == "remote"
    assert not (home / "data" / "buildmgr" / "inventory").exists() or all(
        "RPC0" not in p.read_text() for p in (home / "data" / "buildmgr" / "inventory").glob("*.json")
    )


@pytest.mark.compile
def test_a_server_that_is_down_or_a_malformed_endpoint_is_one_line_never_a_hang(home, built):
    env = make_env(home, BUILDMGR_NETWORK_TIMEOUT="5")
    port = free_port()  # nothing listens on it
    down = buildmgr(env, "devices", "--rpc", f"127.0.0.1:{port}", timeout=120)
    assert down.returncode == 1, down.stderr
    assert f"cannot reach 127.0.0.1:{port}: nothing listens there (connection refused)" in down.stderr
    assert "Traceback" not in down.stderr
    assert_user_error(buildmgr(env, "devices", "--rpc", "127.0.0.1"), "is not HOST:PORT")
    assert_user_error(buildmgr(env, "devices", "--rpc", "a:1,a:1"), "names a:1 twice")


@pytest.mark.compile
def test_check_places_on_a_remote_device_and_verify_runs_it_there(home, built):
    """`check` reads --rpc as llama.cpp does: the server's device is RPC0 in -dev; a name the servers do not give is
    refused; --verify runs llama-bench with the same placement, the server's device doing the work."""
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    env = make_env(home)
    try:
        assert serving.stdout is not None
        endpoint = json.loads(serving.stdout.readline())["endpoint"]
        placed = buildmgr(
            env, "check", "rpc", "--verify", "--json", "--", "llama-bench", "-rpc", endpoint, "-dev", "RPC0"
        )
        unknown = buildmgr(env, "check", "rpc", "--json", "--", "llama-bench", "-rpc", endpoint, "-dev", "RPC1")
    finally:
        serving.send_signal(signal.SIGTERM)
        _, served = serving.communicate(timeout=30)
    assert placed.returncode == 0, placed.stdout + placed.stderr
    [test] = json.loads(placed.stdout)["tests"]
    assert test["placement"]["devices"] == ["RPC0"] and test["placement"]["servers"] == [endpoint]
    assert test["verify"]["agreement"], test["verify"]
    assert served.count("a client connected") >= 2, served  # the probe's client, then verify's llama-bench
    assert unknown.returncode == 1, unknown.stdout + unknown.stderr
    assert "RPC1" in unknown.stdout


@pytest.mark.compile
def test_check_of_a_server_that_is_down_is_one_line(home, built):
    env = make_env(home, BUILDMGR_NETWORK_TIMEOUT="5")
    port = free_port()
    result = buildmgr(env, "check", "rpc", "--", "llama-bench", "-rpc", f"127.0.0.1:{port}", "-dev", "RPC0")
    assert result.returncode == 1, result.stderr
    assert f"cannot reach 127.0.0.1:{port}: nothing listens there" in result.stderr and "Traceback" not in result.stderr


def test_check_of_rpc_on_a_build_without_the_backend_is_refused_before_any_connection(tmp_path):
    from conftest import make_receipt

    from buildmgr import store

    prefix = tmp_path / "data" / "buildmgr" / "builds" / "0.5.0-0c1e570" / "cpu-0123abcd"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "llama-bench").write_text("#!/bin/sh\nexit 1\n")
    store.write_receipt(prefix, make_receipt("cpu-0123abcd"))
    with socket.socket() as listening:  # a server that would take the connection: none is made
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        endpoint = f"127.0.0.1:{listening.getsockname()[1]}"
        result = buildmgr(make_env(tmp_path), "check", "cpu", "--", "llama-bench", "-rpc", endpoint, "-dev", "RPC0")
        listening.settimeout(0.1)
        with pytest.raises(TimeoutError):
            listening.accept()
    assert_user_error(result, "has no RPC backend", "RPC not supported in this build", "+rpc")


@pytest.mark.compile
def test_the_server_ends_with_buildmgr_even_when_buildmgr_is_killed(home, built):
    """SIGKILL runs none of buildmgr's clean-up: the server, in its own session, ends by the SIGHUP of its controlling
    terminal (the pty buildmgr held) rather than stay an open, unauthenticated port."""
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    assert serving.stdout is not None
    report = json.loads(serving.stdout.readline())
    serving.kill()
    serving.communicate(timeout=30)
    for _ in range(100):
        if not _alive(report["pid"]):
            break
        time.sleep(0.1)
    assert not _alive(report["pid"]) and not _listens(port)


@pytest.mark.compile
def test_bench_runs_a_config_on_a_remote_device_beside_a_local_one(home, built):
    """A CONFIG may name the servers (--rpc) and their devices: its llama-bench gets --rpc before -dev, runs on the
    server (its connections in the server's log), and gets a row beside the in-process CONFIG's; a remote device's
    engines are not read here, so its row says so rather than claim it worked."""
    from buildmgr.proof.models import tiny_model

    env = make_env(home)
    model = tiny_model(home / "cache" / "buildmgr")
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    try:
        assert serving.stdout is not None
        report = json.loads(serving.stdout.readline())
        before = Path(report["log"]).read_text().count("Accepted client connection")
        result = buildmgr(
            env, "bench", "-m", str(model), "-p", "16", "-n", "4", "--depth", "0", "--no-pg", "--runs", "1",
            "--allow-busy", "--json", "local=rpc -dev none", f"remote=rpc --rpc {report['endpoint']} -dev RPC0 -fa off",
        )  # fmt: skip
        after = Path(report["log"]).read_text().count("Accepted client connection")
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=30)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    rows = json.loads(result.stdout)["rows"]
    remote = [r for r in rows if r["buildmgr"]["config"] == "remote"]
    assert remote and all(r["avg_ts"] > 0 for r in remote), rows
    assert remote[0]["buildmgr"]["flags"].startswith(f"--rpc {report['endpoint']} -dev RPC0"), remote[0]["buildmgr"]
    assert {r["buildmgr"]["config"] for r in rows} == {"local", "remote"}
    assert after > before  # its processes were the server's clients
    # no engine of the server's device is read from here: the row says so, and claims no work
    assert remote[0]["buildmgr"]["validity"] == "unproven", remote[0]["buildmgr"]
    assert any(e.startswith("RPC0: not readable") for e in remote[0]["buildmgr"]["evidence"])


@pytest.mark.compile
def test_a_fleet_file_names_what_stands_behind_each_remote_device_and_refuses_another_protocol(home, built, tmp_path):
    """What `rpc serve --json` printed, kept as the fleet file: `devices --fleet` names RPC0 as the server's own device
    with its build and protocol; a server said to speak another protocol is refused before anything connects."""
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    env = make_env(home)
    try:
        assert serving.stdout is not None
        line = serving.stdout.readline()
        report = json.loads(line)
        (tmp_path / "fleet.jsonl").write_text(line)
        shown = buildmgr(env, "devices", "--fleet", str(tmp_path / "fleet.jsonl"), "--json")
        older = dict(report, protocol="6.4.0")
        (tmp_path / "older.jsonl").write_text(json.dumps(older) + "\n")
        before = Path(report["log"]).read_text().count("Accepted client connection")
        refused = buildmgr(env, "devices", "--fleet", str(tmp_path / "older.jsonl"))
        after = Path(report["log"]).read_text().count("Accepted client connection")
        (tmp_path / "bad.jsonl").write_text('{"endpoint": "127.0.0.1:1"}\n')
        malformed = buildmgr(env, "devices", "--fleet", str(tmp_path / "bad.jsonl"))
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=30)
    assert shown.returncode == 0, shown.stderr
    cpu = report["devices"][0]
    assert (
        f"RPC0 is CPU of {report['endpoint']}: {cpu['description']} (CPU, build {built['id']}, protocol "
        f"{report['protocol']})"
    ) in json.loads(shown.stdout)["notes"]
    assert refused.returncode == 1, refused.stderr
    assert (
        f"{report['endpoint']} (build {built['id']}) speaks protocol 6.4.0, {built['id']} here {report['protocol']}"
        in refused.stderr
    )
    assert after == before  # refused before any connection
    assert_user_error(malformed, "bad.jsonl:1", "rpc serve --json")


@pytest.mark.compile
def test_ping_measures_the_link_through_llama_cpp_s_own_client_and_keeps_every_sample(home, built):
    """Round trips and a tensor written to the server and read back, by the build's ggml in a child: the server saw
    the client (its log), every sample is kept, and the medians lie inside them."""
    port = free_port()
    serving = _serve(home, "rpc", "--port", str(port), "--json")
    env = make_env(home)
    try:
        assert serving.stdout is not None
        report = json.loads(serving.stdout.readline())
        before = Path(report["log"]).read_text().count("Accepted client connection")
        pinged = buildmgr(env, "rpc", "ping", "rpc", report["endpoint"], "--size", "8", "--json")
        after = Path(report["log"]).read_text().count("Accepted client connection")
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=30)
    assert pinged.returncode == 0, pinged.stderr
    link = json.loads(pinged.stdout)
    assert after > before and link["bytes"] == 8 << 20  # the server's clients: the client's queries before its buffer
    samples = link["samples"]
    assert len(samples["round_trips_s"]) == 200 and len(samples["upload_s"]) == len(samples["download_s"]) == 5
    trip = link["round_trip_ms"]
    assert 0 < trip["min"] <= trip["median"] <= trip["max"]
    assert min(samples["round_trips_s"]) * 1e3 == pytest.approx(trip["min"], abs=1e-4)
    down = buildmgr(make_env(home, BUILDMGR_NETWORK_TIMEOUT="5"), "rpc", "ping", "rpc", f"127.0.0.1:{free_port()}")
    assert down.returncode == 1 and "nothing listens there" in down.stderr and "Traceback" not in down.stderr
    assert_user_error(buildmgr(env, "rpc", "ping", "rpc"), "ping needs the server")
