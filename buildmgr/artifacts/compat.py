"""Can this host run an artifact? Its CPU, glibc and libstdc++ floors, the libraries it needs, and whether this host's
GPUs can run the GPU code in it: one finding each, errors blocking the install."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from buildmgr import backends
from buildmgr.artifacts.index import ArchiveSummary, summary_of
from buildmgr.artifacts.names import cpu_arch_of
from buildmgr.building import kits
from buildmgr.core import hostfacts
from buildmgr.core.config import Dirs
from buildmgr.core.errors import CannotRunHere
from buildmgr.core.findings import Finding, Severity, errors
from buildmgr.store.receipt import Receipt

_DL_MODULE = re.compile(r"(^|/)libggml-(?!base|cpu)[a-z0-9]+\.so$")


def _only_loadable_modules(summary: ArchiveSummary, users: tuple[str, ...]) -> bool:
    """True when every file that needs a library is a backend module a DL build loads only if it can."""
    return summary.dl and all(_DL_MODULE.search(user) for user in users)


def host_findings(receipt: Receipt, environ: Mapping[str, str], machine: str, dirs: Dirs) -> list[Finding]:
    """Everything that would stop the build from running here; errors block the install."""
    return summary_findings(summary_of(receipt, ""), environ, machine, dirs)


def summary_findings(
    summary: ArchiveSummary,
    environ: Mapping[str, str],
    machine: str,
    dirs: Dirs,
    targets: Mapping[str, list[str]] | None = None,
    cpu_flags: frozenset[str] | None = None,
) -> list[Finding]:
    """`host_findings` from an artifact's summary, as a repository's index holds it; `targets`: the GPUs here
    (`backends.gpu_targets`), and `cpu_flags` this CPU's, read once by a caller that judges many artifacts."""
    from packaging.version import Version

    from buildmgr.building import runtime

    needs = summary.runtime
    built_on = summary.machine.lower()
    if cpu_arch_of(built_on) != cpu_arch_of(machine):
        return [Finding(Severity.ERROR, "", f"built for {built_on}, and this host is {machine}")]
    findings: list[Finding] = []
    glibc = runtime.host_glibc()
    if needs.glibc and glibc is None:
        findings.append(
            Finding(
                Severity.WARNING,
                "",
                f"this host's glibc version is unknown (musl?); GLIBC_{needs.glibc} is not checked",
            )
        )
    if needs.glibc and glibc is not None and glibc < Version(needs.glibc):
        findings.append(
            Finding(
                Severity.ERROR,
                "",
                f"this host's glibc is {glibc}, and {needs.glibc_file} needs GLIBC_{needs.glibc}",
                "use an artifact built on an older distro (the matrix builds CPU artifacts on ubuntu-22.04)",
            )
        )
    # a build made with an added toolchain searches <data>/toolchains (its RPATH): the ones here count
    libraries = runtime.host_libraries(environ, machine, kits.runtime_dirs(dirs, summary.toolchains))
    for library, users in needs.needed.items():
        if libraries.find(library) is not None:
            continue
        more = f" and {len(users) - 1} more" if len(users) > 1 else ""
        severity = Severity.WARNING if _only_loadable_modules(summary, users) else Severity.ERROR
        effect = "that backend will not load" if severity is Severity.WARNING else "nothing runs without it"
        offer = kits.runtime_offer(summary.toolchains, library)
        source = f"'{offer}' adds it" if offer else f"it comes from {backends.library_source(library)}"
        findings.append(
            Finding(
                severity, "", f"{library} is not found on this host (needed by {users[0]}{more}; {effect}): {source}"
            )
        )
    libstdcxx = libraries.find("libstdc++.so.6")
    if needs.libstdcxx and libstdcxx is not None:
        have = runtime.highest(runtime.provided_versions(libstdcxx), "GLIBCXX_")
        if have is not None and have < Version(needs.libstdcxx):
            findings.append(
                Finding(
                    Severity.ERROR,
                    "",
                    f"this host's libstdc++ provides GLIBCXX_{have}, and {needs.libstdcxx_file} needs "
                    f"GLIBCXX_{needs.libstdcxx}",
                    "install a newer libstdc++6, or use an artifact built on an older distro",
                )
            )
    if targets is None:
        findings += backends.kernel_findings(needs.device_code, environ)
    else:
        findings += [f for found in backends.code_fits(needs.device_code, targets).values() for f in found]
    findings += _cpu_findings(summary, cpu_flags if cpu_flags is not None else hostfacts.read().cpu_flags)
    return findings


def _cpu_findings(summary: ArchiveSummary, cpu_flags: frozenset[str]) -> list[Finding]:
    """What the build needs of this CPU, worded from its real defines: the instruction sets it lists (a build of
    GGML_NATIVE=OFF with its build host's features), each checked against this CPU's flags; or -march=native, whose
    instructions only the smoke run can tell."""
    if summary.cpu_features:
        lacking, unknown = backends.cpu_features_lacking(summary.cpu_features, cpu_flags)
        if unknown:
            warned = Finding(
                Severity.WARNING,
                "",
                f"built for CPU features this buildmgr does not know: {', '.join(unknown)} (a newer one's); whether "
                "this CPU has them, only the smoke run will tell",
            )
            known = tuple(d for d in summary.cpu_features if d not in unknown)
            return [
                warned,
                *(_cpu_findings(dataclasses.replace(summary, cpu_features=known), cpu_flags) if known else []),
            ]
        if lacking:
            return [
                Finding(
                    Severity.ERROR,
                    "",
                    f"built for CPU features this CPU lacks: {', '.join(lacking)} (GGML_NATIVE=OFF, its build host's "
                    "features listed): its tools would stop on an illegal instruction",
                    "the universal recipe builds every CPU variant",
                )
            ]
        listed = ", ".join(d.removeprefix("GGML_") for d in summary.cpu_features)
        return [
            Finding(Severity.NOTE, "", f"built for its build host's CPU features ({listed}): this CPU has them all")
        ]
    if not summary.native_cpu:
        return []
    how = (
        "GGML_NATIVE=ON" if summary.cpu_features is not None else "GGML_NATIVE=ON, or its build host's features listed"
    )
    return [
        Finding(
            Severity.WARNING,
            "",
            f"built for its build host's CPU ({how}): it may use CPU instructions this CPU lacks (the smoke run will "
            "tell); the universal recipe builds every CPU variant",
        )
    ]


def require_runnable(findings: list[Finding], artifact_name: str) -> None:
    """An artifact this host certainly cannot run is refused before anything is installed."""
    blocking = errors(findings)
    if blocking:
        raise CannotRunHere(f"this host cannot run {artifact_name}: {blocking[0].text()}; nothing was installed")
