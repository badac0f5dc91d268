"""Which key vouches for an artifact of a repository here, and why none does, in the words the table and the
refusals use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from buildmgr.artifacts import index
from buildmgr.trust import keyring, signing


def voucher(entry: index.Entry, keys: Mapping[str, signing.PublicKey]) -> str | None:
    """The first of the entry's signers whose key vouches for its repository here (`keyring.Trust.for_repo`)."""
    return next((key_id for key_id in entry.signers if key_id in keys), None)


def untrusted(entry: index.Entry, trust: keyring.Trust, repo: str, allow_unsigned: bool) -> str | None:
    """Why the index's word on its signatures keeps it out (checked again, on the bytes, after download)."""
    if allow_unsigned or voucher(entry, trust.for_repo(repo)) is not None:
        return None
    if not entry.signers:
        return "unsigned: no key vouches for it"
    return not_vouching(entry.signers, trust, repo)


def not_vouching(signer_ids: Sequence[str], trust: keyring.Trust, repo: str) -> str:
    """Why none of the keys `signer_ids` vouches for `repo` here, as "signed by ID, which …", with how to trust it:
    at a first contact, the key's id and the command that pins the repository to it."""
    signers = ", ".join(signer_ids)
    if repo in trust.pins and not trust.pins[repo]:
        return (
            f"signed by {signers}, and {repo} is pinned to no key (its keys were taken back): "
            f"'buildmgr key trust FILE --for {repo}' pins it to its publisher's key again"
        )
    if repo in trust.pins:
        return (
            f"signed by {signers}, and {repo} is pinned to {', '.join(trust.pins[repo])} "
            "('buildmgr key trust FILE --for REPO' adds a key)"
        )
    if scoped := [k for k in signer_ids if k in trust.keys]:
        return (
            f"signed by {signers}, which this host trusts only for {', '.join(trust.pinned_to(scoped[0]))} "
            "('buildmgr key trust FILE' trusts it for any repository)"
        )
    return (
        f"signed by {signers}, which this host does not trust (if it is the publisher's key: 'buildmgr key trust "
        f"FILE --for {repo}' trusts it for this repository)"
    )


def vouched_line(entry: index.Entry, trust: keyring.Trust, repo: str) -> tuple[str | None, str]:
    """(the key that vouches for it here, the table's line that says so)."""
    key_id = voucher(entry, trust.for_repo(repo))
    if key_id is None:
        return None, "vouched for by no key trusted here: installed as unsigned (--allow-unsigned)"
    where = f"{repo} is pinned to it" if repo in trust.pins else "trusted for any repository that is not pinned"
    return key_id, f"vouched for by key {key_id} ({where})"
