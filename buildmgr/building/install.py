"""Install the recipe's targets, and only those, into staging, from CMake's File API.

`cmake --install` would fail on every tool the recipe did not build, so the install rules
are read from the codemodel and applied to the targets built and their dependencies.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from scikit_build_core.file_api.model.directory import InstallPath

from buildmgr.core.errors import BuildFailed
from buildmgr.tools.cmake import Reply


def target_closure(reply: Reply, targets: tuple[str, ...]) -> set[str]:
    """Ids of the named targets and everything they depend on."""
    by_name = {t.name: t for t in reply.configuration.targets}
    by_id = {t.id: t for t in reply.configuration.targets}
    missing = [name for name in targets if name not in by_name]
    if missing:
        raise BuildFailed(f"this llama.cpp source has no target(s) {', '.join(missing)}; check the recipe's targets")
    pending = [by_name[name].id for name in targets]
    seen: set[str] = set()
    while pending:
        target_id = pending.pop()
        if target_id in seen:
            continue
        seen.add(target_id)
        pending.extend(dep.id for dep in by_id[target_id].dependencies)
    return seen


def _copy(source: Path, destination: Path) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, destination, follow_symlinks=False)  # keeps libfoo.so → libfoo.so.0 links
    return destination


def install_targets(
    reply: Reply,
    source_dir: Path,
    build_dir: Path,
    targets: tuple[str, ...],
    dest: Path,
    left_out: tuple[str, ...] = (),
) -> list[Path]:
    """Install the targets and what they depend on, except those `left_out` (a known fault's fix: a CPU variant that
    the ggml target depends on in a GGML_BACKEND_DL build is compiled, never installed)."""
    dropped = {t.id for t in reply.configuration.targets if t.name in left_out}
    wanted = target_closure(reply, targets) - dropped
    installed: list[Path] = []
    for directory in reply.configuration.directories:
        for rule in directory.installers:
            if rule.type not in ("target", "file") or rule.destination is None:
                continue
            if rule.type == "target" and rule.targetId not in wanted:
                continue
            if rule.destination.is_absolute():
                raise BuildFailed(
                    f"install rule with absolute destination {rule.destination}; refusing to install outside the prefix"
                )
            base = build_dir if rule.type == "target" else source_dir
            for entry in rule.paths:
                origin, name = (entry.from_, entry.to) if isinstance(entry, InstallPath) else (entry, Path(entry.name))
                origin = origin if origin.is_absolute() else base / origin
                target = dest / rule.destination / name
                if not os.path.normpath(target).startswith(os.path.normpath(dest) + os.sep):
                    raise BuildFailed(
                        f"install rule puts {name} at {rule.destination / name}, outside the prefix; refusing"
                    )
                if origin.exists() or origin.is_symlink():
                    installed.append(_copy(origin, target))
    return installed
