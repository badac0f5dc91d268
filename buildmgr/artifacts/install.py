"""install-artifact: extract a checked artifact into staging, check its files against the receipt again, smoke-run it
here and publish it as a build, atomically, like `build`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildmgr import store
from buildmgr.artifacts.archive import Artifact, extract, prefix_for
from buildmgr.config import Dirs
from buildmgr.errors import UserError
from buildmgr.findings import Finding, warnings
from buildmgr.receipt import InstalledFrom

if TYPE_CHECKING:
    from buildmgr.progress import Reporter


@dataclass(frozen=True)
class Installed:
    build: store.Build
    already: bool
    warnings: tuple[str, ...]


def install(
    dirs: Dirs, artifact: Artifact, findings: list[Finding], reporter: Reporter, environ: Mapping[str, str]
) -> Installed:
    """Extract into staging, check the files against the receipt again, smoke-run here, publish atomically."""
    from datetime import UTC, datetime

    from buildmgr.builder import prove_runs
    from buildmgr.fsutil import locked

    receipt = artifact.receipt
    build_id = receipt.id
    prefix = prefix_for(dirs.builds, receipt)
    said = tuple(finding.text() for finding in warnings(findings))
    with locked(store.build_lock(dirs, build_id)):
        existing = store.load_receipt(prefix)
        if isinstance(existing, store.Unreadable):
            reporter.warn(f"{existing}; installing the artifact replaces it")
        elif existing is not None and existing.files == receipt.files:
            return Installed(store.Build(build_id, prefix, existing), True, said)
        store.drop_stale_staging(dirs, build_id)
        log = store.run_log(dirs, f"install-{build_id}")
        with store.staged(dirs, build_id) as staging:
            with reporter.phase("extract"):
                extract(artifact, staging)
                if store.file_hashes(staging) != receipt.files:  # the file changed since it was checked
                    raise UserError(f"{artifact.path.name}: changed while it was being installed; try again")
            with reporter.phase("smoke"):
                result = prove_runs(staging, receipt.source.short_commit, dirs, log, reporter, environ)
            installed = dataclasses.replace(
                receipt,
                installed_from=InstalledFrom(
                    artifact.path.name,
                    artifact.sha256,
                    datetime.now(UTC).isoformat(timespec="seconds"),
                    result,
                    said,
                    str(log),
                ),
            )
            store.publish(staging, prefix, installed)
    return Installed(store.Build(build_id, prefix, installed), False, said)
