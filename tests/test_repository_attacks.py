"""Issue #66: the repository holds against whoever sits on the network. Each attack of the trial, run for real against
real servers (a redirecting, dribbling or silent http server on loopback, https with a certificate of the test's own,
a test host of another address in a network namespace, the directory repository, docker-registry): each ends in a
refusal with nothing installed, or, for two installs at once, in two successes."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import buildmgr, make_env
from nethosts import QuietFiles, dribbling, redirecting, silent, start, tls
from test_artifacts import repack
from test_repository import artifact, downloaded, keyed, nothing_installed, published, serve, the_blob
from test_repository_bounds import dirs_of, passing_archive

from buildmgr import store
from buildmgr.artifacts import archive as archives
from buildmgr.artifacts import index
from buildmgr.artifacts import unpack as unpacking
from buildmgr.trust import signing

FAST = {"BUILDMGR_NETWORK_TIMEOUT": "2"}  # the network timeout a host is given here: seconds, not half a minute


def one_line_fault(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit 1, no traceback, the last line the error, saying each fragment; that line."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("buildmgr: error: "), result.stderr
    for fragment in fragments:
        assert fragment in last, last
    return last


def two_builds(tmp_path: Path) -> tuple[Path, Path, dict[str, str], dict[str, index.Entry]]:
    """A repository of two passing builds, the newer ranked first; (repo, its key's .pub, a host trusting it, the
    entries by build id)."""
    repo = tmp_path / "repo"
    env, pub = keyed(tmp_path)
    for build_id, finished in (
        ("cpu-0000aaaa", "2026-12-01T00:00:00+00:00"),
        ("cpu-1111bbbb", "2026-11-01T00:00:00+00:00"),
    ):
        made = buildmgr(
            env, "publish", str(passing_archive(tmp_path, build_id, finished)), "--to", str(repo), "--sign", "ci"
        )
        assert made.returncode == 0, made.stderr
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    entries = {e.summary.id: e for e in index.Index.from_text((repo / index.INDEX).read_bytes()).artifacts}
    return repo, pub, host, entries  # fmt: skip


def installed(host: dict[str, str]) -> list[str]:
    return [b.id for b in store.installed(dirs_of(host))]


# --- 1. redirects: every hop passes the rule the first URL passed -----------------------------------------------------


def test_a_redirect_to_plain_http_on_another_host_is_refused_and_that_host_is_never_asked(tmp_path, test_host):
    repo, _, host = published(tmp_path)
    elsewhere = test_host.serve(repo)
    server, url = start(redirecting(elsewhere))
    try:
        for command in (["install", "--from", url], ["repo", "list", url]):
            one_line_fault(
                buildmgr(host, *command), f"{url}index.json redirected to {elsewhere}index.json", "plain http://"
            )
    finally:
        server.shutdown()
    assert test_host.requests() == [] and nothing_installed(host)


def test_https_redirected_to_plain_http_is_refused_and_to_https_followed(tmp_path):
    repo, _, host = published(tmp_path)
    context, cert = tls(tmp_path)
    host = host | {"SSL_CERT_FILE": str(cert)}
    plain, plain_url = serve(repo)
    files, files_url = start(functools.partial(QuietFiles, directory=str(repo)), context)
    down, down_url = start(redirecting(plain_url), context)
    up, up_url = start(redirecting(files_url.replace("127.0.0.1", "localhost")), context)
    try:
        one_line_fault(buildmgr(host, "install", "--from", down_url), "redirected to http://127.0.0.1", "from https://")
        assert nothing_installed(host)
        listed = buildmgr(host, "repo", "list", up_url, "--json")  # https to https elsewhere: followed
        assert listed.returncode == 0, listed.stderr
        assert [e["sha256"] for e in json.loads(listed.stdout)] == [the_blob(repo).parent.name]
    finally:
        for server in (plain, files, down, up):
            server.shutdown()


def test_a_registry_redirecting_a_blob_to_another_host_is_refused_and_that_host_never_asked(
    tmp_path, registry, test_host
):
    env, pub = keyed(tmp_path)
    made = buildmgr(env, "publish", str(artifact(tmp_path)), "--to", registry.url(), "--sign", "ci")
    assert made.returncode == 0, made.stderr
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    elsewhere = test_host.serve(tmp_path)
    proxy, _ = start(_registry_front(registry.port, _to(elsewhere)))
    front = f"oci://127.0.0.1:{proxy.server_address[1]}/llama/builds"
    try:
        one_line_fault(buildmgr(host, "install", "--from", front), f"redirected to {elsewhere}", "plain http://")
    finally:
        proxy.shutdown()
    assert test_host.requests() == [] and nothing_installed(host)


Answer = tuple[int, dict[str, str], bytes]


def _registry_front(port: int, answer: Callable[[str], Answer | None], seen: list[str] | None = None) -> type:
    """A registry's front on loopback: every GET passed to the registry on `port`, but where `answer(path)` says
    otherwise (a status, headers, a body); each path asked for appended to `seen`."""
    import urllib.error
    import urllib.request

    class Front(QuietFiles):
        def do_GET(self) -> None:
            if seen is not None:
                seen.append(self.path)
            given = answer(self.path)
            if given is None:
                request = urllib.request.Request(f"http://127.0.0.1:{port}{self.path}", headers=dict(self.headers))
                try:
                    with urllib.request.urlopen(request, timeout=10) as got:
                        given = got.status, {k: v for k, v in got.headers.items() if k in _PASSED}, got.read()
                except urllib.error.HTTPError as err:
                    given = err.code, {k: v for k, v in err.headers.items() if k in _PASSED}, err.read()
            status, headers, body = given
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Front


_PASSED = ("Content-Type", "Docker-Content-Digest")


def _to(elsewhere: str) -> Callable[[str], Answer | None]:
    """A blob answered 307 to the test host (as a registry redirects to its storage)."""
    return lambda path: (307, {"Location": elsewhere + path.rsplit("/", 1)[1]}, b"") if "/blobs/" in path else None


# --- 2. a failed download of the chosen candidate ends the install; only a host that cannot run it falls through ------


def test_a_missing_best_archive_ends_the_install_and_the_older_build_is_never_installed(tmp_path):
    repo, _, host, entries = two_builds(tmp_path)
    best = entries["cpu-0000aaaa"]
    (repo / best.path).unlink()  # a 404 over http
    server, url = serve(repo)
    try:
        result = buildmgr(host, "install", "--from", url, "--json")
    finally:
        server.shutdown()
    one_line_fault(result, best.name, "cpu-0000aaaa")
    [attempt] = json.loads(result.stdout)["attempts"]  # the older one was never tried
    assert attempt["name"] == best.name
    assert installed(host) == []


def test_a_changed_best_archive_ends_the_install_and_its_bytes_are_deleted(tmp_path):
    repo, _, host, entries = two_builds(tmp_path)
    blob = repo / entries["cpu-0000aaaa"].path
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    result = buildmgr(host, "install", "--from", str(repo), "--json")
    one_line_fault(result, "changed after it was published")
    assert len(json.loads(result.stdout)["attempts"]) == 1
    assert installed(host) == [] and downloaded(host) == []


def test_a_best_archive_this_host_cannot_run_is_passed_over_for_the_next(tmp_path):
    repo = tmp_path / "repo"
    env, pub = keyed(tmp_path)
    runs_not = artifact(tmp_path)  # its tools cannot run llama-bench: the smoke run fails here
    later = passing_archive(tmp_path, "cpu-1111bbbb", "2026-01-01T00:00:00+00:00")
    for path in (runs_not, later):
        assert buildmgr(env, "publish", str(path), "--to", str(repo), "--sign", "ci").returncode == 0
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    result = buildmgr(host, "install", "--from", str(repo), "--json")
    assert result.returncode == 0, result.stderr
    first, second = json.loads(result.stdout)["attempts"]
    assert "its smoke run failed here" in first["outcome"] and second["outcome"] == "installed"
    assert installed(host) == ["cpu-1111bbbb"]


# --- 3. deadlines ------------------------------------------------------------------------------------------------


def test_a_dribbled_index_or_archive_and_a_silent_server_fail_within_the_timeout(tmp_path):
    repo, _, host = published(tmp_path)
    host |= FAST
    cases = [
        (dribbling(repo, lambda name: name == index.INDEX, 1, 0.5), "index.json did not come whole in 4 s"),
        (dribbling(repo, lambda name: name.endswith(".tar.gz"), 8, 0.2), "slower than 10 KiB/s"),
    ]
    for handler, said in cases:
        server, url = start(handler)
        try:
            began = time.monotonic()
            result = buildmgr(host, "install", "--from", url, timeout=60)
            took = time.monotonic() - began
        finally:
            server.shutdown()
        one_line_fault(result, said)
        assert took < 20 and nothing_installed(host), took
    part = next(Path(host["XDG_CACHE_HOME"]).rglob("*.tar.gz.part"))
    assert 0 < part.stat().st_size < the_blob(repo).stat().st_size  # what came is kept: the next try resumes
    with silent() as port:
        for where in (f"http://127.0.0.1:{port}/", f"oci://127.0.0.1:{port}/llama/builds"):
            began = time.monotonic()
            result = buildmgr(host, "repo", "list", where, timeout=60)
            one_line_fault(result, "no answer in 2 s")
            assert time.monotonic() - began < 20


# --- 4. a pinned repository stays pinned when its keys are taken back --------------------------------------------


def test_untrusting_the_only_pinned_key_leaves_the_repository_pinned_to_none(tmp_path):
    repo, pub, host = published(tmp_path)
    assert pub is not None
    other_env, other_pub = keyed(tmp_path, "other")
    assert buildmgr(host, "key", "trust", str(pub), "--for", str(repo)).returncode == 0
    assert buildmgr(host, "key", "trust", str(other_pub)).returncode == 0  # trusted for any repository not pinned
    pinned_id = signing.read_public(pub.read_text()).id
    taken = buildmgr(host, "key", "untrust", pinned_id, "--json")
    assert taken.returncode == 0, taken.stderr
    assert json.loads(taken.stdout)["pinned_to_none"] == [str(repo)]
    # the repository signed since by the other key, which this host trusts for any repository that is not pinned
    made = buildmgr(
        other_env, "publish", str(next((tmp_path / "dist-a").glob("*.tar.gz"))), "--to", str(repo), "--sign", "other"
    )
    assert made.returncode == 0, made.stderr
    one_line_fault(buildmgr(host, "install", "--from", str(repo)), f"{repo} is pinned to no key", "--for")
    assert nothing_installed(host)
    listed = json.loads(buildmgr(host, "key", "list", "--json").stdout)
    assert listed["pins"] == {str(repo): []}


# --- 5. rollback state is the repository's, whatever the URL's spelling ------------------------------------------


class _Switchable(QuietFiles):
    root: list[Path]  # the directory served now: the test swaps it

    def translate_path(self, path: str) -> str:
        self.directory = str(self.root[0])
        return super().translate_path(path)


def test_an_older_index_under_another_spelling_of_the_url_is_a_rollback(tmp_path):
    env, pub = keyed(tmp_path)
    repo = tmp_path / "repo"
    publish = ["publish", "--to", str(repo), "--sign", "ci"]
    assert (
        buildmgr(env, *publish, str(passing_archive(tmp_path, "cpu-0000aaaa", "2026-11-01T00:00:00+00:00"))).returncode
        == 0
    )
    old = tmp_path / "old"
    shutil.copytree(repo, old)  # the repository at version 1, as an attacker keeps it
    assert (
        buildmgr(env, *publish, str(passing_archive(tmp_path, "cpu-1111bbbb", "2026-12-01T00:00:00+00:00"))).returncode
        == 0
    )
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    served = [repo]
    server, url = start(type("S", (_Switchable,), {"root": served}))
    port = server.server_address[1]
    try:
        assert buildmgr(host, "install", "--from", url).returncode == 0  # version 2 seen
        served[0] = old
        for spelling in (f"http://LOCALHOST:{port}//", f"http://127.0.0.1:{port}/./", f"HTTP://127.0.0.1:{port}"):
            one_line_fault(buildmgr(host, "install", "--from", spelling), "older than version 2")
        one_line_fault(buildmgr(host, "install", "--from", str(old)), "older than version 2")  # its directory too
    finally:
        server.shutdown()
    assert installed(host) == ["cpu-1111bbbb"]


def test_an_index_that_names_another_repository_is_refused_until_the_host_forgets_the_first(tmp_path):
    env, pub = keyed(tmp_path)
    first, second = tmp_path / "first", tmp_path / "second"
    for repo, build_id in ((first, "cpu-0000aaaa"), (second, "cpu-1111bbbb")):
        made = buildmgr(
            env,
            "publish",
            str(passing_archive(tmp_path, build_id, "2026-11-01T00:00:00+00:00")),
            "--to",
            str(repo),
            "--sign",
            "ci",
        )
        assert made.returncode == 0, made.stderr
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    served = [first]
    server, url = start(type("S", (_Switchable,), {"root": served}))
    try:
        assert buildmgr(host, "install", "--from", url).returncode == 0
        served[0] = second  # another repository signed by the same key, served in its place
        one_line_fault(buildmgr(host, "install", "--from", url), "another repository is being served in its place")
        assert installed(host) == ["cpu-0000aaaa"]
        forgot = buildmgr(host, "repo", "forget", url)
        assert forgot.returncode == 0, forgot.stderr
        assert buildmgr(host, "install", "--from", url).returncode == 0
    finally:
        server.shutdown()
    assert sorted(installed(host)) == ["cpu-0000aaaa", "cpu-1111bbbb"]  # fmt: skip


# --- 6. two installs at once ------------------------------------------------------------------------------------


def test_two_installs_at_once_both_succeed_one_installing_and_one_finding_it_installed(tmp_path):
    env, pub = keyed(tmp_path)
    repo = tmp_path / "repo"
    archive = passing_archive(tmp_path, "cpu-0000aaaa", "2026-11-01T00:00:00+00:00")
    assert buildmgr(env, "publish", str(archive), "--to", str(repo), "--sign", "ci").returncode == 0
    for round_ in range(3):
        host = make_env(tmp_path / f"host-{round_}")
        assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
        command = [sys.executable, "-m", "buildmgr", "install", "--from", str(repo), "--json"]
        running = [
            subprocess.Popen(command, env=host, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outcomes = []
        for process in running:
            out, err = process.communicate(timeout=600)
            assert process.returncode == 0, err
            outcomes.append(json.loads(out)["attempts"][-1]["outcome"])
        assert sorted(outcomes) == ["already installed", "installed"], outcomes
        assert installed(host) == ["cpu-0000aaaa"] and downloaded(host) == []  # fmt: skip


# --- 7. nothing is parsed before its signature is checked, and nothing nested crashes ------------------------------


NESTED = ("[" * 200_000 + "]" * 200_000).encode()


def test_a_deeply_nested_index_or_attestation_is_one_line_never_a_traceback(tmp_path):
    repo, _, host = published(tmp_path)
    signed_index = (repo / index.INDEX).read_bytes()
    (repo / index.INDEX).write_bytes(NESTED)
    one_line_fault(buildmgr(host, "install", "--from", str(repo)), "does not match its signature")
    one_line_fault(buildmgr(host, "repo", "list", str(repo)), "not JSON")
    (repo / index.INDEX_SIGNATURE).unlink()
    one_line_fault(buildmgr(host, "install", "--from", str(repo), "--allow-unsigned"), "not JSON")
    (repo / index.INDEX).write_bytes(signed_index)
    (repo / index.key_index(_only_key(repo))).write_bytes(
        NESTED
    )  # the key's own copy, read where index.json is unsigned
    one_line_fault(buildmgr(host, "install", "--from", str(repo)), "no index here is signed by a key trusted for it")
    blob = the_blob(repo)
    blob.with_name(blob.name + index.ATTESTATION).write_bytes(NESTED)
    resigned_index(repo)
    one_line_fault(buildmgr(host, "install", "--from", str(repo)), "attestation")
    assert nothing_installed(host)


def _only_key(repo: Path) -> str:
    [copy] = (repo / index.INDEXES).glob("*.json")
    return copy.stem


def resigned_index(repo: Path, entries: tuple[index.Entry, ...] | None = None) -> None:
    """index.json (with `entries` instead of its own) signed again by its publisher's key, the test's: the index a
    publisher whose key was used for a hostile archive would serve."""
    key = signing.read_secret(next(repo.parent.glob("publisher-ci/config/buildmgr/keys/ci.key")).read_text())
    current = index.Index.from_text((repo / index.INDEX).read_bytes())
    written = dataclasses.replace(current, artifacts=entries if entries is not None else current.artifacts)
    data = written.to_text().encode()
    (repo / index.INDEX).write_bytes(data)
    (repo / index.INDEX_SIGNATURE).write_text(key.sign(data, index.signature_comment(written)))


# --- the smaller defects --------------------------------------------------------------------------------------------


def republished(repo: Path, entry: index.Entry, archive: Path) -> index.Entry:
    """`archive` put in place of `entry`'s, its .minisig, attestation and the index signed by the publisher's key."""
    key = signing.read_secret(next(repo.parent.glob("publisher-ci/config/buildmgr/keys/ci.key")).read_text())
    data = archive.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    changed = dataclasses.replace(entry, sha256=digest, size=len(data))
    blob = repo / changed.path
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    original = unpacking.open_artifact(repo / entry.path)  # the receipt the statement is about: unchanged
    statement = index.statement(entry.name, digest, original.receipt, original.receipt_sha256, "test")
    blob.with_name(blob.name + index.MINISIG).write_text(
        key.sign(data, index.artifact_comment(entry.name, digest, entry.summary.id))
    )
    blob.with_name(blob.name + index.ATTESTATION).write_text(json.dumps(signing.envelope(statement, key)))
    current = index.Index.from_text((repo / index.INDEX).read_bytes())
    resigned_index(repo, tuple(changed if e.sha256 == entry.sha256 else e for e in current.artifacts))
    return changed  # fmt: skip


def test_a_hostile_entry_is_a_repository_fault_its_download_deleted_and_nothing_more_tried(tmp_path):
    repo, _, host, entries = two_builds(tmp_path)
    best = entries["cpu-0000aaaa"]
    shutil.copy(repo / best.path, tmp_path / best.name)
    (tmp_path / f"{best.name}.sha256").write_text(f"{best.sha256}  {best.name}\n")

    def escape(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        if not info.name.endswith("/LICENSE"):
            return [(info, data)]
        evil = copy.copy(info)
        evil.name = info.name.split("/")[0] + "/../../evil"
        return [(info, data), (evil, data)]

    hostile = republished(repo, best, repack(tmp_path / best.name, escape))
    result = buildmgr(host, "install", "--from", str(repo), "--json")
    one_line_fault(result, "unsafe entry", "../../evil")
    assert [a["name"] for a in json.loads(result.stdout)["attempts"]] == [hostile.name]
    assert installed(host) == [] and downloaded(host) == [] and not (tmp_path / "host" / "evil").exists()


def test_a_shorter_archive_served_in_place_of_the_published_one_is_said_and_deleted(tmp_path):
    repo, _, host = published(tmp_path)
    blob = the_blob(repo)
    size = blob.stat().st_size
    blob.write_bytes(blob.read_bytes()[: size // 2])
    server, url = serve(repo)
    try:
        for where in (str(repo), url):
            result = buildmgr(host, "install", "--from", where)
            one_line_fault(result, f"{size // 2} bytes", f"its index says {size}", "deleted")
            assert downloaded(host) == [] and not list(Path(host["XDG_CACHE_HOME"]).rglob("*.part"))
    finally:
        server.shutdown()


def test_repo_list_marks_rows_a_trusted_signature_vouches_for(tmp_path):
    repo, _, host = published(tmp_path)
    stranger = make_env(tmp_path / "stranger")

    def verified(env: dict[str, str]) -> list[bool]:
        result = buildmgr(env, "repo", "list", str(repo), "--json")
        assert result.returncode == 0, result.stderr
        return [e["verified"] for e in json.loads(result.stdout)]

    assert verified(host) == [True] and verified(stranger) == [False]
    text = json.loads((repo / index.INDEX).read_text())
    text["artifacts"][0]["signed_by"] = "0123456789ABCDEF"  # a hand-edited claim, the signature left as it was
    (repo / index.INDEX).write_text(json.dumps(text))
    assert verified(host) == [False]
    shown = buildmgr(host, "repo", "list", str(repo))
    assert shown.returncode == 0 and "does not match its signature" in shown.stderr


def test_allow_unsigned_is_never_offered_and_a_first_contact_names_the_key_and_how_to_trust_it(tmp_path):
    repo, pub, _ = published(tmp_path)
    assert pub is not None
    stranger = make_env(tmp_path / "stranger")
    result = buildmgr(stranger, "install", "--from", str(repo))
    key_id = signing.read_public(pub.read_text()).id
    one_line_fault(result, f"signed by {key_id}", f"key trust FILE --for {repo}")
    assert "--allow-unsigned" not in result.stderr + result.stdout
    unsigned_repo, _, host = published(tmp_path / "unsigned", sign=False)
    result = buildmgr(host, "install", "--from", str(unsigned_repo))
    assert result.returncode == 1 and "--allow-unsigned" not in result.stderr + result.stdout
    helped = buildmgr(host, "install", "--help").stdout
    assert "rollback" in helped and "pin" in helped  # what --allow-unsigned turns off, said where it is offered


def test_key_generate_prints_the_id_every_later_message_uses(tmp_path):
    env = make_env(tmp_path)
    made = buildmgr(env, "key", "generate", "ci")
    key_id = signing.read_public((tmp_path / "config" / "buildmgr" / "keys" / "ci.pub").read_text()).id
    assert made.returncode == 0 and key_id in made.stderr + made.stdout


def test_publishing_leaves_no_lock_file_in_the_repository(tmp_path):
    repo, _, _ = published(tmp_path)
    assert not (repo / ".lock").exists()


def test_a_build_listing_its_cpu_features_is_worded_from_its_defines_and_checked_against_this_cpu(tmp_path):
    """The AMX fix's build (GGML_NATIVE=OFF with its build host's features listed) was said to be GGML_NATIVE=ON; a
    host lacking a listed feature would pass the table and die on an illegal instruction."""
    from conftest import make_receipt

    from buildmgr.artifacts import compat
    from buildmgr.core.config import Dirs
    from buildmgr.core.findings import Severity

    listed = {"GGML_NATIVE": "OFF", "GGML_AVX2": "ON", "GGML_AVX512": "ON", "GGML_AMX_TILE": "OFF"}
    summary = index.summary_of(make_receipt(recipe={"resolved_defines": listed}), "0" * 64)
    assert summary.cpu_features == ("GGML_AVX2", "GGML_AVX512")
    dirs = Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "g")

    def cpu(flags: set[str]) -> list[tuple[Severity, str]]:
        found = compat.summary_findings(summary, {}, summary.machine, dirs, {}, frozenset(flags))
        return [(f.severity, f.text()) for f in found]

    avx512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}
    [(severity, said)] = cpu({"avx2"} | avx512)
    assert severity is Severity.NOTE and "GGML_NATIVE=ON" not in said and "AVX2, AVX512" in said
    [(severity, said)] = cpu({"avx2", "avx512f"})
    assert severity is Severity.ERROR and "GGML_AVX512 (avx512cd, avx512vl, avx512dq, avx512bw)" in said
    native = index.summary_of(make_receipt(recipe={"resolved_defines": {"GGML_NATIVE": "ON"}}), "0" * 64)
    [warned] = compat.summary_findings(native, {}, native.machine, dirs, {}, frozenset())
    assert warned.severity is Severity.WARNING and "GGML_NATIVE=ON" in warned.text()


# --- a second trial (an attacker's, on the code above): what it found ---------------------------------------------


def oci_published(tmp_path: Path, registry) -> tuple[dict[str, str], str]:
    """One signed archive in the registry; a host trusting its key; the archive's sha256."""
    env, pub = keyed(tmp_path)
    made = buildmgr(env, "publish", str(artifact(tmp_path)), "--to", registry.url(), "--sign", "ci")
    assert made.returncode == 0, made.stderr
    host = make_env(tmp_path / "host") | FAST
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    [row] = json.loads(buildmgr(host, "repo", "list", registry.url(), "--json").stdout)
    return host, row["sha256"]


def test_signature_and_attestation_files_of_any_bytes_are_one_line_and_the_download_deleted(tmp_path):
    repo, _, host = published(tmp_path)
    signature = (repo / index.INDEX_SIGNATURE).read_bytes()
    (repo / index.INDEX_SIGNATURE).write_bytes(b"untrusted comment: x\n\xff\xfeAAAA\ntrusted comment: y\nZZZZ\n")
    one_line_fault(buildmgr(host, "install", "--from", str(repo)), "does not match its signature")
    listed = buildmgr(host, "repo", "list", str(repo), "--json")  # listed, and nothing of it verified
    assert listed.returncode == 0 and [e["verified"] for e in json.loads(listed.stdout)] == [False], listed.stderr
    (repo / index.INDEX_SIGNATURE).write_bytes(signature)
    blob = the_blob(repo)
    hostile = {"payloadType": signing.IN_TOTO, "payload": "", "signatures": [{"keyid": ["x"], "sig": ""}]}
    blob.with_name(blob.name + index.ATTESTATION).write_text(json.dumps(hostile))
    one_line_fault(buildmgr(host, "install", "--from", str(repo)), "attestation")
    assert downloaded(host) == [] and nothing_installed(host)


def test_a_registry_s_hostile_manifest_or_bare_401_is_one_line(tmp_path, registry):
    host, sha256 = oci_published(tmp_path, registry)
    tag = f"/manifests/sha256-{sha256}"
    manifest = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + "0" * 64}, "layers": {"x": 1}}).encode()
    for given in ((200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, manifest), (401, {}, b"")):
        proxy, _ = start(
            _registry_front(registry.port, lambda path, given=given: given if path.endswith(tag) else None)
        )
        try:
            result = buildmgr(host, "install", "--from", f"oci://127.0.0.1:{proxy.server_address[1]}/llama/builds")
            one_line_fault(result, "failed (")  # oras' own error, or the manifest's shape, said in one line
        finally:
            proxy.shutdown()
    assert nothing_installed(host)


class _SlowHeaders(QuietFiles):
    """Files of `root`; where `slow(path)`, headers that never end, a byte every 0.3 s."""

    root: Path
    slow: Callable[[str], bool]

    def do_GET(self) -> None:
        if not type(self).slow(self.path):
            path = type(self).root / self.path.lstrip("/")
            data = path.read_bytes() if path.is_file() else None
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")
            return
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-a: ")
            for _ in range(600):
                self.wfile.write(b"a")
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass  # the host gave up


def test_a_server_that_dribbles_its_headers_is_cut_off_within_the_timeout(tmp_path):
    repo, _, host = published(tmp_path)
    host |= FAST
    for slow, kinds in ((lambda path: True, ("http", "oci")), (lambda path: path.endswith(".tar.gz"), ("http",))):
        server, url = start(type("H", (_SlowHeaders,), {"root": repo, "slow": staticmethod(slow)}))
        try:
            for where in (url.replace("http", kind, 1) + ("llama/builds" if kind == "oci" else "") for kind in kinds):
                began = time.monotonic()
                one_line_fault(buildmgr(host, "install", "--from", where, timeout=60), "did not come whole in 4 s")
                assert time.monotonic() - began < 15
        finally:
            server.shutdown()
    assert nothing_installed(host)


def test_a_key_pinned_to_one_repository_cannot_hold_another_back(tmp_path):
    """A repository's name is the signer's word: a key trusted for one repository only signs an index claiming
    another's name, at a huge version; the other repository, signed by its own key, still installs."""
    env, pub = keyed(tmp_path)
    other_env, other_pub = keyed(tmp_path, "other")
    first, second = tmp_path / "first", tmp_path / "second"
    made = buildmgr(
        env,
        "publish",
        str(passing_archive(tmp_path, "cpu-0000aaaa", "2026-11-01T00:00:00+00:00")),
        "--to",
        str(first),
        "--sign",
        "ci",
    )
    assert made.returncode == 0, made.stderr
    made = buildmgr(
        other_env,
        "publish",
        str(passing_archive(tmp_path, "cpu-1111bbbb", "2026-11-01T00:00:00+00:00")),
        "--to",
        str(second),
        "--sign",
        "other",
    )
    assert made.returncode == 0, made.stderr
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    assert buildmgr(host, "key", "trust", str(other_pub), "--for", str(second)).returncode == 0
    assert buildmgr(host, "install", "--from", str(first)).returncode == 0
    name = index.Index.from_text((first / index.INDEX).read_bytes()).repository
    forged = dataclasses.replace(
        index.Index.from_text((second / index.INDEX).read_bytes()), repository=name, version=10**9
    )
    data = forged.to_text().encode()
    (second / index.INDEX).write_bytes(data)
    key = signing.read_secret(other_pub.with_suffix(".key").read_text())
    (second / index.INDEX_SIGNATURE).write_text(key.sign(data, index.signature_comment(forged)))
    forged_install = buildmgr(host, "install", "--from", str(second))  # taken: the key vouches for that repository
    assert forged_install.returncode == 0, forged_install.stderr
    other_id = signing.read_public(other_pub.read_text()).id
    remembered = json.loads((tmp_path / "host" / "data" / "buildmgr" / "repositories.json").read_text())
    assert remembered["named"][f"{other_id}/{name}"] == 10**9  # the attack reached this host's memory
    again = buildmgr(host, "install", "--from", str(first))
    assert again.returncode == 0, again.stderr  # fmt: skip


def test_a_registry_s_token_realm_on_another_host_s_plain_http_is_never_contacted(tmp_path, registry, test_host):
    host, _ = oci_published(tmp_path, registry)
    realm = test_host.serve(tmp_path) + "token"
    challenge = (401, {"Www-Authenticate": f'Bearer realm="{realm}",service="x"'}, b"")
    proxy, _ = start(_registry_front(registry.port, lambda path: challenge if "/manifests/" in path else None))
    try:
        listed = buildmgr(host, "repo", "list", f"oci://127.0.0.1:{proxy.server_address[1]}/llama/builds")
        one_line_fault(listed, f"{realm}?", "plain http:// only for a repository on this machine", "not contacted")
    finally:
        proxy.shutdown()
    assert test_host.requests() == []


def test_a_registry_without_an_index_is_not_read_tag_by_tag_unless_asked(tmp_path, registry):
    host, _ = oci_published(tmp_path, registry)
    tags = json.dumps({"name": "llama/builds", "tags": [f"sha256-{i:064x}" for i in range(2000)]}).encode()
    seen: list[str] = []

    def answer(path: str) -> Answer | None:  # index.json unsigned (none), thousands of tags that lead nowhere
        if path.endswith("/manifests/index") or "/manifests/sha256-0000" in path:
            return 404, {}, b""
        return (200, {"Content-Type": "application/json"}, tags) if path.endswith("/tags/list") else None

    proxy, _ = start(_registry_front(registry.port, answer, seen))
    try:
        result = buildmgr(host, "install", "--from", f"oci://127.0.0.1:{proxy.server_address[1]}/llama/builds")
        one_line_fault(result, "no artifact of")  # read from the key's own index; its smoke run fails here
        listed = buildmgr(host, "repo", "list", f"oci://127.0.0.1:{proxy.server_address[1]}/llama/builds")
        one_line_fault(listed, "2000 archive tags, more than the 1000 read one by one")
    finally:
        proxy.shutdown()
    assert sum("/manifests/sha256-0000" in p for p in seen) == 0, len(seen)  # the key's own index was read instead


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("finished", "\ud800"),
        ("backends", ["\x1b]0;pwned\x07\x1b[2J"]),
        ("glibc", "abc"),
        ("device_code", {"CUDA": ["sm_abc"]}),
    ],
)
def test_an_unsigned_index_s_hostile_strings_are_refused_in_one_line_and_never_printed(tmp_path, field, value):
    repo, _, host = published(tmp_path, sign=False)
    data = json.loads((repo / index.INDEX).read_text())
    summary = data["artifacts"][0]["summary"]
    (summary["runtime"] if field in ("glibc", "device_code") else summary)[field] = value
    (repo / index.INDEX).write_text(json.dumps(data))
    for command in (["repo", "list", str(repo)], ["install", "--from", str(repo), "--allow-unsigned", "--dry-run"]):
        result = buildmgr(host, *command)
        one_line_fault(result)
        assert "\x1b" not in result.stdout + result.stderr


def test_repo_list_verifies_no_index_this_host_would_refuse(tmp_path):
    env, pub = keyed(tmp_path)
    repo = tmp_path / "repo"
    assert buildmgr(env, "publish", str(artifact(tmp_path)), "--to", str(repo), "--sign", "ci").returncode == 0
    old = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    assert buildmgr(env, "publish", "--to", str(repo), "--sign", "ci").returncode == 0  # version 2
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    buildmgr(host, "install", "--from", str(repo))  # version 2 taken (its smoke run fails: nothing installed)
    for path, data in old.items():
        path.write_bytes(data)
    listed = buildmgr(host, "repo", "list", str(repo), "--json")
    assert [e["verified"] for e in json.loads(listed.stdout)] == [False]
    assert "rollback" in buildmgr(host, "repo", "list", str(repo)).stderr


def test_one_address_in_other_spellings_is_one_location_and_a_file_url_names_no_host():
    from buildmgr.core.errors import UserError
    from buildmgr.trust import repo_location

    assert repo_location.identity("http://[0:0:0:0:0:0:0:1]:8080/x") == repo_location.identity("http://[::1]:8080/x/")
    assert repo_location.identity("https://bücher.example/") == repo_location.identity("https://xn--bcher-kva.example/")
    with pytest.raises(UserError, match="file://"):
        repo_location.identity("file://tmp/x")


def test_a_pin_holds_under_every_spelling_of_its_url(tmp_path):
    """Pinned to one key as http://127.0.0.1:P/, a repository reached as HTTP://127.0.0.1:P/./ still takes that key
    alone: a spelling that is a new location to the pins would take any key trusted for all repositories."""
    repo, _, host = published(tmp_path)  # signed by the publisher's key "ci", which this host trusts anywhere
    _, pinned_pub = keyed(tmp_path, "pinned")
    server, url = serve(repo)
    try:
        assert buildmgr(host, "key", "trust", str(pinned_pub), "--for", url).returncode == 0
        port = server.server_address[1]
        result = buildmgr(host, "install", "--from", f"HTTP://127.0.0.1:{port}/./")
        one_line_fault(result, f"is pinned to {signing.read_public(pinned_pub.read_text()).id}")
    finally:
        server.shutdown()
    assert nothing_installed(host)


def test_within_cuts_a_block_off_and_leaves_no_timer_or_handler_behind():
    import signal
    import threading

    from buildmgr.artifacts.repo.net import Limits, within
    from buildmgr.core.errors import NetworkFault

    before = signal.getsignal(signal.SIGALRM)
    began = time.monotonic()
    with pytest.raises(NetworkFault, match=r"did not come whole in 0\.4 s"), within(Limits(0.2), "x"):
        time.sleep(5)
    assert time.monotonic() - began < 2
    quick = within(Limits(0.2), "x")
    with quick:
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) == before
    quick._expire(signal.SIGALRM, None)  # a signal that came as the block ended: let go
    with within(Limits(5), "outer"):
        inner = within(Limits(0.1), "inner")
        with inner:
            assert not inner.armed  # the outer one bounds it
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # the outer timer still runs
    armed_in_thread: list[bool] = []

    def in_a_thread() -> None:
        block = within(Limits(0.1), "x")
        with block:
            armed_in_thread.append(block.armed)

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert armed_in_thread == [False]


class _NoSignatures(QuietFiles):
    """Files of `root`, but a connection dropped where a signature file is asked for: the network fails after the
    archive came whole."""

    root: Path

    def do_GET(self) -> None:
        if self.path.endswith((index.MINISIG, index.ATTESTATION)) and "/blobs/" in self.path:
            self.connection.shutdown(2)
            return
        path = type(self).root / self.path.lstrip("/")
        data = path.read_bytes() if path.is_file() else b""
        self.send_response(200 if path.is_file() else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_network_that_fails_after_the_archive_came_keeps_it_for_the_next_try(tmp_path):
    repo, _, host = published(tmp_path)
    server, url = start(type("H", (_NoSignatures,), {"root": repo}))
    try:
        one_line_fault(buildmgr(host, "install", "--from", url), "cannot reach")
    finally:
        server.shutdown()
    [kept] = downloaded(host)
    assert archives.sha256_file(kept) == the_blob(repo).parent.name  # whole, and checked again by the next try


def test_an_old_pin_written_with_a_user_in_its_url_holds_where_that_repository_is_reached_today():
    from buildmgr.trust import repo_location

    assert (
        repo_location.canonical("oci://user@Registry.example:5000/ml/llama") == "oci://registry.example:5000/ml/llama"
    )


# --- a third trial (an attacker's, of the code after the second): what it found ------------------------------------


class _Chunked(QuietFiles):
    """Files of `root`, the archive sent chunked and then held: `mode` "trailers" sends the whole archive, its last
    chunk, then trailer lines without end; "size" sends half of it, then a chunk-size line a byte at a time."""

    root: Path
    mode: str

    def do_GET(self) -> None:
        path = type(self).root / self.path.lstrip("/")
        data = path.read_bytes() if path.is_file() else None
        if data is None or not path.name.endswith(".tar.gz"):
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")
            return
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = data if type(self).mode == "trailers" else data[: len(data) // 2]
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(sent), sent))
            self.wfile.write(b"0\r\n" if type(self).mode == "trailers" else b"")
            for _ in range(2000):
                self.wfile.write(b"X-Trailer: aaaa\r\n" if type(self).mode == "trailers" else b"0")
                self.wfile.flush()
                time.sleep(0.01 if type(self).mode == "trailers" else 0.3)
        except OSError:
            pass  # the host gave up


def test_a_chunked_archive_that_never_ends_its_trailers_or_a_size_line_is_cut_off(tmp_path):
    repo, _, host = published(tmp_path)
    host |= FAST
    for mode in ("trailers", "size"):
        server, url = start(type("H", (_Chunked,), {"root": repo, "mode": mode}))
        try:
            began = time.monotonic()
            one_line_fault(buildmgr(host, "install", "--from", url, timeout=90))
            assert time.monotonic() - began < 20, mode
        finally:
            server.shutdown()
    assert nothing_installed(host)


class _Odd(QuietFiles):
    """Files of `root`, the archive answered with `header` (a name and a value) instead of its file."""

    root: Path
    header: tuple[str, str]
    code: int = 200

    def do_GET(self) -> None:
        path = type(self).root / self.path.lstrip("/")
        data = path.read_bytes() if path.is_file() else b""
        odd = path.name.endswith(".tar.gz") or (type(self).code != 200 and path.name == index.INDEX)
        self.send_response(type(self).code if odd else (200 if path.is_file() else 404))
        name, value = type(self).header if odd else ("Content-Length", str(len(data)))
        self.send_header(name, value)
        if name != "Content-Length":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data if not odd or type(self).code == 200 else b"")


def test_a_content_length_of_other_digits_or_a_redirect_to_no_url_is_one_line(tmp_path):
    repo, _, host = published(tmp_path)
    for header, code in ((("Content-Length", "\u00b9\u00b2"), 200), (("Location", "http://[::1/x"), 302)):
        server, url = start(type("H", (_Odd,), {"root": repo, "header": header, "code": code}))
        try:
            result = buildmgr(host, "install", "--from", url, "--json")
            one_line_fault(result)
            assert isinstance(json.loads(result.stdout), dict)  # --json prints JSON, failing or not
        finally:
            server.shutdown()
    assert nothing_installed(host)


@pytest.mark.parametrize("size", [10**400, -1])
def test_an_index_whose_size_is_no_file_s_is_refused_as_it_is_read(tmp_path, size):
    repo, _, host = published(tmp_path, sign=False)
    data = json.loads((repo / index.INDEX).read_text())
    data["artifacts"][0]["size"] = size
    (repo / index.INDEX).write_text(json.dumps(data))
    for command in (["repo", "list", str(repo)], ["install", "--from", str(repo), "--allow-unsigned"]):
        one_line_fault(buildmgr(host, *command), "size")


def test_forgetting_a_location_never_lets_an_index_from_before_names_in_there(tmp_path):
    """`repo forget` is what the refusal of another repository suggests: it must not open the location to an
    unnamed index (one from before indexes named their repository, replayed)."""
    repo, pub, host = published(tmp_path)
    assert pub is not None
    unnamed = dataclasses.replace(index.Index.from_text((repo / index.INDEX).read_bytes()), repository=None)
    assert buildmgr(host, "install", "--from", str(repo)).returncode == 1  # taken (its smoke run fails here)
    assert buildmgr(host, "repo", "forget", str(repo)).returncode == 0
    data = unnamed.to_text().encode()
    (repo / index.INDEX).write_bytes(data)
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    (repo / index.INDEX_SIGNATURE).write_text(key.sign(data, index.signature_comment(unnamed)))
    one_line_fault(buildmgr(host, "install", "--from", str(repo), "--dry-run"), "names no repository")


def test_a_proxy_named_in_the_environment_never_carries_plain_http(tmp_path, registry, test_host):
    repo, _, host = published(tmp_path)
    proxy = test_host.serve(tmp_path, 3128)
    server, url = serve(repo)
    proxied = host | {"http_proxy": proxy, "HTTP_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""}
    try:
        for where in (url, registry.url()):
            listed = buildmgr(proxied, "repo", "list", where)
            assert listed.returncode in (0, 2), listed.stderr  # read directly (the registry holds nothing: exit 2)
    finally:
        server.shutdown()
    assert test_host.requests() == []


def test_a_timer_the_parent_left_running_does_not_turn_the_deadline_off(tmp_path):
    import signal

    repo, _, host = published(tmp_path)
    server, url = start(type("H", (_SlowHeaders,), {"root": repo, "slow": staticmethod(lambda path: True)}))
    try:
        began = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "buildmgr", "repo", "list", url],
            env=host | FAST,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda: signal.setitimer(signal.ITIMER_REAL, 1000),  # the child's own: as a parent leaves it
            check=False,
        )
        one_line_fault(result, "did not come whole in 4 s")
        assert time.monotonic() - began < 15
    finally:
        server.shutdown()


def test_a_build_number_in_other_digits_is_a_user_error(tmp_path):
    from conftest import assert_user_error

    repo, _, host = published(tmp_path)
    assert_user_error(buildmgr(host, "install", "\u00b2", "--from", str(repo)))


def test_a_defect_under_a_registry_call_is_a_traceback_never_a_registry_fault_nor_retried(registry, monkeypatch):
    """Issue #67: every exception under an OCI call was said as one line (`… failed (…)`), and a publish retried any
    exception 20 times: a defect of buildmgr's own (a TypeError) read as the registry's answer. Only what oras and the
    libraries under it raise for an answer is the registry's; anything else goes up as itself, at once."""
    from buildmgr.artifacts import repo
    from buildmgr.artifacts.repo import oci_index, oci_store
    from buildmgr.core.errors import RepositoryFault

    source = repo.open_repo(registry.url())
    calls = []

    def defect(*args, **kwargs):
        calls.append(args)
        raise TypeError("a defect here")

    monkeypatch.setattr(oci_store.Remote, "tags", defect)
    with pytest.raises(TypeError, match="a defect here"):
        source.require()
    monkeypatch.setattr(oci_index, "_rebuild", defect)
    calls.clear()
    with pytest.raises(TypeError, match="a defect here"):
        oci_index.push_index(source._remote(), None, 30, None)
    assert len(calls) == 1  # not retried

    def answer(*args, **kwargs):  # what oras raises for a status it did not expect
        raise ValueError("Issue with http://127.0.0.1/v2/: Bad Request")

    monkeypatch.setattr(oci_store.Remote, "tags", answer)
    with pytest.raises(RepositoryFault, match="reading its tags failed"):
        source.require()
