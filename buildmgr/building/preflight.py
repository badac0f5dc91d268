"""A recipe's backends asked what this host has for them (their preflight), each through the registry, with a memo of
what cost a program run."""

from __future__ import annotations

import functools
from typing import Any

from buildmgr import backends
from buildmgr.backend_spec import Backend, Host, Report
from buildmgr.core.findings import Check
from buildmgr.core.memo import Memo, stamps


def inspect(names: tuple[str, ...], host: Host, deep: bool = True, memo: Memo | None = None) -> Report:
    """Preflight every backend of a recipe. `deep` also compiles a probe (nvcc) where that is the only proof.

    With a memo, a backend that runs programs (its `locate` names their files) is not asked again while those files
    stay. A failed check is never taken from it, so a fix is seen at once: a kept report with a failure is given back
    only while the checks without `deep` say the same again, so that what `deep` adds (nvcc's compile probe, seconds)
    is asked once while it passes, on a host whose own toolkit lacks cuBLAS too."""
    checks: list[Check] = []
    defines: dict[str, str] = {}
    versions: dict[str, str] = {}
    for name in names:
        known = backends.backend(name)
        found = known.locate(host)
        if memo is not None and found.inputs:
            report = memo.recall(
                ["inspect", name, deep, stamps(found.inputs)],
                functools.partial(known.inspect, host, found, deep),
                Report.to_json,
                Report.from_json,
                keep=lambda r: deep or not r.failures,
                fresh=functools.partial(_still_failing_alike, known, host, found),
            )
        else:
            report = known.inspect(host, found, deep)
        checks.extend(report.checks)
        defines.update(report.host_defines)
        versions.update(report.versions)
        minimum = known.min_cmake
        cmake = host.toolchain.cmake
        if cmake.found and _older(cmake.version, minimum):
            checks.append(
                Check(
                    name,
                    "cmake",
                    False,
                    cmake.version or "?",
                    f"the {name} backend needs cmake >= {minimum}: pip install -U cmake",
                )
            )
    return Report(tuple(checks), defines, versions)


def _still_failing_alike(known: Backend, host: Host, found: Any, kept: Report) -> bool:
    """A kept report with a failure holds while the checks that need no probe say exactly what they said: each of
    its failures is among them, asked now, and the rest it kept (what only `deep` adds) passed."""
    if not kept.failures:
        return True
    again = known.inspect(host, found, False).checks
    return all(check in kept.checks for check in again) and all(check in again for check in kept.failures)


def _older(version: str | None, minimum: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version or "0") < Version(minimum)
    except InvalidVersion:
        return False
