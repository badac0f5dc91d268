"""This user's signing keys and the keys this host trusts, as files under the config dir: `keys/NAME.key` (mode
0600, never printed) with `keys/NAME.pub` beside it, and `trusted/ID.pub`, all in minisign's format. A host trusts
no key until `key trust` is told of it, its own keys included."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from buildmgr import signing
from buildmgr.config import Dirs
from buildmgr.errors import UserError
from buildmgr.fsutil import atomic_write_text, locked

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DEFAULT_NAME = "buildmgr"


def keys_dir(dirs: Dirs) -> Path:
    return dirs.config / "keys"


def trusted_dir(dirs: Dirs) -> Path:
    return dirs.config / "trusted"


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UserError(f"key name {name!r}: use letters, digits, '.', '_' and '-' (at most 64), e.g. 'ci'")
    return name


@dataclass(frozen=True)
class OwnKey:
    name: str
    public: signing.PublicKey
    path: Path  # the secret key's file


def generate(dirs: Dirs, name: str) -> OwnKey:
    """A new Ed25519 key: the secret one created 0600 (never replacing one), then its public half beside it."""
    secret_path = keys_dir(dirs) / f"{check_name(name)}.key"
    keys_dir(dirs).mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir(dirs), 0o700)
    key = signing.SecretKey.generate()
    try:
        fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UserError(f"a key named {name!r} exists ({secret_path}): choose another name") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(key.text())
        handle.flush()
        os.fsync(handle.fileno())
    atomic_write_text(secret_path.with_suffix(".pub"), key.public.text())
    return OwnKey(name, key.public, secret_path)


def own(dirs: Dirs, name: str) -> signing.SecretKey:
    path = keys_dir(dirs) / f"{check_name(name)}.key"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"no key named {name!r} here: 'buildmgr key generate {name}' makes one") from None
    if path.stat().st_mode & 0o077:
        raise UserError(f"{path} can be read by other users: chmod 600 it, or generate a new key")
    try:
        return signing.read_secret(text)
    except signing.SignatureError as err:
        raise UserError(f"{path}: {err}") from None


def own_keys(dirs: Dirs) -> list[OwnKey]:
    found = []
    for path in sorted(keys_dir(dirs).glob("*.pub")) if keys_dir(dirs).is_dir() else []:
        try:
            found.append(OwnKey(path.stem, signing.read_public(path.read_text()), path.with_suffix(".key")))
        except signing.SignatureError:
            continue  # not a key this buildmgr wrote: `key list` shows only what it can read
    return found


def read_key_argument(value: str) -> signing.PublicKey:
    """`key trust FILE|KEY`: a minisign public key file, or its base64 line."""
    path = Path(value)
    try:
        text = path.read_text() if path.is_file() else value
    except OSError as err:
        raise UserError(f"cannot read {value}: {err.strerror}") from None
    try:
        return signing.read_public(text)
    except signing.SignatureError as err:
        raise UserError(f"{value}: {err} (give a minisign public key file, or its base64 line)") from None


def trust(dirs: Dirs, key: signing.PublicKey) -> tuple[Path, bool]:
    """(its file, whether it was new); trusting a key twice is a no-op."""
    path = trusted_dir(dirs) / f"{key.id}.pub"
    with locked(trusted_dir(dirs) / ".lock"):
        if path.is_file() and signing.read_public(path.read_text()) == key:
            return path, False
        atomic_write_text(path, key.text())
    return path, True


def trusted(dirs: Dirs) -> dict[str, signing.PublicKey]:
    """Every key this host trusts, by id (a file that is no key is left out: it trusts nothing)."""
    found = {}
    for path in sorted(trusted_dir(dirs).glob("*.pub")) if trusted_dir(dirs).is_dir() else []:
        try:
            key = signing.read_public(path.read_text())
        except (OSError, signing.SignatureError):
            continue
        if key.id == path.stem:
            found[key.id] = key
    return found
