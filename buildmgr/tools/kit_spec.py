"""A toolchain `buildmgr toolchain add` assembles for a backend (`Kit`), and where its packages come from: wheels from
PyPI (`PipSource`) or a release of this host's distribution (`AptSource`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple


class PipSource(NamedTuple):
    """Wheels from PyPI, installed with the user's pip (its index settings and hashes): `package[extras]==VERSION.*`."""

    package: str
    extras: tuple[str, ...]
    releases: tuple[int, ...]  # the major releases whose wheels the kit's layout knows
    example: str  # a version for error messages, e.g. 13.0
    vendor: str  # whose wheels, for messages: NVIDIA
    wheels: tuple[str, ...] = ()  # the wheels it takes from this Python where it has them already (no download)
    wheel_suffix: str = ""  # how a release's wheels may be named too, "{major}" filled in: nvidia-cublas-cu12
    wheel_folder: str = ""  # the folder of site-packages those wheels install their files into
    refused: Mapping[int, str] = MappingProxyType({})  # release → why its wheels cannot make this kit


class AptSource(NamedTuple):
    """Packages of a release of this host's own distribution, downloaded with a private apt configuration (the system's
    sources, lists and cache stay untouched; apt checks the release's signature and each file's hash) and unpacked
    into the kit, never installed."""

    packages: tuple[str, ...]
    release: Mapping[str, str]  # this host's release (VERSION_CODENAME) → the release whose packages are used
    keyrings: Mapping[str, str]  # distribution (os-release ID) → its archive keyring
    components: Mapping[str, str]  # distribution → the archive components the packages are in
    elsewhere: str  # what to do on a host apt cannot serve


class Kit(NamedTuple):
    """A toolchain that `buildmgr toolchain add NAME` assembles for a backend under <data>/toolchains/NAME-VERSION."""

    name: str
    backend: str  # the backend it builds or runs (NAME)
    summary: str
    source: PipSource | AptSource
    lay_out: Callable[[Path, Path, str | None], str]  # (what was fetched, the kit's root, a C compiler) → its version
    environ: Callable[[Path], dict[str, str]]  # the variables that point a build at the kit's root
    runpath: str = ""  # its folder of run-time libraries, which builds made with it search ("" none)
    libraries: tuple[str, ...] = ()  # soname stems it provides at run time
    builds: bool = True  # False: run-time libraries only, for builds made elsewhere
    runtime: str = ""  # the kit with its run-time libraries alone ("" none), which builds made with it search too
