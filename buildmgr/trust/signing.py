"""Ed25519 keys and signatures in formats other tools check: keys and `.minisig` files in minisign's format (a user
checks an archive with `minisign -Vm FILE -P KEY`, no buildmgr needed), and DSSE envelopes over in-toto Statements
(the envelope GitHub's artifact attestations and sigstore use). Pure: bytes and text in, bytes and text out."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

_ED = b"Ed"  # minisign's signature algorithm: Ed25519
_PREHASHED = b"ED"  # a signature over the file's BLAKE2b-512 (minisign's default since 0.8)
_NO_KDF = b"\0\0"  # an unencrypted secret key (minisign -W)
_CHECKSUM = b"B2"
_UNTRUSTED = "untrusted comment: "
_TRUSTED = "trusted comment: "
IN_TOTO = "application/vnd.in-toto+json"


class SignatureError(ValueError):
    """A key or a signature that is malformed, or that does not verify: what is wrong, in one sentence."""


class Untrusted(SignatureError):
    """A well-formed signature by a key this host does not trust (`--allow-unsigned` accepts it as unsigned)."""


@dataclass(frozen=True)
class PublicKey:
    key_id: bytes  # minisign's key number: 8 random bytes
    raw: bytes  # the Ed25519 public key, 32 bytes

    @property
    def id(self) -> str:
        """As minisign prints it: the key number as a little-endian integer, 16 upper-case hex digits."""
        return self.key_id[::-1].hex().upper()

    def line(self) -> str:
        """The base64 line `minisign -P` takes."""
        return base64.b64encode(_ED + self.key_id + self.raw).decode()

    def text(self) -> str:
        """A minisign public key file."""
        return f"{_UNTRUSTED}minisign public key {self.id}\n{self.line()}\n"

    def verifier(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.raw)


@dataclass(frozen=True)
class SecretKey:
    key_id: bytes
    seed: bytes  # the Ed25519 private key, 32 bytes

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(os.urandom(8), Ed25519PrivateKey.generate().private_bytes_raw())

    def signer(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @property
    def public(self) -> PublicKey:
        # here: serialization imports OpenSSH's formats too (9 ms), which only a signer needs
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        return PublicKey(self.key_id, self.signer().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def text(self) -> str:
        """A minisign secret key file, unencrypted (as `minisign -G -W` writes it): its file mode protects it."""
        sk = self.seed + self.public.raw  # libsodium's 64-byte secret key
        check = hashlib.blake2b(_ED + self.key_id + sk, digest_size=32).digest()
        body = _ED + _NO_KDF + _CHECKSUM + bytes(32 + 8 + 8) + self.key_id + sk + check
        return f"{_UNTRUSTED}minisign secret key (unencrypted)\n{base64.b64encode(body).decode()}\n"

    def sign(self, data: bytes, trusted_comment: str) -> str:
        """A `.minisig` of `data`: the prehashed signature, and the global one over it and the trusted comment."""
        if "\n" in trusted_comment or "\r" in trusted_comment:
            raise SignatureError("a trusted comment is one line")
        signer = self.signer()
        signature = signer.sign(hashlib.blake2b(data).digest())
        comment = trusted_comment.encode()
        global_signature = signer.sign(signature + comment)
        return (
            f"{_UNTRUSTED}signature from buildmgr secret key {self.public.id}\n"
            f"{base64.b64encode(_PREHASHED + self.key_id + signature).decode()}\n"
            f"{_TRUSTED}{trusted_comment}\n{base64.b64encode(global_signature).decode()}\n"
        )


def _decoded(line: str, what: str) -> bytes:
    try:
        return base64.b64decode(line.strip(), validate=True)
    except ValueError:  # binascii.Error, and a character that is not ASCII
        raise SignatureError(f"{what} is not base64") from None


def _lines(text: str, what: str, count: int) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < count:
        raise SignatureError(f"{what} has {len(lines)} lines, not {count}")
    return lines


def read_public(text: str) -> PublicKey:
    """A minisign public key: its file (two lines), or the base64 line alone."""
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[1] if len(lines) >= 2 and lines[0].startswith(_UNTRUSTED) else (lines[0] if lines else "")
    if "secret key" in (lines[0] if lines else ""):
        raise SignatureError(
            "this is a secret key, which is never given to anyone: trust its public half, the .pub beside it"
        )
    data = _decoded(line, "the public key")
    if len(data) != 42 or data[:2] != _ED:
        raise SignatureError("not a minisign Ed25519 public key (42 bytes, starting 'Ed')")
    return PublicKey(data[2:10], data[10:])


def read_secret(text: str) -> SecretKey:
    """An unencrypted minisign secret key file (buildmgr's own, or `minisign -G -W`'s)."""
    data = _decoded(_lines(text, "the secret key", 2)[1], "the secret key")
    if len(data) != 158 or data[:2] != _ED or data[4:6] != _CHECKSUM:
        raise SignatureError("not a minisign Ed25519 secret key")
    if data[2:4] != _NO_KDF:
        raise SignatureError("an encrypted minisign secret key: buildmgr signs only with unencrypted ones (-W)")
    key_id, sk, check = data[54:62], data[62:126], data[126:158]
    # minisign 0.11's -W writes the checksum as zeros; the halves' agreement below is checked either way
    if any(check) and hashlib.blake2b(_ED + key_id + sk, digest_size=32).digest() != check:
        raise SignatureError("the secret key's checksum does not match: the file is damaged")
    key = SecretKey(key_id, sk[:32])
    if key.public.raw != sk[32:]:
        raise SignatureError("the secret key's two halves do not belong together: the file is damaged")
    return key


@dataclass(frozen=True)
class Signed:
    """A `.minisig` that verified: by which key, and what its trusted comment says."""

    key_id: str
    trusted_comment: str


def signer_of(minisig: str) -> str:
    """The key id a `.minisig` names, unchecked: who it says it is by (to say which key a host would need)."""
    head = _decoded(_lines(minisig, "the signature file", 4)[1], "the signature")
    if len(head) != 74 or head[:2] not in (_PREHASHED, _ED):
        raise SignatureError("not a minisign Ed25519 signature")
    return head[2:10][::-1].hex().upper()


def verify(data: bytes | None, minisig: str, keys: Mapping[str, PublicKey], blake2b: bytes | None = None) -> Signed:
    """Check a `.minisig` of `data` against trusted keys (by id); SignatureError says why not. `blake2b`: the data's
    BLAKE2b-512, which a prehashed signature (minisign's default, and buildmgr's) is over, read with another digest
    in one pass; `data` may then be None, unless the signature is a legacy one over the bytes themselves."""
    lines = _lines(minisig, "the signature file", 4)
    key_id = signer_of(minisig)
    head = _decoded(lines[1], "the signature")
    key = keys.get(key_id)
    if key is None:
        raise Untrusted(f"signed by key {key_id}, which this host does not trust")
    if not lines[2].startswith(_TRUSTED):
        raise SignatureError("the signature file has no trusted comment")
    comment = lines[2][len(_TRUSTED) :]
    signature = head[10:]
    if head[:2] == _PREHASHED:
        if blake2b is None:
            assert data is not None, "the data or its BLAKE2b-512"
            blake2b = hashlib.blake2b(data).digest()
        message = blake2b
    elif data is None:
        raise SignatureError("a legacy minisign signature (not prehashed): sign it again with minisign 0.8 or later")
    else:
        message = data
    try:
        key.verifier().verify(signature, message)
        key.verifier().verify(_decoded(lines[3], "the global signature"), signature + comment.encode())
    except InvalidSignature:
        raise SignatureError(
            f"the signature by key {key_id} does not match: the file or its comment was changed"
        ) from None
    return Signed(key_id, comment)


# --- DSSE over an in-toto Statement --------------------------------------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, so the type cannot be swapped."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(statement: dict[str, Any], key: SecretKey) -> dict[str, Any]:
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    signature = key.signer().sign(pae(IN_TOTO, payload))
    return {
        "payloadType": IN_TOTO,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": key.public.id, "sig": base64.b64encode(signature).decode()}],
    }


def open_envelope(data: dict[str, Any], keys: Mapping[str, PublicKey]) -> tuple[str, dict[str, Any]]:
    """(the key id that signed it, the Statement) of a DSSE envelope one of `keys` signed; SignatureError if none."""
    try:
        payload = base64.b64decode(data["payload"], validate=True)
        signatures = [(s["keyid"], base64.b64decode(s["sig"], validate=True)) for s in data["signatures"]]
        kind = data["payloadType"]
    except (KeyError, TypeError, ValueError):  # ValueError: binascii's, and text that is not ASCII
        raise SignatureError("not a DSSE envelope (payloadType, payload, signatures)") from None
    if not isinstance(kind, str) or not all(isinstance(key_id, str) for key_id, _ in signatures):
        raise SignatureError("not a DSSE envelope (its payloadType and each keyid are text)")
    if kind != IN_TOTO:
        raise SignatureError(f"the envelope holds {kind!r}, not an in-toto Statement")
    untrusted = []
    for key_id, signature in signatures:
        key = keys.get(key_id)
        if key is None:
            untrusted.append(key_id)
            continue
        try:
            key.verifier().verify(signature, pae(kind, payload))
        except InvalidSignature:
            raise SignatureError(f"the attestation's signature by key {key_id} does not match its payload") from None
        try:
            statement = json.loads(payload)
        except (ValueError, RecursionError):
            raise SignatureError("the attestation's payload is not JSON") from None
        if not isinstance(statement, dict):
            raise SignatureError("the attestation's payload is not an in-toto Statement")
        return key_id, statement
    raise Untrusted(f"the attestation is signed by {', '.join(untrusted) or 'no key'}, which this host does not trust")
