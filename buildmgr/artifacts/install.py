"""install-artifact and install --from: extract an artifact into staging in one pass (each file hashed as it is
written, then all checked against the manifest and the receipt), let the caller vouch for what it holds, smoke-run it
here and publish it as a build, atomically, like `build`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import store
from buildmgr.artifacts.archive import prefix_for
from buildmgr.artifacts.unpack import Artifact, BadArchive, unpack
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Finding, warnings
from buildmgr.store.receipt import InstalledFrom, safe_id

if TYPE_CHECKING:
    from buildmgr.core.progress import Reporter
    from buildmgr.devices.probe import ProbeResult


@dataclass(frozen=True)
class Installed:
    build: store.Build
    already: bool
    warnings: tuple[str, ...]
    # what the smoke run's probe saw of the files now published (None: installed before, or no llama-bench to bench)
    probe: ProbeResult | None = None


def install(
    dirs: Dirs,
    archive: Path,
    sha256: str,
    build_id: str,
    vouch: Callable[[Artifact], list[Finding]],
    reporter: Reporter,
    environ: Mapping[str, str],
    signed_by: str | None = None,
) -> Installed:
    """Under the lock of `build_id`: extract into staging, then `vouch` (the caller's checks of the receipt it
    holds, raising where it must not run here; it returns the host's findings), smoke-run, publish atomically.
    `signed_by`: the key that vouched for the archive, kept in `installed_from`."""
    from datetime import UTC, datetime

    from buildmgr.core.fsutil import locked
    from buildmgr.proof.smoke import prove_runs

    if not safe_id(build_id):  # it names the lock and the staging folder: never a path of its own
        raise UserError(f"{archive.name}: {build_id[:60]!r} is not a safe build id; nothing was installed")
    with locked(store.build_lock(dirs, build_id)):
        store.drop_stale_staging(dirs, build_id)
        with store.staged(dirs, build_id) as staging:
            with reporter.phase("extract"):
                artifact = unpack(archive, sha256, staging)
            receipt = artifact.receipt
            if receipt.id != build_id:  # the lock held is another build's
                raise BadArchive(f"{archive.name} holds build {receipt.id}, not {build_id}; nothing was installed")
            said = tuple(finding.text() for finding in warnings(vouch(artifact)))
            prefix = prefix_for(dirs.builds, receipt)
            existing = store.load_receipt(prefix)
            if isinstance(existing, store.Unreadable):
                reporter.warn(f"{existing}; installing the artifact replaces it")
            elif existing is not None and existing.files == receipt.files:
                return Installed(store.Build(build_id, prefix, existing), True, said)
            log = store.run_log(dirs, f"install-{build_id}")
            with reporter.phase("smoke"):
                smoked = prove_runs(staging, receipt.source.short_commit, dirs, log, reporter, environ)
            installed = dataclasses.replace(
                receipt,
                installed_from=InstalledFrom(
                    archive.name,
                    artifact.sha256,
                    datetime.now(UTC).isoformat(timespec="seconds"),
                    smoked.result,
                    said,
                    str(log),
                    signed_by,
                ),
            )
            store.publish(staging, prefix, installed)
    return Installed(store.Build(build_id, prefix, installed), False, said, smoked.probe)
