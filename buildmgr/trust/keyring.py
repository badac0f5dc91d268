"""This user's signing keys and the keys this host trusts, as files under the config dir: `keys/NAME.key` (mode
0600, never printed) with `keys/NAME.pub` beside it; `trusted/ID.pub` (a key trusted for any repository that is not
pinned), `trusted/pinned/ID.pub` (a key trusted only for the repositories pinned to it) and `trusted/pins.json`
(which repositories take which keys only), the keys in minisign's format. A host trusts no key until `key trust` is
told of it, its own keys included; the trusted files are read only if no other user can change them."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from buildmgr.core import jsonshape
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import atomic_write_text, locked
from buildmgr.trust import repo_location as location
from buildmgr.trust import signing

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEY_ID = re.compile(r"[0-9A-F]{16}")
DEFAULT_NAME = "buildmgr"
PINS = "pins.json"


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


def read_key_argument(dirs: Dirs, value: str, verb: str = "trust") -> signing.PublicKey:
    """`key trust FILE|KEY`: a minisign public key file, or its base64 line. A value that names a file (a `/` or
    `.pub` in it) and is not there says so, with where `key generate` put a .pub of that name."""
    path = Path(value)
    a_file = path.is_file()
    try:
        text = path.read_text() if a_file else value
    except OSError as err:
        raise UserError(f"cannot read {value}: {err.strerror}") from None
    try:
        return signing.read_public(text)
    except signing.SignatureError as err:
        if not a_file and ("/" in value or value.endswith(".pub")):  # a key line has '/' too: it was read first
            raise UserError(f"{value}: no such file{_where_generated(dirs, path, verb)}") from None
        raise UserError(f"{value}: {err} (give a minisign public key file, or its base64 line)") from None


def _where_generated(dirs: Dirs, path: Path, verb: str) -> str:
    """The hint for a missing NAME.pub: `key generate NAME` wrote it under <config>, not here."""
    made = keys_dir(dirs) / path.name
    if path.suffix == ".pub" and made.is_file():
        return f" here; 'key generate' put {path.name} in {made.parent}: buildmgr key {verb} {made}"
    return " (give a minisign public key file, or its base64 line)"


# --- the keys this host trusts, and for which repositories ----------------------------------------------------


def pinned_dir(dirs: Dirs) -> Path:
    return trusted_dir(dirs) / "pinned"


@dataclass(frozen=True)
class Pins(jsonshape.Record):
    """`trusted/pins.json`: each pinned repository (as `install --from` names it, made canonical) and the only keys
    that vouch for it (none: its keys were taken back)."""

    VERSION = 1

    schema: int
    pins: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Trusted:
    key: signing.PublicKey
    path: Path  # its file
    anywhere: bool  # for every repository that is not pinned (`key trust FILE`); else only those pinned to it


@dataclass(frozen=True)
class Trust:
    """What this host trusts: its keys by id, and the repositories pinned to some of them."""

    keys: dict[str, Trusted]
    pins: dict[str, tuple[str, ...]]

    def for_repo(self, repo: str) -> dict[str, signing.PublicKey]:
        """The keys that vouch for an artifact of `repo`: the ones it is pinned to (none, where they were all taken
        back), else those trusted anywhere."""
        if repo in self.pins:
            return {i: self.keys[i].key for i in self.pins[repo] if i in self.keys}
        return {i: t.key for i, t in self.keys.items() if t.anywhere}

    def pinned_to(self, key_id: str) -> list[str]:
        return sorted(repo for repo, ids in self.pins.items() if key_id in ids)

    def pinned_to_none(self) -> list[str]:
        """Repositories whose pinned keys were all taken back: they take no key until one is pinned again."""
        return sorted(repo for repo, ids in self.pins.items() if not ids)


def _checked(path: Path, kind: str, found: os.stat_result | None = None) -> None:
    """Refused (one line) where another user could change what this host trusts: `path` (`found`: its status, as
    opened) owned by someone else than this user or root, or writable by its group or by anyone."""
    found = path.stat() if found is None else found
    if found.st_uid not in (os.getuid(), 0):
        raise UserError(
            f"refusing the trusted keys: {path} belongs to user {found.st_uid}, not you: remove it and trust the "
            f"{kind} again"
        )
    if found.st_mode & 0o022:
        raise UserError(
            f"refusing the trusted keys: {path} can be written by other users (mode {stat.S_IMODE(found.st_mode):o}):"
            f" chmod go-w {path}"
        )


def _read_checked(path: Path) -> str | None:
    """A trusted file's text (None: it is gone), read from what was opened: a file swapped in after the check is
    not what is read."""
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    with handle:
        _checked(path, "key", os.fstat(handle.fileno()))
        return handle.read()


def _keys_in(folder: Path, anywhere: bool) -> dict[str, Trusted]:
    found: dict[str, Trusted] = {}
    if not folder.is_dir():
        return found
    _checked(folder, "keys in it")
    for path in sorted(folder.glob("*.pub")):
        text = _read_checked(path)
        try:
            key = signing.read_public(text or "")
        except signing.SignatureError:
            continue  # a file that is no key trusts nothing
        if key.id == path.stem:
            found[key.id] = Trusted(key, path, anywhere)
    return found


def _pins(dirs: Dirs) -> dict[str, tuple[str, ...]]:
    path = trusted_dir(dirs) / PINS
    text = _read_checked(path) if trusted_dir(dirs).is_dir() else None
    if text is None:
        return {}
    try:
        found = Pins.from_text(text).pins
    except jsonshape.ShapeError as err:
        raise UserError(
            f"{path} is not buildmgr's ({err}): remove it and pin again with 'key trust FILE --for REPO'"
        ) from None
    pins: dict[str, tuple[str, ...]] = {}
    for repo, ids in found.items():  # written by an earlier buildmgr: in today's spelling, two spellings as one
        known = pins.get(location.canonical(repo), ())
        pins[location.canonical(repo)] = (*known, *(i for i in ids if i not in known))
    return pins


def load(dirs: Dirs) -> Trust:
    """Every key this host trusts and every pin, each file checked (`_checked`); a key trusted for any repository
    wins over the same key's pinned-only copy."""
    anywhere = _keys_in(trusted_dir(dirs), True)
    pinned = _keys_in(pinned_dir(dirs), False)
    return Trust(pinned | anywhere, _pins(dirs))


def trusted(dirs: Dirs) -> dict[str, signing.PublicKey]:
    """Every key this host trusts, for any repository or only for some, by id."""
    return {i: t.key for i, t in load(dirs).keys.items()}


def _own_folder(folder: Path) -> None:
    """Made, writable by this user only (under a umask of 002 it would be group-writable, which `load` refuses); one
    that is there is left as it is, for `load` to judge: a key another user may have put in stays refused."""
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, stat.S_IMODE(folder.stat().st_mode) & ~0o022)


def _write_key(path: Path, key: signing.PublicKey) -> None:
    _own_folder(path.parent)
    atomic_write_text(path, key.text())
    os.chmod(path, 0o644)


def _write_pins(dirs: Dirs, pins: Mapping[str, tuple[str, ...]]) -> None:
    path = trusted_dir(dirs) / PINS
    atomic_write_text(path, Pins(Pins.VERSION, dict(sorted(pins.items()))).to_text())
    os.chmod(path, 0o644)


def trust(dirs: Dirs, key: signing.PublicKey, repo: str | None = None) -> tuple[Path, bool]:
    """(its file, whether anything changed). Without `repo`, for any repository that is not pinned; with it, `repo`
    is pinned to this key (and to those pinned to it before), and the key vouches for no other repository unless it
    is trusted without one too. Trusting a key twice is a no-op."""
    anywhere, pinned = trusted_dir(dirs) / f"{key.id}.pub", pinned_dir(dirs) / f"{key.id}.pub"
    _own_folder(trusted_dir(dirs))
    with locked(trusted_dir(dirs) / ".lock"):
        current = load(dirs)
        known = current.keys.get(key.id)
        changed = False
        if repo is None:
            if known is None or not known.anywhere:
                _write_key(anywhere, key)
                pinned.unlink(missing_ok=True)  # one file per key: this one now says "anywhere"
                changed = True
            return anywhere, changed
        if known is None:
            _write_key(pinned, key)
            changed = True
        if key.id not in current.pins.get(repo, ()):
            _write_pins(dirs, current.pins | {repo: (*current.pins.get(repo, ()), key.id)})
            changed = True
        return (known.path if known is not None else pinned), changed


@dataclass(frozen=True)
class TakenBack:
    key_id: str
    path: Path
    # repositories whose last pinned key it was: they stay pinned, to no key, and take none until one is pinned again
    pinned_to_none: tuple[str, ...]


def untrust(dirs: Dirs, value: str) -> TakenBack:
    """Take back the trust in a key (its id, its .pub file or its line): its file is removed and no repository is
    pinned to it any more; one pinned to it alone stays pinned, to no key (taking back a pin's key never widens
    what the repository takes). This host's trust only: another host that trusts it still does."""
    listed = ", ".join(load(dirs).keys) or "none"
    if _KEY_ID.fullmatch(value.upper()):
        key_id = value.upper()
    elif Path(value).is_file() or "/" in value or value.endswith(".pub") or len(value) > 40:  # as `trust` reads it
        key_id = read_key_argument(dirs, value, "untrust").id
    else:
        raise UserError(
            f"{value}: not a key id (16 hex digits, as 'buildmgr key list' shows them), a .pub file or a key line "
            f"(trusted: {listed})"
        )
    if key_id not in load(dirs).keys:  # said before the lock file is made: a user error writes nothing
        raise UserError(f"no trusted key {key_id} here (trusted: {listed}; 'buildmgr key list' shows them)")
    with locked(trusted_dir(dirs) / ".lock"):
        current = load(dirs)
        known = current.keys.get(key_id)
        if known is None:  # another process took it back meanwhile
            raise UserError(f"no trusted key {key_id} here any more")
        pins = {repo: tuple(i for i in ids if i != key_id) for repo, ids in current.pins.items()}
        if pins != current.pins:
            _write_pins(dirs, pins)
        for path in (trusted_dir(dirs) / f"{key_id}.pub", pinned_dir(dirs) / f"{key_id}.pub"):
            path.unlink(missing_ok=True)
        emptied = tuple(repo for repo, ids in pins.items() if not ids and current.pins[repo])
        return TakenBack(key_id, known.path, emptied)
