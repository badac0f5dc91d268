"""Issue #50, item 1, against real directory repositories through the CLI (and Debian's docker-registry on
loopback): the index is signed, with a version that only grows and an expiry. A host remembers the highest version
it saw of each repository and refuses an older index (a replay) or an expired one (a freeze), with nothing
installed; entries are judged from the signed index only (a summary or size changed in it is refused before any
download); a key that signed the index last is still read by hosts that trust only it; and plain http:// is for a
repository on this machine only."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import assert_user_error, buildmgr, make_env
from test_repository import artifact, downloaded, keyed, nothing_installed, published, refused
from test_repository_bounds import dirs_of, passing_archive

from buildmgr import store
from buildmgr.artifacts import index
from buildmgr.artifacts.repo import open_repo
from buildmgr.trust import signing

MINISIG = index.INDEX + ".minisig"


def publish(env: dict[str, str], repo: Path | str, *args: str) -> None:
    result = buildmgr(env, "publish", *args, "--to", str(repo))
    assert result.returncode == 0, result.stderr


def resign(repo: Path, pub: Path, **changes: object) -> dict:
    """The index as its publisher's key would sign it with `changes` (a publisher's own act: no attack)."""
    key = signing.read_secret(pub.with_suffix(".key").read_text())
    data = json.loads((repo / index.INDEX).read_text()) | changes
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    (repo / index.INDEX).write_text(text)
    (repo / MINISIG).write_text(key.sign(text.encode(), "index.json"))
    return data


def index_files(repo: Path) -> dict[Path, bytes]:
    """Every file of the repository but its blobs: what an attacker replays to roll a host back."""
    return {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and index.BLOBS not in str(p)}


def installed(host: dict[str, str]) -> list[str]:
    return [b.id for b in store.installed(dirs_of(host))]


# --- rollback ----------------------------------------------------------------------------------------------------


def test_a_replayed_older_index_is_refused_and_nothing_more_is_installed(tmp_path):
    """The repository served as it was before the newer build was published (its index validly signed then): a
    host that saw the newer index refuses it, instead of installing the older build."""
    env, pub = keyed(tmp_path)
    repo = tmp_path / "repo"
    publish(env, repo, str(passing_archive(tmp_path, "cpu-0000aaaa", "2026-11-01T00:00:00+00:00")), "--sign", "ci")
    earlier = index_files(repo)
    publish(env, repo, str(passing_archive(tmp_path, "cpu-1111bbbb", "2026-12-01T00:00:00+00:00")), "--sign", "ci")
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    done = buildmgr(host, "install", "--from", str(repo))
    assert done.returncode == 0, done.stderr
    assert installed(host) == ["cpu-1111bbbb"]
    seen = json.loads((dirs_of(host).data / "repositories.json").read_text())
    assert seen["repositories"] == {str(repo): 2}
    for path in index_files(repo):
        path.unlink()
    for path, data in earlier.items():
        path.write_bytes(data)
    assert open_repo(str(repo)).listing().version == 1
    result = buildmgr(host, "install", "--from", str(repo))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"{repo}: its index is version 1, older than version 2 this host saw before: an old copy of the repository "
            "is being served (a rollback); nothing was installed"
        )
    ), result.stderr
    assert installed(host) == ["cpu-1111bbbb"] and downloaded(host) == []
    # a dry run is refused alike, and a host that never saw version 2 takes version 1
    assert buildmgr(host, "install", "--from", str(repo), "--dry-run").returncode == 1
    fresh = make_env(tmp_path / "fresh")
    assert buildmgr(fresh, "key", "trust", str(pub)).returncode == 0
    assert buildmgr(fresh, "install", "--from", str(repo), "--dry-run").returncode == 0
    assert not (tmp_path / "fresh" / "data").exists()  # a dry run remembers nothing


def test_a_replayed_older_index_is_refused_in_an_oci_registry(tmp_path, registry):
    env, pub = keyed(tmp_path)
    url = registry.url()
    publish(env, url, str(passing_archive(tmp_path, "cpu-0000aaaa", "2026-11-01T00:00:00+00:00")), "--sign", "ci")
    where = f"http://127.0.0.1:{registry.port}/v2/llama/builds/manifests/index"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    with urllib.request.urlopen(urllib.request.Request(where, headers=accept)) as response:
        earlier, kind = response.read(), response.headers["Content-Type"]
    publish(env, url, str(passing_archive(tmp_path, "cpu-1111bbbb", "2026-12-01T00:00:00+00:00")), "--sign", "ci")
    host = make_env(tmp_path / "host")
    assert buildmgr(host, "key", "trust", str(pub)).returncode == 0
    done = buildmgr(host, "install", "--from", url)
    assert done.returncode == 0, done.stderr
    assert installed(host) == ["cpu-1111bbbb"]
    # the registry's tag moved back to the first index's manifest, which it still holds
    put = urllib.request.Request(where, data=earlier, method="PUT", headers={"Content-Type": kind})
    urllib.request.urlopen(put).close()
    assert open_repo(url).listing().version == 1
    result = buildmgr(host, "install", "--from", url)
    assert result.returncode == 1 and "older than version 2 this host saw before" in result.stderr, result.stderr
    assert installed(host) == ["cpu-1111bbbb"] and downloaded(host) == []


# --- freeze ------------------------------------------------------------------------------------------------------


def test_an_expired_index_is_refused_until_its_publisher_signs_it_again(tmp_path):
    repo, pub, host = published(tmp_path)
    assert pub is not None
    signed = json.loads((repo / index.INDEX).read_text())
    expires = datetime.fromisoformat(signed["expires"])
    assert timedelta(days=29) < expires - datetime.now(UTC) <= timedelta(days=30)  # the default: 30 days
    resign(repo, pub, version=signed["version"] + 1, expires="2026-01-01T00:00:00+00:00")  # as if signed long ago
    refused(
        host,
        repo,
        f"{repo}: its index expired on 2026-01-01T00:00:00+00:00: the repository is no longer kept up to date, or an "
        "old copy is being served; its publisher signs it again with 'buildmgr publish --to REPO --sign NAME'",
        extra=("--dry-run",),
    )
    assert downloaded(host) == []
    env = make_env(tmp_path / "publisher-ci")
    again = buildmgr(env, "publish", "--to", str(repo), "--sign", "ci", "--expires", "2")  # no archive: the index
    assert again.returncode == 0, again.stderr
    assert "index.json version 3" in again.stdout
    renewed = json.loads((repo / index.INDEX).read_text())
    assert renewed["version"] == 3 and renewed["artifacts"] == signed["artifacts"]
    assert timedelta(days=1) < datetime.fromisoformat(renewed["expires"]) - datetime.now(UTC) <= timedelta(days=2)
    assert buildmgr(host, "install", "--from", str(repo), "--dry-run").returncode == 0
    assert_user_error(buildmgr(env, "publish", "--to", str(repo)), "publish needs an ARTIFACT")
    assert_user_error(buildmgr(env, "publish", "--to", str(repo), "--sign", "ci", "--expires", "0"), "--expires 0")


# --- entries are judged from the signed index only ---------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [("glibc", "2.17"), ("build_number", 99999), ("size", 1)],
    ids=["a summary's glibc", "a summary's build number", "the size"],
)
def test_a_changed_index_is_refused_before_any_download(tmp_path, field, value):
    repo, pub, host = published(tmp_path)
    data = json.loads((repo / index.INDEX).read_text())
    [entry] = data["artifacts"]
    where = {"glibc": entry["summary"]["runtime"], "build_number": entry["summary"], "size": entry}[field]
    where[field] = value
    (repo / index.INDEX).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    refused(
        host,
        repo,
        f"{repo}: its index.json does not match its signature by {signing.read_public(pub.read_text()).id}: it was "
        "changed after it was signed; nothing was installed",
    )
    assert downloaded(host) == [] and not (Path(host["XDG_CACHE_HOME"]) / "buildmgr" / "downloads").exists()


def test_a_host_that_trusts_only_the_last_signer_of_the_index_reads_the_index_that_key_signed(tmp_path):
    """An unsigned archive published after a signed one: the index is unsigned now, and a host that trusts the key
    reads the index that key signed last (it lists the signed archive only); --allow-unsigned reads the newest."""
    repo, _, host = published(tmp_path)
    [signed] = open_repo(str(repo)).listing().artifacts
    env = make_env(tmp_path / "publisher-ci")
    later = buildmgr(env, "publish", str(artifact(tmp_path, "b")), "--to", str(repo))
    assert later.returncode == 0, later.stderr
    assert not (repo / MINISIG).exists() and len(open_repo(str(repo)).listing().artifacts) == 2
    dry = buildmgr(host, "install", "--from", str(repo), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert [c["sha256"] for c in json.loads(dry.stdout)["candidates"]] == [signed.sha256]
    allowed = buildmgr(host, "install", "--from", str(repo), "--dry-run", "--json", "--allow-unsigned")
    assert len(json.loads(allowed.stdout)["candidates"]) == 2
    stranger = make_env(tmp_path / "stranger")
    refused(stranger, repo, f"{repo}: no index here is signed by a key trusted for it: its index.json is unsigned;")
    assert nothing_installed(stranger)


# --- plain http only on this machine -----------------------------------------------------------------------------


def test_plain_http_is_refused_unless_the_repository_is_on_this_machine(tmp_path):
    _, pub = keyed(tmp_path)
    host = make_env(tmp_path / "host")
    for url in ("http://buildmgr.invalid/llama/", "http://10.1.2.3:8080/"):
        for command in (["repo", "list", url], ["install", "--from", url], ["key", "trust", str(pub), "--for", url]):
            assert_user_error(
                buildmgr(host, *command),
                f"{url}: plain http:// only for a repository on this machine (127.0.0.0/8, ::1, localhost): "
                "use https://",
            )
    assert not (tmp_path / "host").exists()
    for url in ("http://127.0.0.2:1/", "http://[::1]:1/", "http://localhost:1/", "oci://127.0.0.2:1/a/b"):
        down = buildmgr(host, "repo", "list", url)
        assert down.returncode == 1 and down.stderr.strip().endswith("connection refused (is a server running there?)")
