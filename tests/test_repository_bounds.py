"""Issue #50, items 3 to 5, against real directory repositories: a download never reads past the size the index
says (a blob linked to /dev/zero, a FIFO, a body longer than the index says); what is signed is what was hashed and
copied, whatever the source file does meanwhile; and a candidate whose bytes fail ends the install, named with why
(never passed over for another: issue #66)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import QuietFiles, buildmgr, make_env
from test_artifacts import fake_build
from test_repository import artifact, downloaded, keyed, nothing_installed, published, the_blob

from buildmgr import store
from buildmgr.artifacts import archive as archives
from buildmgr.artifacts import deliver, index
from buildmgr.artifacts import unpack as unpacking
from buildmgr.artifacts.repo import directory as repos
from buildmgr.artifacts.repo import open_repo
from buildmgr.core.config import Dirs
from buildmgr.core.errors import RepositoryFault
from buildmgr.trust import signing


def dirs_of(env: dict[str, str]) -> Dirs:
    return Dirs(
        Path(env["XDG_DATA_HOME"]) / "buildmgr",
        Path(env["XDG_CACHE_HOME"]) / "buildmgr",
        Path(env["XDG_CONFIG_HOME"]) / "buildmgr",
    )


def written(env: dict[str, str], entry: index.Entry) -> dict[str, int]:
    """Every file under the entry's download folder (its .part included), with its size."""
    folder = deliver.downloads(dirs_of(env)) / entry.sha256
    return {p.name: p.stat().st_size for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


# --- 3. a download stops at the index's size ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo"])
def test_a_blob_that_is_no_regular_file_is_refused_at_once_and_nothing_past_its_size_is_written(tmp_path, kind):
    repo, _, host = published(tmp_path)
    blob = the_blob(repo)
    [held] = open_repo(str(repo)).listing().artifacts
    blob.unlink()
    if kind == "fifo":
        os.mkfifo(blob)  # opened for reading, it waits for a writer for ever
    else:
        blob.symlink_to("/dev/zero")  # read, it never ends
    started = time.monotonic()
    result = buildmgr(host, "install", "--from", str(repo), timeout=60)
    assert time.monotonic() - started < 30
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"cannot read {blob}: it is not a regular file" in result.stderr, result.stderr
    assert nothing_installed(host) and all(size <= held.size for size in written(host, held).values())


class _Longer(QuietFiles):
    """Serves a blob followed by a tail of more bytes than the index says, with no Content-Length: the body ends only
    when the server closes the connection (an endless one never would)."""

    def do_GET(self) -> None:
        path = self.served()
        if path is None:
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(path.read_bytes())
        if path.name.endswith(".tar.gz"):
            for _ in range(64):
                self.wfile.write(b"\0" * (1 << 20))
        self.close_connection = True


def test_an_http_body_longer_than_the_index_says_is_cut_at_its_size_and_refused(tmp_path):
    repo, _, host = published(tmp_path)
    [held] = open_repo(str(repo)).listing().artifacts
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Longer(*a, directory=str(repo)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen: list[int] = []
    try:
        with pytest.raises(RepositoryFault, match=f"{held.name} is larger than its index says"):
            deliver.fetch_held(
                open_repo(f"http://127.0.0.1:{server.server_address[1]}/"),
                held,
                dirs_of(host),
                lambda done, total: seen.append(done),
            )
    finally:
        server.shutdown()
    assert seen and max(seen) <= held.size  # never a byte past the index's size
    assert not [name for name in written(host, held) if name != ".lock"]  # the bytes that came are not kept


# --- 4. the signature is over the bytes that were hashed and copied ------------------------------------------------


def test_a_source_changed_after_it_was_hashed_is_not_what_gets_signed(tmp_path, monkeypatch):
    """The blob's copy is hashed; a file swapped in after that (another `package` into the same folder) must not be
    what the .minisig vouches for, under a trusted comment that names the good digest."""
    _, pub = keyed(tmp_path)
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    source = artifact(tmp_path)
    opened = unpacking.open_artifact(source)
    other = artifact(tmp_path, "other").read_bytes()
    real = repos.atomic_write_text
    swapped: list[bool] = []

    def swap_then_write(path: Path, text: str) -> None:  # the first write after the blob is in: its .sha256
        if not swapped:
            source.write_bytes(other)
            swapped.append(True)
        real(path, text)

    monkeypatch.setattr(repos, "atomic_write_text", swap_then_write)
    published_ = open_repo(str(tmp_path / "repo")).publish(opened, key, "test")
    assert swapped
    blob = tmp_path / "repo" / published_.entry.path
    assert archives.sha256_file(blob) == opened.sha256
    minisig = blob.with_name(blob.name + index.MINISIG).read_text()
    signed = signing.verify(blob.read_bytes(), minisig, {key.public.id: key.public})
    assert f"sha256:{opened.sha256}" in signed.trusted_comment


def test_an_archive_changed_after_it_was_opened_is_neither_pushed_nor_signed(tmp_path, registry):
    """The OCI path signed the file read again and pushed it read a third time: bytes swapped in after the archive
    was opened (and hashed) went to the registry under the tag and signature comment of the good digest."""
    _, pub = keyed(tmp_path)
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    source = artifact(tmp_path)
    opened = unpacking.open_artifact(source)
    source.write_bytes(artifact(tmp_path, "other").read_bytes())
    oci = open_repo(registry.url())
    with pytest.raises(RepositoryFault, match="changed while it was being published"):
        oci.publish(opened, key, "test")
    assert buildmgr(make_env(tmp_path / "reader"), "repo", "list", registry.url()).returncode == 2  # nothing pushed


# --- 5. a candidate whose bytes fail ends the install, named with why -----------------------------------------------

# a tool that passes the smoke run: --version, --list-devices, and llama-bench's JSON
PASSES = """#!/bin/sh
for word in "$@"; do
    case "$word" in
        --version) echo 'version: 0.5.0-dev (build 11312, commit 0c1e570) TAG' >&2; exit 0 ;;
        --list-devices) printf 'Available devices:\\n  (none)\\n'; exit 0 ;;
        -m) echo '[{"n_prompt": 16, "n_gen": 0, "avg_ts": 1.0, "devices": "none"}]'; exit 0 ;;
    esac
done
"""


def passing_archive(tmp_path: Path, build_id: str, finished: str) -> Path:
    """An archive whose tools pass the smoke run, of its own build id and finish time (the later ranks first)."""
    build = fake_build(tmp_path / f"src-{build_id}", PASSES.replace("TAG", build_id))
    receipt = dataclasses.replace(build.receipt, id=build_id, finished=finished)
    store.write_receipt(build.prefix, receipt)
    return archives.package(store.Build(build_id, build.prefix, receipt), tmp_path / f"dist-{build_id}", {}).archive


def test_a_candidate_whose_bytes_fail_is_named_and_nothing_is_installed(tmp_path):
    repo, _, host = published(tmp_path)
    blob = the_blob(repo)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    result = buildmgr(host, "install", "--from", str(repo), "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [attempt] = json.loads(result.stdout)["attempts"]
    assert "it was changed after it was published" in attempt["outcome"] and attempt["signed_by"] is None
    assert f"{attempt['name']} (cpu-0123abcd) from {repo}: " in result.stderr.splitlines()[-1]
    assert nothing_installed(host) and downloaded(host) == []
