"""The binary repository: keys in minisign's format (checked by the real minisign), publishing into a directory
under a lock (two publishers at once, for real), the index, the choice of an artifact for a host, and every fault
`install --from` must refuse with nothing installed: a changed blob, a wrong or untrusted signature, an unsigned
artifact, an index that names a missing blob, a truncated download (resumed, then verified) and a server that goes
away mid-download. The archives are buildmgr's own packages of small prefixes (test_artifacts.fake_build); a real
cpu artifact is published, installed with --from and smoke-run in test_cpu_build."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import QuietFiles, assert_user_error, buildmgr, make_env
from test_artifacts import fake_build

from buildmgr.artifacts import archive as archives
from buildmgr.artifacts import deliver, index, select
from buildmgr.artifacts import unpack as unpacking
from buildmgr.artifacts.repo import open_repo
from buildmgr.core.config import Dirs
from buildmgr.core.errors import RepositoryFault
from buildmgr.store.receipt import RuntimeNeeds
from buildmgr.trust import signing

FIXTURES = Path(__file__).parent / "fixtures"

MINISIGN = shutil.which("minisign")


def artifact(tmp_path: Path, tag: str = "a", **runtime_needs) -> Path:
    """A distinct archive per tag (its tool prints the tag), all of one name: the index keeps them apart by digest."""
    tool = f"#!/bin/sh\necho 'version: 0.5.0-dev (build 11312, commit 0c1e570) {tag}'\n"
    return archives.package(
        fake_build(tmp_path / f"src-{tag}", tool, **runtime_needs), tmp_path / f"dist-{tag}", {}
    ).archive


def keyed(tmp_path: Path, name: str = "ci") -> tuple[dict[str, str], Path]:
    """A publisher's environment with a key NAME, and its .pub."""
    env = make_env(tmp_path / f"publisher-{name}")
    made = buildmgr(env, "key", "generate", name)
    assert made.returncode == 0, made.stderr
    return env, Path(env["XDG_CONFIG_HOME"]) / "buildmgr" / "keys" / f"{name}.pub"


def published(tmp_path: Path, sign: bool = True, **runtime_needs) -> tuple[Path, Path | None, dict[str, str]]:
    """(the repository, the key's .pub or None, a host that trusts it) with one artifact in it."""
    repo = tmp_path / "repo"
    env, pub = keyed(tmp_path)
    result = buildmgr(
        env, "publish", str(artifact(tmp_path, **runtime_needs)), "--to", str(repo), *(["--sign", "ci"] if sign else [])
    )
    assert result.returncode == 0, result.stderr
    host = make_env(tmp_path / "host")
    if sign:
        assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    return repo, pub if sign else None, host


def the_blob(repo: Path) -> Path:
    [entry] = index.Index.from_text((repo / index.INDEX).read_text()).artifacts
    return repo / entry.path


def nothing_installed(env: dict[str, str]) -> bool:
    """No file under the data dir but locks and the index versions this host remembers (repositories.json: what it
    saw, not what it installed)."""
    data = Path(env["XDG_DATA_HOME"])
    return not data.exists() or not any(
        p.is_file() and p.suffix != ".lock" and p.name != "repositories.json" for p in data.rglob("*")
    )


def downloaded(env: dict[str, str]) -> list[Path]:
    cache = Path(env["XDG_CACHE_HOME"]) / "buildmgr" / "downloads"
    return sorted(p for p in cache.rglob("*.tar.gz")) if cache.exists() else []


# --- keys -------------------------------------------------------------------------------------------------------


def test_a_generated_key_is_0600_printed_never_and_its_public_half_is_the_last_line(tmp_path):
    env = make_env(tmp_path)
    result = buildmgr(env, "key", "generate", "ci")
    assert result.returncode == 0, result.stderr
    keys = Path(env["XDG_CONFIG_HOME"]) / "buildmgr" / "keys"
    secret = (keys / "ci.key").read_text()
    assert (keys / "ci.key").stat().st_mode & 0o777 == 0o600
    assert secret.splitlines()[1] not in result.stdout + result.stderr
    public = signing.read_public((keys / "ci.pub").read_text())
    assert result.stdout.splitlines()[-1] == public.line()
    assert_user_error(buildmgr(env, "key", "generate", "ci"), "a key named 'ci' exists")
    fresh = make_env(tmp_path / "fresh")
    assert_user_error(buildmgr(fresh, "key", "generate", "../x"), "key name '../x'")
    assert_user_error(buildmgr(fresh, "key", "trust", "not a key"), "not base64")
    assert not (tmp_path / "fresh").exists()  # a user error writes nothing, not even the config dir
    assert json.loads(buildmgr(env, "key", "list", "--json").stdout) == {
        "own": [{"name": "ci", "id": public.id, "secret_key": str(keys / "ci.key")}],
        "trusted": [],  # a host trusts no key until told, its own included
        "pins": {},
    }


@pytest.mark.skipif(MINISIGN is None, reason="minisign (Debian's package) is installed by ci/test.sh")
def test_minisign_itself_checks_what_buildmgr_signs_and_buildmgr_reads_minisign_s_keys(tmp_path):
    repo, pub, _ = published(tmp_path)
    blob = the_blob(repo)
    checked = subprocess.run([MINISIGN, "-Vm", str(blob), "-p", str(pub)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert f"sha256:{blob.parent.name}" in checked.stdout  # the trusted comment names the digest
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    assert subprocess.run([MINISIGN, "-Vm", str(blob), "-p", str(pub)], capture_output=True).returncode != 0
    # a key minisign made (unencrypted, -W) signs through buildmgr, and minisign's signature verifies in buildmgr
    made = subprocess.run(
        [MINISIGN, "-G", "-W", "-f", "-p", str(tmp_path / "m.pub"), "-s", str(tmp_path / "m.key")],
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    assert made.returncode == 0, made.stderr
    secret = signing.read_secret((tmp_path / "m.key").read_text())
    assert secret.public == signing.read_public((tmp_path / "m.pub").read_text())
    (tmp_path / "f").write_bytes(b"payload")
    (tmp_path / "f.minisig").write_text(secret.sign(b"payload", "hello"))
    assert subprocess.run([MINISIGN, "-Vm", str(tmp_path / "f"), "-p", str(tmp_path / "m.pub")]).returncode == 0
    signed = subprocess.run(
        [MINISIGN, "-S", "-W", "-s", str(tmp_path / "m.key"), "-m", str(tmp_path / "f"), "-t", "by minisign"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    assert signed.returncode == 0, signed.stderr
    verified = signing.verify(b"payload", (tmp_path / "f.minisig").read_text(), {secret.public.id: secret.public})
    assert verified.trusted_comment == "by minisign"


def test_a_signature_fails_on_a_changed_file_comment_or_key():
    key, other = signing.SecretKey.generate(), signing.SecretKey.generate()
    sig = key.sign(b"data", "c")
    trusted = {key.public.id: key.public}
    assert signing.verify(b"data", sig, trusted).key_id == key.public.id
    # install --from checks it by the digest it read with the sha256: the same verdicts
    assert signing.verify(None, sig, trusted, hashlib.blake2b(b"data").digest()).key_id == key.public.id
    with pytest.raises(signing.SignatureError, match="does not match"):
        signing.verify(None, sig, trusted, hashlib.blake2b(b"datA").digest())
    with pytest.raises(signing.SignatureError, match="does not match"):
        signing.verify(b"datA", sig, trusted)
    lines = sig.splitlines()
    with pytest.raises(signing.SignatureError, match="does not match"):
        signing.verify(b"data", "\n".join([*lines[:2], "trusted comment: d", lines[3]]), trusted)
    with pytest.raises(signing.Untrusted):
        signing.verify(b"data", other.sign(b"data", "c"), trusted)
    envelope = signing.envelope({"_type": index.STATEMENT, "subject": []}, key)
    assert signing.open_envelope(envelope, trusted)[0] == key.public.id
    swapped = envelope | {"payload": signing.envelope({"_type": "x"}, key)["payload"]}
    with pytest.raises(signing.SignatureError, match="does not match its payload"):
        signing.open_envelope(swapped, trusted)


# --- publishing -------------------------------------------------------------------------------------------------


def test_publish_then_list_then_again_is_a_no_op_and_the_attestation_names_the_archive(tmp_path):
    repo, pub, _ = published(tmp_path)
    before = (repo / index.INDEX).read_text()
    env = make_env(tmp_path / "publisher-ci")
    [same] = (tmp_path / "dist-a").glob("*.tar.gz")
    again = buildmgr(env, "publish", str(same), "--to", str(repo), "--sign", "ci", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["already"] and (repo / index.INDEX).read_text() == before
    # issue #52: published again without --sign, it said "already … signed by …" and then "note: unsigned"
    plain = buildmgr(env, "publish", str(same), "--to", str(repo))
    assert plain.returncode == 0 and "already in" in plain.stdout and "signed by" in plain.stdout
    assert "note: unsigned" not in plain.stderr
    [row] = json.loads(buildmgr(make_env(tmp_path / "any"), "repo", "list", str(repo), "--json").stdout)
    blob = the_blob(repo)
    assert row["sha256"] == blob.parent.name == archives.sha256_file(blob) and row["recipe"] == "cpu"
    key = signing.read_public(pub.read_text())
    assert row["signed_by"] == key.id
    envelope = json.loads(blob.with_name(blob.name + index.ATTESTATION).read_text())
    _, statement = signing.open_envelope(envelope, {key.id: key})
    assert index.attested_digest(statement, blob.name) == blob.parent.name
    assert statement["predicateType"] == index.SLSA_PROVENANCE
    receipt_digest = statement["predicate"]["runDetails"]["byproducts"][0]["digest"]["sha256"]
    assert receipt_digest == unpacking.open_artifact(blob).receipt_sha256


def test_two_publishers_at_once_lose_nothing(tmp_path):
    """Eight processes publish eight archives of one name into one repository at the same moment: the index must
    hold all eight (without the lock, read-modify-write of the index drops some)."""
    repo = tmp_path / "repo"
    archives_ = [artifact(tmp_path, f"t{n}") for n in range(8)]
    env = make_env(tmp_path / "p")
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
        "from buildmgr.cli import main\n"
        "sys.exit(main())\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, "publish", str(a), "--to", str(repo)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in archives_
    ]
    go.write_text("")
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    held = index.Index.from_text((repo / index.INDEX).read_text()).artifacts
    assert sorted(e.sha256 for e in held) == sorted(archives.sha256_file(a) for a in archives_)
    assert {e.name for e in held} == {archives_[0].name}  # one name, eight digests: none overwrote another


def test_bad_publish_input_is_one_line_and_nothing_written(tmp_path):
    env = make_env(tmp_path)
    good = artifact(tmp_path)
    assert_user_error(
        buildmgr(env, "publish", str(good), "--to", str(tmp_path / "r"), "--sign", "nope"), "no key named 'nope'"
    )
    assert_user_error(
        buildmgr(env, "publish", str(tmp_path / "none.tar.gz"), "--to", str(tmp_path / "r")), "no such artifact"
    )
    assert_user_error(buildmgr(env, "publish", str(good), "--to", "http://127.0.0.1:1/"), "read-only")
    assert not (tmp_path / "r").exists()
    # issue #35: a place no one may write to was answered "check that path and the free space"
    denied = buildmgr(env, "publish", str(good), "--to", "/sys/buildmgr-repository")
    assert_user_error(denied, "/sys/buildmgr-repository", "you may not write or read there")
    assert "free" not in denied.stderr


# --- choosing for a host -----------------------------------------------------------------------------------------


def entry(
    recipe: str,
    backends: tuple[str, ...],
    code: dict[str, tuple[str, ...]] | None = None,
    number: int = 11312,
    dl: bool = False,
) -> index.Entry:
    needs = RuntimeNeeds(1, "2.34", "bin/llama-cli", None, None, {}, dict(code or {}))
    summary = index.ArchiveSummary(
        f"{recipe}-x",
        recipe,
        "",
        backends,
        number,
        "0c1e570",
        "Linux",
        "x86_64",
        "2026-12-03T00:00:00+00:00",
        needs,
        dl,
        False,
        "0" * 64,
    )
    return index.Entry(f"llama-b{number}-bin-linux-{recipe}-x64.tar.gz", f"{number:064d}"[-64:], 1, "", summary)


def test_native_code_beats_jit_beats_portable_beats_the_cpu_and_the_newest_wins_among_equals():
    h200 = {"CUDA": ["9.0"], "ROCm": []}
    sm90 = entry("cuda-sm90", ("CPU", "CUDA"), {"CUDA": ("sm_90",)})
    sm80 = entry("cuda-sm80", ("CPU", "CUDA"), {"CUDA": ("sm_80", "compute_80")})
    sm86 = entry("cuda-sm86", ("CPU", "CUDA"), {"CUDA": ("sm_86",)})
    vulkan, cpu, newer_cpu = (
        entry("vulkan", ("CPU", "Vulkan")),
        entry("cpu", ("CPU",)),
        entry("cpu", ("CPU",), number=11400),
    )
    from buildmgr import backends

    judged = [
        select.judge(
            e, [f for fs in backends.code_fits(e.summary.runtime.device_code, h200).values() for f in fs], h200
        )
        for e in (cpu, vulkan, sm80, newer_cpu, sm86, sm90)
    ]
    ranked = select.rank(judged)
    assert [(c.entry.summary.recipe, c.entry.summary.build_number, c.tier) for c in ranked] == [
        ("cuda-sm90", 11312, select.Tier.NATIVE),
        ("cuda-sm80", 11312, select.Tier.JIT),
        ("vulkan", 11312, select.Tier.PORTABLE),
        ("cpu", 11400, select.Tier.CPU),
        ("cpu", 11312, select.Tier.CPU),
        ("cuda-sm86", 11312, None),  # sm_86 SASS and no PTX: 'no kernel image is available' on a 9.0 card
    ]
    assert ranked[0].proves == ("CUDA",) and ranked[2].proves == ("Vulkan",)
    assert "compute_80 PTX" in " ".join(ranked[1].reasons)
    assert "no kernel image" in " ".join(ranked[-1].reasons)
    hidden = {"CUDA": [], "ROCm": []}  # CUDA_VISIBLE_DEVICES= : no GPU a CUDA build could use
    [cuda_hidden] = [select.judge(sm90, [], hidden)]
    assert not cuda_hidden.fits and "none is visible here: it would run on the CPU" in cuda_hidden.reasons[0]
    universal = select.judge(entry("universal", ("CPU", "CUDA", "Vulkan"), {"CUDA": ("sm_90",)}, dl=True), [], hidden)
    assert universal.tier is select.Tier.PORTABLE and universal.proves == ("Vulkan",)


def test_a_host_that_fits_nothing_gets_the_table_exit_1_and_nothing_is_written(tmp_path):
    repo, _, host = published(tmp_path, glibc="9.99", glibc_file="bin/llama-cli")
    result = buildmgr(host, "install", "--from", str(repo))
    assert result.returncode == 1, result.stderr
    assert "does not fit" in result.stdout and "needs GLIBC_9.99" in result.stdout  # the table is the result
    assert "no artifact of" in result.stderr.splitlines()[-1]
    assert nothing_installed(host) and downloaded(host) == []
    dry = buildmgr(host, "install", "--from", str(repo), "--dry-run", "--json")
    assert dry.returncode == 1 and json.loads(dry.stdout)["candidates"][0]["fits"] is False
    assert_user_error(
        buildmgr(host, "install", "cuda", "--from", str(repo)),
        "no 'cuda' artifact in this repository (it has cpu; builds cpu-",
    )
    assert_user_error(
        buildmgr(host, "install", "b42", "--from", str(repo)), "no build b42 in this repository (it has b11312)"
    )
    assert_user_error(buildmgr(host, "install", "--from", str(tmp_path / "empty")), "no index.json")


# --- faults: each refused with nothing installed ----------------------------------------------------------------


def refused(host: dict[str, str], repo: Path | str, *fragments: str, extra: tuple[str, ...] = ()) -> None:
    result = buildmgr(host, "install", "--from", str(repo), *extra)
    assert result.returncode == 1, result.stderr
    for fragment in fragments:  # in the table of candidates (stdout) or the error line (stderr)
        assert fragment in result.stdout + result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert nothing_installed(host)


def test_unsigned_and_untrusted_artifacts_are_refused_before_any_download(tmp_path):
    repo, _, host = published(tmp_path / "u", sign=False)
    refused(host, repo, "its index.json is unsigned; nothing was installed")  # issue #50 item 1
    assert downloaded(host) == []
    # its index signed since (publish --sign, no archive): the archive it lists is still unsigned, and refused
    publisher = make_env(tmp_path / "u" / "publisher-ci")
    assert buildmgr(publisher, "publish", "--to", str(repo), "--sign", "ci").returncode == 0
    pub = Path(publisher["XDG_CONFIG_HOME"]) / "buildmgr" / "keys" / "ci.pub"
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    refused(host, repo, "unsigned: no key vouches for it")
    assert downloaded(host) == []
    signed, _, _ = published(tmp_path / "s")
    stranger = make_env(tmp_path / "stranger")
    refused(
        stranger,
        signed,
        f"which this host does not trust (if it is the publisher's key: 'buildmgr key trust FILE --for {signed}'",
    )
    assert downloaded(stranger) == []


def test_a_changed_blob_is_refused_and_its_download_deleted(tmp_path):
    repo, _, host = published(tmp_path)
    blob = the_blob(repo)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    refused(host, repo, "it was changed after it was published")
    assert downloaded(host) == []


def test_a_signature_by_another_key_than_the_index_says_is_refused(tmp_path):
    repo, _, host = published(tmp_path)
    _, other_pub = keyed(tmp_path, "other")
    assert buildmgr(host, "key", "trust", str(other_pub)).returncode == 0
    blob = the_blob(repo)
    other = signing.read_secret(other_pub.with_suffix(".key").read_text())
    blob.with_name(blob.name + index.MINISIG).write_text(other.sign(blob.read_bytes(), "swapped"))
    refused(host, repo, f"its .minisig is by {other.public.id} and its attestation by")
    assert downloaded(host) == []  # issue #52: 7.3 MB that failed verification stayed in <cache>/downloads
    # the index's word alone lets nothing in: a .minisig by a key the host does not trust, the index claiming a trusted one
    stranger = signing.SecretKey.generate()
    blob.with_name(blob.name + index.MINISIG).write_text(stranger.sign(blob.read_bytes(), "x"))
    refused(host, repo, f"signed by key {stranger.public.id}, which this host does not trust")
    blob.with_name(blob.name + index.MINISIG).unlink()
    refused(host, repo, "the index says it is signed by")


def test_an_index_that_names_a_missing_blob_is_refused(tmp_path):
    repo, _, host = published(tmp_path)
    the_blob(repo).unlink()
    refused(host, repo, "is in the index but not in the repository")


def test_an_index_that_lies_about_the_receipt_is_refused(tmp_path):
    """A signed index that lies is refused before any download (test_repository_index); one read unsigned
    (--allow-unsigned) is caught by the receipt, once extracted."""
    repo, _, host = published(tmp_path, sign=False)
    text = (repo / index.INDEX).read_text()
    data = json.loads(text)
    data["artifacts"][0]["summary"]["runtime"]["glibc"] = "2.17"  # claims to fit older hosts than it does
    (repo / index.INDEX).write_text(json.dumps(data))
    refused(
        host,
        repo,
        "its receipt is not what",
        "(runtime.glibc: the receipt says None, the index '2.17')",  # the field
        extra=("--allow-unsigned",),
    )
    failed = buildmgr(host, "install", "--from", str(repo), "--json", "--allow-unsigned")  # the attempt says why
    [attempt] = json.loads(failed.stdout)["attempts"]
    assert failed.returncode == 1 and "runtime.glibc" in attempt["outcome"]


@pytest.mark.parametrize("build_id", ["../../../../victim", "*"])
def test_an_index_whose_build_id_is_a_path_or_a_pattern_is_refused_before_anything(tmp_path, build_id):
    """The id in the index names the lock and the staging folder before the archive's receipt is read: `..` or a
    glob there would lock, stage and clean up outside the store. Signed by the publisher's key (a changed index is
    refused before it is parsed), it is refused as the index is read."""
    repo, pub, host = published(tmp_path)
    assert pub is not None
    victim = tmp_path / "victim.keep"
    victim.mkdir()
    data = json.loads((repo / index.INDEX).read_text())
    data["artifacts"][0]["summary"]["id"] = build_id
    text = json.dumps(data).encode()
    (repo / index.INDEX).write_bytes(text)
    (repo / index.INDEX_SIGNATURE).write_text(signing.read_secret(pub.with_suffix(".key").read_text()).sign(text, "x"))
    result = buildmgr(host, "install", "--from", str(repo))
    assert result.returncode != 0 and "not a safe build id" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and nothing_installed(host) and victim.is_dir()
    assert not list((Path(host["XDG_CACHE_HOME"]) / "buildmgr").glob("downloads/*/*.tar.gz"))


# --- downloads: resumed, and never trusted before the digest -------------------------------------------------------


class _Ranged(QuietFiles):
    """A static server that honours `Range: bytes=N-` (206), and that can die half-way through a body."""

    cut: float | None = None  # send this share of a blob's body, then drop the connection
    pace: float = 0.0  # seconds between chunks of 64 bytes of a blob: a slow link, to kill a download in the middle

    def do_GET(self) -> None:
        path = self.served()
        if path is None:
            return
        data = path.read_bytes()
        start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        if self.cut is not None and path.name.endswith(".tar.gz"):
            self.wfile.write(body[: int(len(body) * self.cut)])
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        if self.pace and path.name.endswith(".tar.gz"):
            for at in range(0, len(body), 64):
                self.wfile.write(body[at : at + 64])
                self.wfile.flush()
                time.sleep(self.pace)
            return
        self.wfile.write(body)


def serve(root: Path, cut: float | None = None, pace: float = 0.0) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("H", (_Ranged,), {"cut": cut, "pace": pace})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def test_a_server_that_goes_away_mid_download_leaves_a_part_the_next_try_resumes_and_verifies(tmp_path):
    repo, _, host = published(tmp_path)
    dirs = Dirs(
        Path(host["XDG_DATA_HOME"]) / "buildmgr",
        Path(host["XDG_CACHE_HOME"]) / "buildmgr",
        Path(host["XDG_CONFIG_HOME"]) / "buildmgr",
    )
    [held] = open_repo(str(repo)).listing().artifacts
    dying, url = serve(repo, cut=0.5)
    try:
        with pytest.raises(RepositoryFault, match="they are kept and the next try resumes"):
            deliver.fetch_held(open_repo(url), held, dirs)
    finally:
        dying.shutdown()
    part = deliver.downloads(dirs) / held.sha256 / f"{held.name}.part"
    kept = part.stat().st_size
    assert 0 < kept < held.size
    seen: list[int] = []
    server, url = serve(repo)
    try:
        archive = deliver.fetch_held(open_repo(url), held, dirs, lambda done, total: seen.append(done)).archive
    finally:
        server.shutdown()
    assert archives.sha256_file(archive) == held.sha256 and not part.exists()
    assert seen[0] == kept > 0  # resumed by Range: it starts where the kept bytes end
    # a .part of wrong bytes is never trusted: the digest fails, the file goes, the next try starts clean
    archive.unlink()
    part.write_bytes(b"\0" * (held.size // 2))
    with pytest.raises(RepositoryFault, match="changed after it was published"):
        deliver.fetch_held(open_repo(str(repo)), held, dirs)
    assert not part.exists() and not archive.exists()
    assert archives.sha256_file(deliver.fetch_held(open_repo(str(repo)), held, dirs).archive) == held.sha256


def test_an_index_padded_past_what_any_index_is_is_refused_unread_over_every_transport(tmp_path):
    # valid JSON after 16 MiB of whitespace: read whole, it would parse and list (an unsigned repository signs nothing)
    repo, _, host = published(tmp_path, sign=False)
    before = json.loads(buildmgr(host, "repo", "list", str(repo), "--json").stdout)
    indexed = repo / index.INDEX
    indexed.write_text(" " * (16 << 20) + indexed.read_text())
    server, url = serve(repo)
    try:
        for where in (str(repo), url):
            result = buildmgr(host, "repo", "list", where, "--json")
            failed = json.loads(result.stdout)  # the fault, not a listing
            assert result.returncode == 1 and failed["exit_code"] == 1 and "error" in failed, (where, result.stdout)
    finally:
        server.shutdown()
    indexed.write_text(indexed.read_text().lstrip())
    assert json.loads(buildmgr(host, "repo", "list", str(repo), "--json").stdout) == before


# --- an OCI registry: Debian's docker-registry on loopback ---------------------------------------------------------


def test_oci_publish_list_again_and_eight_publishers_at_once(tmp_path, registry):
    env, _ = keyed(tmp_path)
    url = registry.url()
    first = artifact(tmp_path, "first")
    pushed = buildmgr(env, "publish", str(first), "--to", url, "--sign", "ci", "--json")
    assert pushed.returncode == 0, pushed.stderr
    again = json.loads(buildmgr(env, "publish", str(first), "--to", url, "--sign", "ci", "--json").stdout)
    assert again[0]["already"]
    archives_ = [artifact(tmp_path, f"t{n}") for n in range(8)]
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
        "from buildmgr.cli import main\n"
        "sys.exit(main())\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, "publish", str(a), "--to", url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in archives_
    ]
    go.write_text("")
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    listed = json.loads(buildmgr(make_env(tmp_path / "any"), "repo", "list", url, "--json").stdout)
    assert sorted(row["sha256"] for row in listed) == sorted(archives.sha256_file(a) for a in [first, *archives_])
    signed = {row["sha256"]: row["signed_by"] for row in listed}
    assert signed[archives.sha256_file(first)] is not None and signed[archives.sha256_file(archives_[0])] is None


def test_oci_faults_a_changed_blob_and_a_registry_that_goes_away_then_resumes(tmp_path, registry):
    env, pub = keyed(tmp_path)
    path = artifact(tmp_path)
    assert buildmgr(env, "publish", str(path), "--to", registry.url(), "--sign", "ci").returncode == 0
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    dirs = Dirs(
        Path(host["XDG_DATA_HOME"]) / "buildmgr",
        Path(host["XDG_CACHE_HOME"]) / "buildmgr",
        Path(host["XDG_CONFIG_HOME"]) / "buildmgr",
    )
    repo = open_repo(registry.url())
    [held] = repo.listing().artifacts
    assert held.signed_by == signing.read_public(pub.read_text()).id
    assert set(repo.signatures(held)) == {index.MINISIG, index.ATTESTATION}
    # interrupted half-way (a .part), then the registry is down: said at once, the bytes kept
    part = deliver.downloads(dirs) / held.sha256 / f"{held.name}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(path.read_bytes()[: held.size // 2])
    registry.stop()
    with pytest.raises(RepositoryFault, match="the next try resumes"):
        deliver.fetch_held(repo, held, dirs)
    assert part.stat().st_size == held.size // 2
    registry.start()
    seen: list[int] = []
    archive = deliver.fetch_held(repo, held, dirs, lambda done, total: seen.append(done)).archive
    assert archives.sha256_file(archive) == held.sha256 and seen[0] == held.size // 2  # resumed by Range
    archive.unlink()
    blob = registry.blob_file(held.sha256)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))  # changed behind the registry's back: it serves what it holds
    refused(host, registry.url(), "it was changed after it was published")
    assert downloaded(host) == []


def test_oci_bad_input_is_one_line(tmp_path):
    env = make_env(tmp_path)
    assert_user_error(
        buildmgr(env, "repo", "list", "oci://127.0.0.1:5000/onlyname"), "oci://HOST[:PORT]/NAMESPACE/NAME"
    )
    assert_user_error(buildmgr(env, "repo", "list", "oci://127.0.0.1:5000/a/b:tag"), "(no tag)")
    # issue #52: the same fault in the same words whichever transport: oras said HTTPConnectionPool(…NewConnectionError
    for url in ("oci://127.0.0.1:1/a/b", "http://127.0.0.1:1/a"):
        down = buildmgr(env, "repo", "list", url)
        assert down.returncode == 1 and "Traceback" not in down.stderr
        assert down.stderr.strip().endswith(": connection refused (is a server running there?)"), down.stderr
    capitals = buildmgr(env, "repo", "list", "oci://127.0.0.1:5000/Team/Llama")  # oras: "Extra data: line 1 column 5"
    assert_user_error(capitals, "an OCI repository name is lower case", "use oci://127.0.0.1:5000/team/llama")
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


def test_a_mistyped_repository_name_is_one_line_exit_2_for_every_command_and_transport(tmp_path, registry):
    """Issue #52: install said "the repository holds no artifact" (exit 1), repo list "holds nothing yet" (exit 0),
    and a missing directory was exit 2."""
    env = make_env(tmp_path)
    mistyped = registry.url().rsplit("/", 1)[0] + "/no-such-name"
    for command in (["repo", "list", mistyped], ["install", "--from", mistyped]):
        assert_user_error(buildmgr(env, *command), "has no repository", "nothing was published to it: check the name")
    for command in (["repo", "list", str(tmp_path / "nowhere")], ["install", "--from", str(tmp_path / "nowhere")]):
        assert_user_error(buildmgr(env, *command), "no index.json here")
    empty = tmp_path / "empty-repo"  # a repository that exists and holds nothing: not an error to list
    empty.mkdir()
    (empty / index.INDEX).write_text(json.dumps({"schema": index.SCHEMA, "artifacts": []}))
    assert buildmgr(env, "repo", "list", str(empty)).returncode == 0
    for extra in (("--allow-unsigned",), ("--allow-unsigned", "--dry-run")):  # an unsigned index: issue #50 item 1
        nothing = buildmgr(env, "install", "--from", str(empty), *extra)
        assert nothing.returncode == 1 and nothing.stderr.strip().splitlines()[-1] == (
            f"buildmgr: error: {empty} holds no artifact yet: nothing to install (publish puts one there)"
        )


def test_install_killed_mid_download_leaves_nothing_installed_and_the_next_run_resumes(tmp_path):
    repo, _, host = published(tmp_path)
    [held] = open_repo(str(repo)).listing().artifacts
    server, url = serve(repo, pace=0.05)
    part = Path(host["XDG_CACHE_HOME"]) / "buildmgr" / "downloads" / held.sha256 / f"{held.name}.part"
    try:
        running = subprocess.Popen(
            [sys.executable, "-m", "buildmgr", "install", "--from", url],
            env=host,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (part.exists() and part.stat().st_size >= 128) and time.monotonic() < deadline:
            time.sleep(0.01)
        running.send_signal(signal.SIGKILL)
        running.wait()
    finally:
        server.shutdown()
    kept = part.stat().st_size
    assert 0 < kept < held.size and nothing_installed(host)
    seen: list[int] = []
    dirs = Dirs(
        Path(host["XDG_DATA_HOME"]) / "buildmgr",
        Path(host["XDG_CACHE_HOME"]) / "buildmgr",
        Path(host["XDG_CONFIG_HOME"]) / "buildmgr",
    )
    server, url = serve(repo)
    try:
        archive = deliver.fetch_held(open_repo(url), held, dirs, lambda done, total: seen.append(done)).archive
    finally:
        server.shutdown()
    assert seen[0] == kept and archives.sha256_file(archive) == held.sha256
    # the fake build's tools cannot run llama-bench: the smoke run fails, and still nothing is installed
    result = buildmgr(host, "install", "--from", str(repo), "--json")
    assert result.returncode == 1 and "its smoke run failed here" in json.loads(result.stdout)["attempts"][0]["outcome"]
    assert nothing_installed(host)


@pytest.mark.parametrize("run", ["", "onepass"], ids=["first run", "one-pass install"])
def test_the_h200_s_own_index_ranks_as_its_installs_did(run):
    """The index published on an H200 (docs/real-runs.md, less the sm_90 archive as that run removed it): its real
    summaries, read from the ELF files there, rank sm_80 by JIT over Vulkan over the CPU for a 9.0 card, and with
    CUDA hidden the CUDA archive does not fit and Vulkan leads: what the three installs there picked and proved,
    in both runs (the second with the one-pass install, proved by its smoke run's probe)."""
    from buildmgr import backends

    recorded_at = FIXTURES / "h200" / "repository32" / run
    data = json.loads((recorded_at / "index-no-sm90.json").read_text())
    entries = index.Index.from_json(data).artifacts

    def ranked(targets):
        return select.rank(
            [
                select.judge(
                    e,
                    [f for fs in backends.code_fits(e.summary.runtime.device_code, targets).values() for f in fs],
                    targets,
                )
                for e in entries
            ]
        )

    h200 = ranked({"CUDA": ["9.0"], "ROCm": []})
    assert [(c.entry.summary.recipe, c.tier) for c in h200] == [
        ("cuda", select.Tier.JIT),
        ("vulkan", select.Tier.PORTABLE),
        ("cpu", select.Tier.CPU),
    ]
    assert "compute_80 PTX" in " ".join(h200[0].reasons)
    hidden = ranked({"CUDA": [], "ROCm": []})
    assert [(c.entry.summary.recipe, c.tier) for c in hidden] == [
        ("vulkan", select.Tier.PORTABLE),
        ("cpu", select.Tier.CPU),
        ("cuda", None),
    ]
    recorded = json.loads((recorded_at / "install-no-sm90.json").read_text())
    assert [c["name"] for c in recorded["candidates"]] == [c.entry.name for c in h200]
    hidden_run = json.loads((recorded_at / "install-cuda-hidden.json").read_text())  # of the whole registry
    held = {e.name for e in entries}
    assert [c["name"] for c in hidden_run["candidates"] if c["name"] in held] == [c.entry.name for c in hidden]


def test_gc_collects_an_artifact_download_an_interrupted_install_left(tmp_path):
    """Issue #52: `gc --dry-run` said 0 items with a 7.3 MB download left; one an install holds stays."""
    host = make_env(tmp_path)
    left = Path(host["XDG_CACHE_HOME"]) / "buildmgr" / "downloads" / ("ab" * 32)
    left.mkdir(parents=True)
    (left / "llama-x.tar.gz.part").write_bytes(b"x" * 1024)
    dry = json.loads(buildmgr(host, "gc", "--dry-run", "--json").stdout)
    assert [item["path"] for item in dry["removed"]] == [str(left)] and left.is_dir()
    done = buildmgr(host, "gc", "--json")
    assert done.returncode == 0 and not left.exists()


# --- provenance (issue #50 item 6) --------------------------------------------------------------------------------


def resigned(repo: Path, pub: Path, change) -> None:
    """The archive's attestation with its Statement changed by `change(statement)`, signed again by the same key:
    a signature that holds over a statement that does not."""
    blob = the_blob(repo)
    attestation = blob.with_name(blob.name + index.ATTESTATION)
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    _, statement = signing.open_envelope(json.loads(attestation.read_text()), {key.public.id: key.public})
    change(statement)
    attestation.write_text(json.dumps(signing.envelope(statement, key)))


def test_a_checkout_with_an_untracked_cu_file_is_built_and_attested_as_dirty(tmp_path):
    """ggml-cuda's CMake globs *.cu: a file git does not track is built, so the tree is not its commit."""
    from test_artifacts import git_tree

    from buildmgr.building.source import checkout

    tree = Path(git_tree(tmp_path / "src", nondeterministic=False).removesuffix("@main"))
    git = ["git", "-C", str(tree)]
    assert checkout.local_tree(tree).state == "clean"
    (tree / "ggml" / "extra.cu").write_text("__global__ void k() {}\n")
    env, pub = keyed(tmp_path)
    built = buildmgr(env, "build", "--source", str(tree), "--json")
    assert built.returncode == 0, built.stderr
    build_id = json.loads(built.stdout)["id"]
    packaged = buildmgr(env, "package", build_id, "-o", str(tmp_path / "dist"), "--json")
    assert packaged.returncode == 0, packaged.stderr
    archive = json.loads(packaged.stdout)["archive"]
    repo = tmp_path / "repo"
    assert buildmgr(env, "publish", archive, "--to", str(repo), "--sign", "ci").returncode == 0
    blob = the_blob(repo)
    key = signing.read_public(pub.read_text())
    _, statement = signing.open_envelope(
        json.loads(blob.with_name(blob.name + index.ATTESTATION).read_text()), {key.id: key}
    )
    [dependency] = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert dependency["annotations"]["tree"] == "dirty" and dependency["annotations"]["changes"] == 1
    assert len(dependency["annotations"]["changes_sha256"]) == 64
    assert "digest" not in dependency and dependency["annotations"]["base_commit"] == commit  # not attested as it


def test_a_statement_that_is_signed_but_not_what_install_relies_on_is_refused(tmp_path):
    repo, pub, host = published(tmp_path)
    assert pub is not None
    resigned(repo, pub, lambda s: s.update(predicateType="https://example.com/not-provenance/v1"))
    refused(host, repo, "its predicateType is 'https://example.com/not-provenance/v1'")
    resigned(repo, pub, lambda s: s.update(predicateType=index.SLSA_PROVENANCE))
    resigned(repo, pub, lambda s: s["predicate"]["runDetails"]["metadata"].update(invocationId="cpu-00000000"))
    refused(host, repo, "it attests build 'cpu-00000000'")
    assert downloaded(host) == []


def test_a_minisig_whose_trusted_comment_names_another_build_is_refused(tmp_path):
    repo, pub, host = published(tmp_path)
    assert pub is not None
    blob = the_blob(repo)
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    comment = f"file:{blob.name} sha256:{blob.parent.name} build:cpu-00000000"
    blob.with_name(blob.name + index.MINISIG).write_text(key.sign(blob.read_bytes(), comment))
    refused(host, repo, "its signature's trusted comment", "is not about this archive and build")
    assert downloaded(host) == []


# --- the README's check without buildmgr (issue #50 item 7) ---------------------------------------------------------


def readme_check() -> tuple[list[str], str]:
    """The README's `$ minisign` and `$ python3` lines of "Checking an artifact without buildmgr", and its script."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("**Checking an artifact without buildmgr.**", 1)[1]
    steps = [line[2:].split("  #")[0].strip() for line in section.split("```python")[0].splitlines()]
    script = section.split("```python\n", 1)[1].split("```", 1)[0]
    return [s for s in steps if s.startswith(("minisign ", "python3 "))], script


def test_the_readme_s_check_without_buildmgr_runs_as_written_on_a_published_archive(tmp_path):
    repo, pub, _ = published(tmp_path)
    assert pub is not None
    steps, script = readme_check()
    assert [s.split()[0] for s in steps] == ["minisign", "python3"]
    blob = the_blob(repo)
    here = tmp_path / "user"
    here.mkdir()
    for suffix in ("", index.MINISIG, index.ATTESTATION):  # what the README's curl fetches
        shutil.copy(blob.with_name(blob.name + suffix), here / (blob.name + suffix))
    shutil.copy(pub, here / "ci.pub")
    (here / "check_attestation.py").write_text(script)

    def run(step: str) -> subprocess.CompletedProcess[str]:
        argv = [blob.name if a.startswith("llama-") else a for a in step.split()]
        if argv[0] == "python3":
            argv[0] = sys.executable
        elif MINISIGN is None:
            pytest.skip("minisign (Debian's package) is installed by ci/test.sh")  # the Python check ran first
        return subprocess.run(argv, cwd=here, capture_output=True, text=True)

    python = run(steps[1])
    assert python.returncode == 0, python.stderr
    assert python.stdout.startswith(f"OK {blob.name} built by ") and '"tree": "pinned"' in python.stdout
    data = bytearray((here / blob.name).read_bytes())
    data[len(data) // 2] ^= 1
    (here / blob.name).write_bytes(bytes(data))
    changed = run(steps[1])
    assert changed.returncode == 1 and "NOT VERIFIED: the statement is about another file" in changed.stderr
    shutil.copy(blob, here / blob.name)
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    envelope = json.loads((here / (blob.name + index.ATTESTATION)).read_text())
    envelope["payload"] = base64.b64encode(base64.b64decode(envelope["payload"]).replace(b"cpu", b"cuda")).decode()
    (here / (blob.name + index.ATTESTATION)).write_text(json.dumps(envelope))
    forged = run(steps[1])
    assert forged.returncode == 1 and "NOT VERIFIED: the signature does not match" in forged.stderr
    assert key.public.id in (here / "ci.pub").read_text()
    checked = run(steps[0])
    assert checked.returncode == 0, checked.stderr
    assert f"file:{blob.name} sha256:{blob.parent.name}" in checked.stdout


# --- two builds, one archive name (issue #50 item 8) ----------------------------------------------------------------


def stored_build(env: dict[str, str], build_id: str, hostname: str, finished: str) -> None:
    """A fake cpu build in the store of `env`, as another host's build of the same recipe at the same commit would be:
    its archive gets the same name."""
    from conftest import make_receipt
    from test_repository_bounds import PASSES

    from buildmgr import store

    prefix = Path(env["XDG_DATA_HOME"]) / "buildmgr" / "builds" / "0.5.0-0c1e570" / build_id
    (prefix / "bin").mkdir(parents=True)
    for name in ("llama-cli", "llama-bench"):
        (prefix / "bin" / name).write_text(PASSES.replace("TAG", build_id))
        (prefix / "bin" / name).chmod(0o755)
    (prefix / "LICENSE").write_text("MIT\n")
    receipt = make_receipt(
        build_id, host={"hostname": hostname}, finished=finished, runtime={}, files=store.file_hashes(prefix)
    )
    store.write_receipt(prefix, receipt)


def test_two_builds_of_one_archive_name_are_packaged_apart_listed_apart_ranked_with_why_and_picked_by_id(tmp_path):
    env, pub = keyed(tmp_path)
    first, second = "cpu-aaaa1111", "cpu-bbbb2222"
    stored_build(env, first, "here", "2026-11-30T00:00:00+00:00")
    stored_build(env, second, "h200", "2026-12-01T00:00:00+00:00")
    dist = tmp_path / "dist"
    made = buildmgr(env, "package", first, "-o", str(dist))
    assert made.returncode == 0, made.stderr
    [archive] = dist.glob("*.tar.gz")
    assert made.stdout.splitlines()[0].endswith(f"), build {first}")
    before = archive.read_bytes()
    # the other build's archive of that name is not written over without a word
    refused_ = buildmgr(env, "package", second, "-o", str(dist))
    assert_user_error(refused_, f"{archive} is build {first}'s archive, not {second}'s", "another folder (-o)")
    assert archive.read_bytes() == before and sorted(p.name for p in dist.iterdir()) == [
        archive.name,
        archive.name + ".sha256",
    ]
    assert buildmgr(env, "package", first, "-o", str(dist)).returncode == 0  # the same build again: the same bytes
    assert archive.read_bytes() == before
    other = buildmgr(env, "package", second, "-o", str(tmp_path / "dist2"), "--json")
    assert other.returncode == 0, other.stderr
    assert Path(json.loads(other.stdout)["archive"]).name == archive.name
    repo = tmp_path / "repo"
    for path in (archive, json.loads(other.stdout)["archive"]):
        assert buildmgr(env, "publish", str(path), "--to", str(repo), "--sign", "ci").returncode == 0
    entries = {e.summary.id: e for e in index.Index.from_text((repo / index.INDEX).read_text()).artifacts}
    assert sorted(entries) == [first, second]
    # repo list: one row each, told apart by id and digest
    listed = buildmgr(make_env(tmp_path / "any"), "repo", "list", str(repo))
    rows = [line for line in listed.stdout.splitlines() if line.startswith("llama-")]
    assert len(rows) == 2 and len(set(rows)) == 2
    for build_id, e in entries.items():
        assert any(build_id in row and e.sha256[:12] in row for row in rows), rows
    # the table of candidates: id, digest and date on each line, and why 1 is above 2
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    dry = buildmgr(host, "install", "--from", str(repo), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    one = next(line for line in lines if line.startswith(" 1  "))
    two = next(line for line in lines if line.startswith(" 2  "))
    assert second in one and entries[second].sha256[:12] in one and "2026-12-01" in one
    assert first in two and entries[first].sha256[:12] in two and "2026-11-30" in two
    assert (
        "      above 2: same tier and build number; finished later, 2026-12-01T00:00:00+00:00 against "
        "2026-11-30T00:00:00+00:00"
    ) in lines
    dry_json = json.loads(buildmgr(host, "install", "--from", str(repo), "--dry-run", "--json").stdout)
    assert [c["id"] for c in dry_json["candidates"]] == [second, first]
    assert dry_json["candidates"][0]["above_next"].startswith("same tier and build number")
    assert dry_json["candidates"][1]["above_next"] is None
    # a build id picks that build, though another of its name ranks above it
    picked = buildmgr(host, "install", first, "--from", str(repo), "--json")
    assert picked.returncode == 0, picked.stderr
    done = json.loads(picked.stdout)
    assert done["id"] == first and [c["id"] for c in done["candidates"]] == [first]
    assert_user_error(
        buildmgr(host, "install", "cpu-cccc3333", "--from", str(repo)),
        f"no 'cpu-cccc3333' artifact in this repository (it has cpu; builds {first}, {second})",
    )
    # which candidate is installed here already: from these bytes on the host, by its id where it was built
    again = buildmgr(host, "install", "--from", str(repo), "--dry-run")
    below = again.stdout.split(f" 2  {entries[first].name}  {first}")[1].split("\n 1 ")[0]
    assert "installed here already, from this very archive" in below, again.stdout
    assert "installed here already" not in again.stdout.split(" 2  ")[0]
    assert buildmgr(env, "key", "trust", str(pub)).returncode == 0  # the publisher, who built both here
    assert [
        c["installed_here"]
        for c in json.loads(buildmgr(env, "install", "--from", str(repo), "--dry-run", "--json").stdout)["candidates"]
    ] == ["same build", "same build"]
