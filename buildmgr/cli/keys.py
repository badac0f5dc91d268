"""Signing keys: `key generate|trust|untrust|list`, and the warning about builds installed on a key's word that is
taken back (`list`, `devices`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from buildmgr.cli import command, render
from buildmgr.core.config import Context, ensure_writable
from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers
    from buildmgr.store import Build


def register(sub: Subparsers, name: str) -> None:
    p = command(
        sub,
        "key",
        key,
        "signing keys: generate one, trust a publisher's, take trust back, list them",
        json=True,
        about="Signing keys (minisign's format). 'generate NAME' makes NAME.key (secret, mode 0600) and NAME.pub "
        "in <config>/buildmgr/keys/ (XDG_CONFIG_HOME, else ~/.config); 'trust' adds a publisher's .pub file or "
        "key line to the keys this host accepts (<config>/buildmgr/trusted/), for any repository, or with --for "
        "REPO for that one only, which then takes no other key; 'untrust ID' takes it back (builds installed on "
        "its word are named by 'list' and 'devices'); 'list' shows them, where each is kept and its pins.",
        example="buildmgr key generate ci\nbuildmgr key trust ~/.config/buildmgr/keys/ci.pub\n"
        "buildmgr key trust ci.pub --for oci://ghcr.io/org/llama\nbuildmgr key untrust 02C3AC4A4064784B\n"
        "buildmgr key list",
    )
    p.add_argument(
        "action",
        choices=("generate", "trust", "untrust", "list"),
        help="generate a key, trust one, take the trust back, or list them",
    )
    p.add_argument(
        "what",
        nargs="?",
        help="generate: NAME (default buildmgr); trust: a .pub FILE or its KEY line; untrust: its ID (or FILE)",
    )
    p.add_argument(
        "--for",
        dest="for_repo",
        metavar="REPO",
        help="trust: for this repository only, and pin it to its keys (a directory, http(s):// or oci://)",
    )


def key(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.trust import keyring

    if args.action == "generate":
        name = keyring.check_name(args.what or keyring.DEFAULT_NAME)  # before anything is written
        ensure_writable(ctx.dirs.config, "set XDG_CONFIG_HOME to a writable directory")
        made = keyring.generate(ctx.dirs, name)
        if args.json:
            print(json.dumps({"name": made.name, "id": made.public.id, "secret_key": str(made.path),
                              "public_key": str(made.path.with_suffix(".pub")), "key": made.public.line()}, indent=2))  # fmt: skip
            return 0
        render.say(f"key {made.public.id}: 'key untrust', pins and every signature name it so")
        render.say(f"secret key {made.path} (mode 0600: keep it there, or in CI's secrets)")
        render.say(f"public key {made.path.with_suffix('.pub')}: on each host, 'buildmgr key trust' it")
        render.say(f"minisign checks a signature without buildmgr: minisign -Vm FILE -P {made.public.line()}")
        print(made.public.line())
        return 0
    if args.for_repo is not None and args.action != "trust":
        raise UserError(f"--for is for 'key trust FILE --for REPO', not 'key {args.action}'")
    if args.action == "trust":
        return _trust(args, ctx)
    if args.action == "untrust":
        return _untrust(args, ctx)
    if args.what:
        raise UserError("key list takes no argument")
    own = keyring.own_keys(ctx.dirs)
    trust = keyring.load(ctx.dirs)
    if args.json:
        trusted = [{"id": i, "key": t.key.line(), "path": str(t.path), "anywhere": t.anywhere,
                    "pinned": trust.pinned_to(i)} for i, t in trust.keys.items()]  # fmt: skip
        print(json.dumps({"own": [{"name": k.name, "id": k.public.id, "secret_key": str(k.path)} for k in own],
                          "trusted": trusted, "pins": {r: list(ids) for r, ids in trust.pins.items()}}, indent=2))  # fmt: skip
        return 0
    for k in own:
        render.result(f"own      {k.public.id}  {k.name} ({k.path})")
    for i, t in trust.keys.items():
        pinned = trust.pinned_to(i)
        scope = "any repository that is not pinned" if t.anywhere else "only " + ", ".join(pinned)
        pins = f"; pinned: {', '.join(pinned)}" if t.anywhere and pinned else ""
        render.result(f"trusted  {i}  {t.path}  for {scope}{pins}")
    for repo in trust.pinned_to_none():
        render.result(f"pinned   {repo} to no key: 'buildmgr key trust FILE --for {repo}' pins its publisher's")
    if not own and not trust.keys and not trust.pins:
        render.say("no keys: 'buildmgr key generate' makes one, 'buildmgr key trust FILE' trusts a publisher's")
    return 0


def _trust(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.trust import keyring

    if not args.what:
        raise UserError("key trust needs a .pub FILE or its KEY line, e.g. buildmgr key trust ci.pub")
    public = keyring.read_key_argument(ctx.dirs, args.what)
    from buildmgr.cli.repos import open_repository

    pinned = open_repository(args.for_repo, ctx).identity if args.for_repo is not None else None
    ensure_writable(ctx.dirs.config, "set XDG_CONFIG_HOME to a writable directory")
    path, new = keyring.trust(ctx.dirs, public, pinned)
    if args.json:
        print(json.dumps({"id": public.id, "path": str(path), "new": new, "for": pinned}, indent=2))
        return 0
    scope = f" for {pinned}, which takes only the keys pinned to it" if pinned else ""
    render.say(f"{'trusting' if new else 'already trusted:'} key {public.id}{scope} ({path})")
    return 0


def _untrust(args: argparse.Namespace, ctx: Context) -> int:
    """The key's trust taken back; the builds installed on its word are named (they stay installed: the user
    decides)."""
    from buildmgr.trust import keyring

    if not args.what:
        raise UserError("key untrust needs the key's ID (as 'buildmgr key list' shows it), or its .pub FILE")
    if ctx.dirs.config.is_dir():  # else there is no key to take back, which untrust says
        ensure_writable(ctx.dirs.config, "set XDG_CONFIG_HOME to a writable directory")
    taken = keyring.untrust(ctx.dirs, args.what)
    builds = _installed_on_word_of(ctx, taken.key_id)
    if args.json:
        print(json.dumps({"id": taken.key_id, "path": str(taken.path), "pinned_to_none": list(taken.pinned_to_none),
                          "installed_on_its_word": builds}, indent=2))  # fmt: skip
        return 0
    render.say(f"no longer trusting key {taken.key_id} (removed {taken.path})")
    for pinned in taken.pinned_to_none:
        render.say(
            f"{pinned} was pinned to it alone: it stays pinned, to no key, and nothing of it installs until "
            f"'buildmgr key trust FILE --for {pinned}' pins its publisher's key"
        )
    if builds:
        render.say(
            f"installed on its word: {', '.join(builds)} ('buildmgr remove ID' removes one; 'list' and 'devices' "
            "warn of them meanwhile)"
        )
    return 0


def _installed_on_word_of(ctx: Context, key_id: str) -> list[str]:
    from buildmgr import store

    return [
        b.id
        for b in store.installed(ctx.dirs)
        if b.receipt.installed_from is not None and b.receipt.installed_from.signed_by == key_id
    ]


def warn_untrusted_installs(ctx: Context, builds: list[Build]) -> None:
    """`list` and `devices`: each build installed on the word of a key this host no longer trusts, one warning
    each (a trusted key that cannot be read safely is said instead, in its one line)."""
    signed = [(b, b.receipt.installed_from.signed_by) for b in builds if b.receipt.installed_from is not None]
    if not any(key_id for _, key_id in signed):
        return
    from buildmgr.trust import keyring  # only where a build was installed on a key's word (cryptography: 40 ms)

    try:
        trusted = keyring.trusted(ctx.dirs)
    except UserError as err:
        ctx.warn(str(err))
        return
    for build, key_id in signed:
        if key_id is not None and key_id not in trusted:
            ctx.warn(
                f"{build.id} was installed on the word of key {key_id}, which this host no longer trusts "
                f"('buildmgr remove {build.id}', or install it again from a repository whose key you trust)"
            )
