"""The binary repository: `publish`, `repo list|forget` and `install --from`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr.cli import command, render
from buildmgr.core.config import Context, Dirs, ensure_writable
from buildmgr.core.errors import CannotRunHere, RepositoryFault, UserError

if TYPE_CHECKING:
    from buildmgr.artifacts.deliver import Attempt
    from buildmgr.artifacts.index import Entry
    from buildmgr.artifacts.repo import Repo
    from buildmgr.artifacts.select import Candidate
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "publish":
        from buildmgr.artifacts.index import EXPIRES_DAYS

        p = command(
            sub,
            "publish",
            publish,
            "put artifacts (signed with --sign) into a binary repository",
            json=True,
            about="Put archives made by 'buildmgr package' into a binary repository (a directory, or an OCI "
            "registry) with their receipt and provenance, signed with --sign by a key of 'buildmgr key generate'; "
            "its index is rewritten atomically, one version more, and signed too: hosts take it for --expires days "
            f"({EXPIRES_DAYS}), so sign it again before then (--sign NAME and no ARTIFACT). Publishing an archive "
            "again is a no-op; with another key, its signature is added beside the first's, which stays.",
            example="buildmgr publish --to /srv/llama-builds --sign ci dist/*.tar.gz\n"
            "buildmgr publish --to oci://registry.example.org/ml/llama --sign ci *.tar.gz\n"
            "buildmgr publish --to /srv/llama-builds --sign ci  # the index signed again",
        )
        p.add_argument(
            "files",
            type=Path,
            nargs="*",
            metavar="ARTIFACT",
            help="llama-…-bin-….tar.gz (.sha256 beside); none, with --sign: the index is signed again",
        )
        p.add_argument(
            "--to",
            required=True,
            metavar="REPO",
            help="a directory (created if absent), or oci://HOST[:PORT]/NAMESPACE/NAME",
        )
        p.add_argument("--sign", metavar="NAME", help="sign with this key of 'buildmgr key generate NAME'")
        p.add_argument(
            "--expires",
            type=int,
            metavar="DAYS",
            help=f"hosts take the signed index for DAYS (default {EXPIRES_DAYS}); then it must be signed again",
        )
        p.add_argument("--builder", help="who built it, for the provenance (default: this user@host)")
    elif name == "repo":
        p = command(
            sub,
            "repo",
            repo_command,
            "what a binary repository holds",
            json=True,
            about="'list' shows every artifact a binary repository holds (a directory, an http(s):// URL serving "
            "one, or oci://): its build, recipe, OS and architecture, what it needs of a host, who signed it, and "
            "whether a key this host trusts for the repository vouches for it (its index's signature checked). "
            "'forget' drops what this host remembers of a repository's location (the index version it took, the "
            "repository its index named): its next install is a first contact, as for a repository made anew.",
            example="buildmgr repo list /srv/llama-builds\nbuildmgr repo list oci://registry.example.org/ml/llama --json\n"
            "buildmgr repo forget https://llama.example/",
        )
        p.add_argument(
            "action",
            choices=("list", "forget"),
            help="list: its artifacts, what each needs, who signed it; forget: what this host saw of it",
        )
        p.add_argument("repo", metavar="REPO", help="a directory, an http(s):// URL serving one, or oci://…")
    elif name == "install":
        help = "install the artifact of a repository that fits this host best, and prove it sees its device"
        about = (
            "Judge every artifact of a binary repository against this host before downloading any (CPU features, "
            "glibc, the GPUs and the code each artifact carries for them, signatures by trusted keys), print the "
            "table of candidates, best first, then download, verify and install the best and prove it runs and sees "
            "its device; the next fitting one is tried when it does not."
        )
        example = "buildmgr install --from https://example.org/llama-builds --dry-run\nbuildmgr install cuda --from oci://registry.example.org/ml/llama"
        p = command(sub, "install", install_from, help, json=True, about=about, example=example)
        p.add_argument(
            "what", nargs="?", metavar="RECIPE|BUILD_NUMBER|ID", help="only this recipe, build (b8000) or build id"
        )
        p.add_argument("--from", dest="source", required=True, metavar="REPO", help="a directory, http(s):// or oci://")
        p.add_argument("--dry-run", action="store_true", help="print the table of candidates and stop")
        p.add_argument(
            "--allow-unsigned",
            action="store_true",
            help="also take what no key trusted for REPO signed: an index unsigned or signed by another key (its "
            "version is then neither checked nor remembered: no rollback protection; a pin is not enforced; its "
            "expiry is not checked) and archives unsigned or signed by another key; an archive's signature files, "
            "where it has them, are still checked against the keys trusted for REPO",
        )


SHORT_DIGEST = 12  # of a sha256 in a table: enough to tell two archives of one name apart


def open_repository(text: str, ctx: Context) -> Repo:
    """The repository `text` names, held to this user's network limits (the setting read only for a URL)."""
    from buildmgr.artifacts import repo
    from buildmgr.trust import repo_location as location

    if location.kind_of(text) is location.Kind.DIRECTORY:
        return repo.open_repo(text)
    return repo.open_repo(text, repo.Limits.parse(ctx.settings.network_timeout))


# --- publish and list ---------------------------------------------------------------------------------------------


def publish(args: argparse.Namespace, ctx: Context) -> int:
    import getpass
    import socket

    from buildmgr.artifacts import index, unpack
    from buildmgr.trust import keyring

    if not args.files and not args.sign:
        raise UserError("publish needs an ARTIFACT (or, with --sign NAME and none, signs the index again)")
    if args.expires is not None and not args.sign:
        raise UserError("--expires is how long a signed index is taken: give --sign NAME too")
    days = index.EXPIRES_DAYS if args.expires is None else args.expires
    if not 1 <= days <= 3650:
        raise UserError(f"--expires {days}: the days hosts take the signed index, 1 to 3650")
    target = open_repository(args.to, ctx)
    secret = keyring.own(ctx.dirs, args.sign) if args.sign else None
    opened = [
        unpack.open_artifact(path, refusing="publish") for path in args.files
    ]  # every one checked before any is published
    builder = args.builder or f"{getpass.getuser()}@{socket.gethostname()}"
    done = []
    written = target.sign_index(secret, days) if not opened and secret is not None else None
    for artifact in opened:
        published = target.publish(artifact, secret, builder, days)
        written = published.written or written
        done.append(published)
        if not args.json:
            signers = ", ".join(published.entry.signers)
            signed = f", signed by {signers}" if signers else ", unsigned"
            verb = "already in" if published.already else "published to"
            added = published.signature_added
            now = f"; the signature of {added} added" if published.already and added else ""
            render.result(f"{artifact.path.name} {verb} {args.to}{now} (sha256 {artifact.sha256[:12]}…{signed})")
    if written is not None and not args.json:
        signer = f"signed by {secret.public.id}, expires {written.expires}" if secret is not None else "unsigned"
        render.result(f"{index.INDEX} version {written.version}, {signer}")
    unsigned = [p for p in done if p.entry.signed_by is None]  # one published signed before stays signed
    if unsigned and not args.json:
        ctx.warn("note: unsigned: hosts install these only with --allow-unsigned (publish --sign NAME signs them)")
    if args.json:
        print(
            json.dumps(
                [_entry_json(p.entry) | {"already": p.already, "signature_added": p.signature_added} for p in done],
                indent=2,
            )
        )
    return 0


def _entry_json(entry: Entry) -> dict[str, Any]:
    s = entry.summary
    return {
        "name": entry.name,
        "sha256": entry.sha256,
        "size": entry.size,
        "path": entry.path,
        "published": entry.published,
        "signed_by": entry.signed_by,
        "also_signed_by": list(entry.also_signed_by),
        "id": s.id,
        "recipe": s.recipe,
        "backends": list(s.backends),
        "build_number": s.build_number,
        "commit": s.commit,
        "machine": s.machine,
        "glibc": s.runtime.glibc,
        "device_code": {k: list(v) for k, v in s.runtime.device_code.items()},
        "needed": sorted(s.runtime.needed),
    }


def repo_command(args: argparse.Namespace, ctx: Context) -> int:
    source = open_repository(args.repo, ctx)
    return _forget(source, args, ctx) if args.action == "forget" else _list(source, args, ctx)


def _list(source: Repo, args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.artifacts import deliver

    examined = deliver.examine(source, ctx.dirs)
    entries = examined.index.artifacts
    verified = examined.vouched_by is not None
    if args.json:
        print(json.dumps([_entry_json(e) | {"verified": verified} for e in entries], indent=2))
        return 0
    if not entries:
        render.say(f"{args.repo} holds nothing yet")
        return 0
    # two builds of a recipe share an archive name (upstream's): the build id and digest tell their rows apart
    table = render.table(
        "artifact", "build", "id", "sha256", "finished", "backends", "GPU code", "glibc", "MB", "signed by", "verified"
    )
    table.columns[0].overflow = "fold"  # a name cut short names another archive: fold it, at any width
    for e in entries:
        s = e.summary
        code = " ".join(c for codes in s.runtime.device_code.values() for c in codes) or "—"
        table.add_row(
            render.escape(e.name), f"b{s.build_number}", render.escape(s.id), e.sha256[:SHORT_DIGEST], s.finished[:16],
            "+".join(s.backends), code, s.runtime.glibc or "—", f"{e.size / 1e6:.1f}", ", ".join(e.signers) or "unsigned",
            "yes" if verified else "no",
        )  # fmt: skip
    render.show(table)
    if examined.note is not None:
        ctx.warn(f"note: {examined.note}")
    if verified:
        render.say(f"its index {examined.state}, a key trusted here for {source.identity}: each row is vouched for")
    else:
        ctx.warn(f"note: nothing listed is verified: its index.json {examined.state}")
    return 0


def _forget(source: Repo, args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.artifacts import deliver

    if ctx.dirs.data.is_dir():  # else there is nothing to forget, which forget says
        ensure_writable(ctx.dirs.data, "set XDG_DATA_HOME to a writable directory")
    gone = deliver.forget(ctx.dirs, source)
    if args.json:
        print(json.dumps({"repository": gone.identity, "version": gone.version, "name": gone.name}, indent=2))
        return 0
    if gone.version is None and gone.name is None:
        render.say(f"this host remembered nothing of {gone.identity}")
    else:
        render.say(
            f"forgot {gone.identity}: index version {gone.version}, repository {gone.name or 'unnamed'}; its next "
            "install takes what it finds there as a first contact"
        )
    return 0


# --- install --from -----------------------------------------------------------------------------------------------


def _candidate_json(c: Candidate, dirs: Dirs) -> dict[str, Any]:
    from buildmgr.artifacts import deliver

    return {
        "name": c.entry.name,
        "sha256": c.entry.sha256,
        "recipe": c.entry.summary.recipe,
        "build_number": c.entry.summary.build_number,
        "id": c.entry.summary.id,
        "finished": c.entry.summary.finished,
        "fits": c.fits,
        "tier": c.tier.name.lower() if c.tier is not None else None,
        "reasons": list(c.reasons),
        "proves": list(c.proves),
        "vouched_by": c.vouched_by,
        "above_next": c.above_next,
        "installed_here": deliver.installed_here(dirs, c.entry),
    }


def _attempt_json(a: Attempt) -> dict[str, Any]:
    return {"name": a.candidate.entry.name, "outcome": a.outcome, "signed_by": a.signed_by, "devices": list(a.devices)}


_INSTALLED = {
    "these bytes": "installed here already, from this very archive",
    "same build": "a build of this id is installed here already (built here, or from another archive of it)",
}


def _show(ranked: list[Candidate], dirs: Dirs) -> None:
    """Each candidate on its own line, best first, with its reasons indented below: readable at any width."""
    from buildmgr.artifacts import deliver

    for number, c in enumerate(ranked, 1):
        verdict = c.tier.text if c.tier is not None else "does not fit"
        s = c.entry.summary  # an archive name is shared by every build of a recipe: the id and digest tell them apart
        what = f"{c.entry.name}  {s.id}  sha256 {c.entry.sha256[:SHORT_DIGEST]}  {s.finished[:16]}"
        render.result(f"{number if c.fits else '—':>2}  {what}  {verdict}", None if c.fits else "red")
        for reason in c.reasons:
            render.result(f"      {reason}")
        if (here := deliver.installed_here(dirs, c.entry)) is not None:
            render.result(f"      {_INSTALLED[here]}")
        if c.above_next is not None:
            render.result(f"      above {number + 1}: {c.above_next}")


def install_from(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.artifacts import deliver
    from buildmgr.core import hostfacts
    from buildmgr.core.progress import Reporter

    source = open_repository(args.source, ctx)
    machine = hostfacts.read().machine
    listing = deliver.read_index(source, ctx.dirs, args.allow_unsigned)
    if listing.note is not None:
        ctx.warn(f"note: {listing.note}")
    ranked = deliver.candidates(source, listing.index, args.what, ctx.environ, machine, ctx.dirs, args.allow_unsigned)
    if not ranked:  # an empty repository (a missing one is a user error, said when it is opened)
        raise CannotRunHere(f"{args.source} holds no artifact yet: nothing to install (publish puts one there)")
    if not args.json:  # with --json, stdout is the JSON alone: its candidates are the table
        _show(ranked, ctx.dirs)
    fitting = [c for c in ranked if c.fits]
    if args.dry_run:
        if args.json:
            print(json.dumps({"candidates": [_candidate_json(c, ctx.dirs) for c in ranked], "attempts": []}, indent=2))
        return 0 if fitting else 1
    if not fitting:
        if args.json:
            print(json.dumps({"candidates": [_candidate_json(c, ctx.dirs) for c in ranked], "attempts": []}, indent=2))
        raise CannotRunHere(f"no artifact of {args.source} fits this host (the table says why); nothing was installed")
    ensure_writable(ctx.dirs.data, "set XDG_DATA_HOME to a writable directory")
    ensure_writable(ctx.dirs.cache, "set XDG_CACHE_HOME to a writable directory")
    deliver.remember(ctx.dirs, source, listing)  # from now on an older index of it is refused (a dry run keeps none)

    def probe(done: Any) -> list[tuple[str, str]]:  # recorded in the inventory, as after a build
        from buildmgr.devices import inventory

        # the smoke run's probe saw these very files a moment ago, under this environment; one already installed
        # is probed now
        known = {done.build.id: done.probe} if done.probe is not None else None
        entry = inventory.refresh(ctx.dirs, [done.build], ctx.environ, ctx.warn, known).builds[done.build.id]
        return [(d.name, d.backend) for d in entry.probe.devices]

    with render.Download() as progress:
        attempts = deliver.install_best(
            source,
            ranked,
            ctx.dirs,
            ctx.environ,
            Reporter.for_environment(ctx.environ),
            args.allow_unsigned,
            probe,
            progress.update,
        )
    for attempt in attempts:
        if attempt.kind is deliver.Outcome.CANNOT_RUN:
            ctx.warn(f"passed over {attempt.candidate.entry.name}: {attempt.outcome}")
    last = attempts[-1] if attempts else None
    if args.json:
        print(
            json.dumps(
                {"candidates": [_candidate_json(c, ctx.dirs) for c in ranked], "attempts": [_attempt_json(a) for a in attempts]}
                | ({"id": last.installed.build.id, "prefix": str(last.installed.build.prefix)} if last and last.installed else {}),
                indent=2,
            )
        )  # fmt: skip
    if last is not None and last.kind is deliver.Outcome.FAULT:
        entry = last.candidate.entry
        raise RepositoryFault(
            f"{entry.name} ({entry.summary.id}) from {args.source}: {last.outcome}; the install stops here (no "
            "other candidate is installed in place of one its repository failed to deliver); nothing was installed"
        )
    if last is None or last.installed is None:
        raise CannotRunHere(
            f"no artifact of {args.source} installed and proved itself here (each is named above with why); "
            "nothing was installed"
        )
    build = last.installed.build
    signed = f"signed by {last.signed_by}" if last.signed_by else "unsigned (--allow-unsigned)"
    told = f"{last.outcome} {build.id} → {build.prefix} ({signed}); devices it sees: {', '.join(last.devices) or 'none besides the CPU'}"
    (render.say if args.json else render.result)(told)  # with --json, stdout is the JSON alone
    return 0
