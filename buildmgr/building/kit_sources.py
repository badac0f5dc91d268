"""Where a toolchain's packages come from (each backend's `Backend.kits` says what): the request (`NAME[==VERSION]`),
then the packages fetched with the user's own pip (its index and hashes), from this Python's own installed wheels
(checked against their RECORD, no network), or with a private apt configuration of this host's distribution, into a
staging folder. `kits` lays them out, publishes and checks them."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.core import proc
from buildmgr.core.errors import BuildFailed, UserError
from buildmgr.core.fsutil import sha256_file
from buildmgr.store.receipt import Package
from buildmgr.tools.kit_spec import AptSource, Kit, PipSource

if TYPE_CHECKING:
    from buildmgr.core.progress import Reporter

_REQUEST = re.compile(r"(?P<name>[a-z][a-z0-9-]*)(?:==(?P<version>[^\s=]+))?")
_RELEASE = re.compile(r"(?P<major>\d+)(?:\.(?P<minor>\d+))?")
_NO_NETWORK = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|Name or service not "
    r"known|Network is unreachable|Connection refused|ConnectTimeout|ProxyError|No route to host|Max retries exceeded|"
    r"Could not resolve|Failed to fetch|Unable to connect"
)
_DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded")


def all_kits() -> tuple[Kit, ...]:
    return backends.all_kits()


# --- what was asked -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KitRequest:
    kit: Kit
    version: str | None  # None: the newest there is

    @property
    def text(self) -> str:
        return self.kit.name + (f"=={self.version}" if self.version else "")


def parse_request(text: str) -> KitRequest:
    """`cuda`, `cuda==13.0`, `cuda-runtime==12.8`, `vulkan` → the kit and the release asked for."""
    kits = {kit.name: kit for kit in all_kits()}
    found = _REQUEST.fullmatch(text.strip())
    if found is None or found["name"] not in kits:
        raise UserError(f"unknown toolchain {text!r}: buildmgr can add {', '.join(kits)} (e.g. {example()})")
    kit, version = kits[found["name"]], found["version"]
    if version is not None and isinstance(kit.source, PipSource):
        release = _RELEASE.fullmatch(version)
        why = kit.source.refused.get(int(release["major"])) if release else None
        if why:
            works = f"{kit.name}=={kit.source.example}"
            runtime = f" (the runtime alone: {kit.runtime}=={version})" if kit.runtime else ""
            raise UserError(f"{text}: {why}; {works} builds{runtime}")
        if release is None or int(release["major"]) not in kit.source.releases:
            majors = " and ".join(str(major) for major in kit.source.releases)
            raise UserError(
                f"{text}: unknown {kit.backend} release {version!r}; buildmgr lays out {kit.source.vendor}'s wheels "
                f"of {kit.backend} "
                f"{majors} for {kit.name}, asked as MAJOR or MAJOR.MINOR (e.g. {kit.name}=={kit.source.example})"
            )
    return KitRequest(kit, version)


def example() -> str:
    """A request to show in messages: the first kit from PyPI at its example release (cuda==13.0)."""
    return kit_request(next(k for k in all_kits() if isinstance(k.source, PipSource)))


def kit_named(name: str) -> Kit:
    return {kit.name: kit for kit in all_kits()}[name]


@dataclass(frozen=True)
class FetchedPackages:
    folder: Path  # what the packages unpacked to, for the kit's layout
    packages: tuple[Package, ...]
    source: str


@dataclass(frozen=True)
class Unserved:
    """Why this Python's installed wheels cannot make the toolchain asked for, so pip downloads them instead."""

    request: str
    why: str

    def __str__(self) -> str:
        return f"this Python's installed wheels cannot serve {self.request}: {self.why}; pip downloads them"


def _serves(have: str, asked: str) -> bool:
    """A runtime wheel of the same major and at least the minor asked for runs what that release built."""
    have_parts, asked_parts = have.split("."), asked.split(".")
    if have_parts[0] != asked_parts[0]:
        return False
    return len(asked_parts) < 2 or (len(have_parts) > 1 and int(have_parts[1]) >= int(asked_parts[1]))


def _tail(log: Path, lines: int = 8) -> tuple[str, ...]:
    return tuple(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:])


def pip(
    source: PipSource, request: KitRequest, staging: Path, environ: Mapping[str, str], reporter: Reporter, log: Path
) -> FetchedPackages:
    """The user's own pip installs the wheels (its index settings apply; it checks each wheel against the index's
    hash) into the staging folder; its report says what went in."""
    requirement = f"{source.package}[{','.join(source.extras)}]" + (f"=={request.version}.*" if request.version else "")
    site, report = staging / "site", staging / "pip-report.json"
    tmp = staging / "tmp"  # pip unpacks here, so a full disk shows on this disk, inside the staging folder
    tmp.mkdir()
    command = [
        sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile",
        "--only-binary", ":all:", "--no-warn-script-location", "--progress-bar", "off",
        "--target", str(site), "--report", str(report), requirement,
    ]  # fmt: skip
    env = dict(environ) | {"TMPDIR": str(tmp)}
    with reporter.phase("pip install", requirement):
        code = proc.stream(command, log, env=env, feed=_pip_progress(reporter))
    output = log.read_text(encoding="utf-8", errors="replace")
    if code != 0:
        raise _pip_failure(output, requirement, source, request, log)
    packages = []
    for item in json.loads(report.read_text(encoding="utf-8"))["install"]:
        info = item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        meta = item["metadata"]
        packages.append(Package(meta["name"], meta["version"], hashes.get("sha256"), info.get("url", "")))
    return FetchedPackages(site, tuple(sorted(packages, key=lambda p: p.name)), f"pip {requirement}")


def installed_wheels(
    source: PipSource, request: KitRequest, staging: Path, reporter: Reporter
) -> FetchedPackages | Unserved | None:
    """The wheels this Python has installed already, where it has every one of them for the release asked: each
    file is copied after its sha256 matched the wheel's RECORD (what pip checked when it installed it). No network.
    Unserved says which wheel is missing or of another release; None: the kit takes none from here."""
    import base64
    import importlib.metadata

    if not source.wheels or request.version is None:
        return None
    major = request.version.split(".")[0]
    chosen = []
    for wheel in source.wheels:
        found = None
        for name in (wheel, wheel + source.wheel_suffix.format(major=major)):
            try:
                found = importlib.metadata.distribution(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        # the runtime wheel of that release or a newer minor (13.0.96, 13.2.51 for 13.0); cuBLAS of the same major
        release = request.version if wheel == source.wheels[0] else major
        if found is None:
            return Unserved(request.text, f"{wheel} is not installed")
        if not _serves(found.version, release):
            newer = f" or a newer {major}.x" if "." in release else ".x"
            return Unserved(request.text, f"{wheel} {found.version} is not {release}{newer}")
        if not found.files:
            return Unserved(request.text, f"{wheel} {found.version} has no RECORD to check its files against")
        chosen.append(found)
    site = staging / "site"
    packages = []
    with reporter.phase(
        "copy", f"this Python's installed wheels: {', '.join(f'{d.name} {d.version}' for d in chosen)}"
    ):
        for dist in chosen:
            info = None
            for file in dist.files or ():
                source_path = Path(str(dist.locate_file(file)))
                if ".dist-info" in file.parts[0]:
                    info = source_path.parent
                    continue
                if file.parts[0] != source.wheel_folder or file.hash is None or file.hash.mode != "sha256":
                    continue
                digest = base64.urlsafe_b64encode(bytes.fromhex(sha256_file(source_path))).rstrip(b"=").decode()
                if digest != file.hash.value:
                    raise UserError(
                        f"{source_path}: differs from what pip installed ({dist.name} {dist.version}'s RECORD); "
                        f"reinstall it (pip install --force-reinstall {dist.name}=={dist.version}); nothing was added"
                    )
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source_path, target)
            if info is not None:
                shutil.copytree(info, site / info.name)
            packages.append(Package(dist.name, dist.version, None, f"installed: {info or dist.name}"))
    return FetchedPackages(site, tuple(sorted(packages, key=lambda p: p.name)), "this Python's installed wheels")


def _pip_progress(reporter: Reporter) -> Callable[[str], None]:
    def feed(line: str) -> None:
        if line.startswith(("Downloading ", "Collecting ", "Installing collected")):
            reporter.say(f"  {line.strip()}")

    return feed


def _pip_failure(output: str, requirement: str, source: PipSource, request: KitRequest, log: Path) -> Exception:
    if _DISK_FULL.search(output):
        return UserError(f"the disk filled up while pip installed {requirement}: free some space; nothing was added")
    versions = re.search(r"\(from versions: ([^)]*)\)", output)
    if versions and versions.group(1).strip() == "none":
        if _NO_NETWORK.search(output):
            return UserError(
                f"pip could not reach its package index for {source.package} (no network?): check the connection or "
                f"pip's index settings (pip config list); nothing was added; the log: {log}"
            )
        return UserError(
            f"pip found no {source.package} wheels (from versions: none): is there a network, and does pip's index "
            f"(pip config list) carry {source.vendor}'s wheels? nothing was added; the log: {log}"
        )
    if versions:
        releases = []
        for version in versions.group(1).split(","):
            found = _RELEASE.match(version.strip())
            if found and found["minor"] is not None and int(found["major"]) in source.releases:
                release = f"{found['major']}.{found['minor']}"
                releases += [release] if release not in releases else []
        return UserError(
            f"pip cannot find {source.package}=={request.version}.*; the releases it can install: "
            f"{', '.join(releases) or 'none that buildmgr lays out'}; nothing was added"
        )
    return BuildFailed(f"pip could not install {requirement}; nothing was added", log=log, tail=_tail(log))


# --- apt: header packages of a newer release of this host's distribution ----------------------------------------------


def _os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    return {key: value.strip('"') for key, value in re.findall(r"^(\w+)=(.*)$", text, flags=re.MULTILINE)}


def apt_mirror(sources_list: str, sources_parts: Mapping[str, str]) -> str | None:
    """The archive this host's apt uses (not its security archive), from deb822 .sources files or one-line lists."""
    for text in sources_parts.values():
        for uri in re.findall(r"^URIs:\s*(\S+)", text, flags=re.MULTILINE):
            if "security" not in uri:
                return str(uri)
    for uri in re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", sources_list, flags=re.MULTILINE):
        if "security" not in uri:
            return str(uri)
    return None


def _host_mirror() -> str | None:
    parts = {}
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        parts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
    try:
        listed = Path("/etc/apt/sources.list").read_text(encoding="utf-8", errors="replace")
    except OSError:
        listed = ""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.list")):
        listed += "\n" + path.read_text(encoding="utf-8", errors="replace")
    return apt_mirror(listed, parts)


def apt(
    source: AptSource, request: KitRequest, staging: Path, environ: Mapping[str, str], reporter: Reporter, log: Path
) -> FetchedPackages:
    name = request.kit.name
    apt_get, dpkg_deb = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if apt_get is None or dpkg_deb is None:
        raise UserError(
            f"toolchain add {name} downloads Debian/Ubuntu packages with apt-get, and this host has none: "
            + source.elsewhere
        )
    release = _os_release()
    distro, codename = release.get("ID", "?"), release.get("VERSION_CODENAME", "?")
    target = source.release.get(codename)
    if target is None or distro not in source.keyrings:
        known = ", ".join(sorted(source.release))
        raise UserError(
            f"toolchain add {name} knows the releases {known}, and this host is {distro} {codename}: "
            + source.elsewhere
        )
    keyring = source.keyrings[distro]
    mirror = _host_mirror()
    if mirror is None or not os.path.isfile(keyring):
        raise UserError(
            f"toolchain add {name} needs this host's apt sources and {keyring}: apt-get install {distro}-archive-keyring"
        )
    work = staging / "apt"
    for folder in ("lists/partial", "cache/archives/partial", "debs"):
        (work / folder).mkdir(parents=True)
    (work / "sources.list").write_text(
        f"deb [signed-by={keyring}] {mirror} {target} {source.components[distro]}\n", encoding="utf-8"
    )
    arch = proc.run(["dpkg", "--print-architecture"], timeout=30).stdout.strip() or "amd64"
    private = [
        "-o", f"Dir::Etc::SourceList={work / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
        "-o", f"APT::Architecture={arch}", "-o", "Debug::NoLocking=1",
    ]  # fmt: skip
    env = dict(environ) | {"TMPDIR": str(staging)}
    with reporter.phase("apt download", f"{' '.join(source.packages)} from {target} ({mirror})"):
        for command, cwd in (
            ([apt_get, *private, "update", "-q"], None),
            ([apt_get, *private, "download", "-q", *source.packages], work / "debs"),
        ):
            ran = proc.run(command, timeout=900, env=env, cwd=cwd)
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"$ {' '.join(command)}\n{ran.output}\n")
            # apt-get update exits 0 when it reached no mirror; its warnings say so
            if not ran.ok or re.search(r"^[WE]: (Failed to fetch|Some index files)", ran.output, flags=re.MULTILINE):
                raise _apt_failure(ran.output, mirror, target, log)
    fetched = staging / "unpacked"
    packages = []
    for deb in sorted((work / "debs").glob("*.deb")):
        fields = proc.run([dpkg_deb, "-f", str(deb), "Package", "Version"], timeout=60).stdout
        meta = dict(re.findall(r"^(\w+): (.*)$", fields, flags=re.MULTILINE))
        packages.append(
            Package(meta.get("Package", deb.name), meta.get("Version", "?"), sha256_file(deb), f"{mirror} {target}")
        )
        ran = proc.run([dpkg_deb, "-x", str(deb), str(fetched)], timeout=300)
        if not ran.ok:
            raise _apt_failure(ran.output, mirror, target, log)
    return FetchedPackages(fetched, tuple(packages), f"apt {target} ({mirror}): {' '.join(source.packages)}")


def _apt_failure(output: str, mirror: str, release: str, log: Path) -> UserError:
    if _DISK_FULL.search(output):
        return UserError("the disk filled up while apt downloaded the packages: free some space; nothing was added")
    if _NO_NETWORK.search(output):
        return UserError(f"apt could not reach {mirror} for {release} (no network?); nothing was added; the log: {log}")
    last = next((line for line in reversed(output.strip().splitlines()) if line.strip()), "no output")
    return UserError(f"apt could not download from {mirror} {release}: {last}; nothing was added; the log: {log}")


def pypi_kits(names: tuple[str, ...]) -> tuple[Kit, ...]:
    """The build toolchains `toolchain add` makes from PyPI for these backends (CUDA's), so a stock runner builds them."""
    return tuple(
        kit for name in names for kit in backends.backend(name).kits if kit.builds and isinstance(kit.source, PipSource)
    )


def kit_request(kit: Kit) -> str:
    """The request that adds a kit at its example release (cuda==13.0), or by its name where it has none."""
    return f"{kit.name}=={kit.source.example}" if isinstance(kit.source, PipSource) else kit.name
