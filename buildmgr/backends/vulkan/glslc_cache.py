"""A content-addressed cache of glslc's outputs: the ccache of ggml-vulkan's shaders.

ggml-vulkan's vulkan-shaders-gen runs glslc once per shader variant (about 1,100 at the pin), and ccache cannot serve
them, so a warm rebuild spent most of its time there. Given to CMake as `Vulkan_GLSLC_EXECUTABLE`, this launcher keys
each compile by glslc's stamp, its flags, the shader's name and the text of the shader and of every file it includes
(found by following `#include` lines, whichever `#if` they sit under). A hit copies the stored SPIR-V and writes the
depfile if one was asked for; anything it does not understand (`-o -`, `-I`, several inputs) runs glslc unchanged.

It runs as its own small process per shader, so it imports little beyond os and hashlib (start-up is the cost of a
hit).
"""

from __future__ import annotations

import hashlib
import os
import sys

TYPE_CHECKING = False  # typing itself costs each shader's start-up
if TYPE_CHECKING:
    from pathlib import Path

# Flags whose meaning this launcher cannot key on: glslc runs unchanged.
_PASS_THROUGH = ("-M", "-E", "-S", "-I", "-c", "--show-limits")
STATSLOG_ENV = "BUILDMGR_SHADER_STATSLOG"  # one word per compile: hit, miss or direct


def parse(args: list[str]) -> tuple[list[str], str, str, str | None] | None:
    """glslc's arguments → (flags, input, output, depfile), or None when the call is not one this launcher caches.

    `-MD -MF FILE` is understood: the launcher writes the depfile itself on a hit."""
    flags: list[str] = []
    inputs: list[str] = []
    output = depfile = None
    items = iter(args)
    for arg in items:
        if arg == "-o":
            output = next(items, None)
        elif arg == "-MF":
            depfile = next(items, None)
        elif arg == "-MD":
            continue
        elif arg.startswith(_PASS_THROUGH):
            return None
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            inputs.append(arg)
    if len(inputs) != 1 or output in (None, "-") or ("-MD" in args) != (depfile is not None):
        return None
    return flags, inputs[0], output, depfile


def _included(text: bytes) -> list[str]:
    """Names in `#include "x"` / `#include <x>` lines (no regex: this runs once per shader, start-up counts)."""
    names = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(b"#") and stripped[1:].lstrip().startswith(b"include"):
            rest = stripped[1:].lstrip()[len(b"include") :].strip()
            if rest[:1] in (b'"', b"<"):
                close = rest.find(b'"' if rest[:1] == b'"' else b">", 1)
                if close > 1:
                    names.append(rest[1:close].decode(errors="surrogateescape"))
    return names


def sources(shader: str) -> dict[str, bytes] | None:
    """The shader and every file it includes, transitively, whichever `#if` they sit under; None if one is missing."""
    found: dict[str, bytes] = {}
    pending = [os.path.normpath(shader)]
    while pending:
        path = pending.pop()
        if path in found:
            continue
        try:
            with open(path, "rb") as handle:
                found[path] = handle.read()
        except OSError:
            return None
        pending.extend(os.path.normpath(os.path.join(os.path.dirname(path), n)) for n in _included(found[path]))
    return found


def key(glslc: str, flags: list[str], shader: str, texts: dict[str, bytes]) -> str:
    stat = os.stat(glslc)
    digest = hashlib.sha256(f"{os.path.realpath(glslc)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for part in [*flags, os.path.basename(shader)]:
        digest.update(part.encode(errors="surrogateescape") + b"\0")
    base = os.path.dirname(os.path.normpath(shader))
    for path in sorted(texts):
        text = texts[path]
        name = os.path.relpath(path, base).encode(errors="surrogateescape")
        digest.update(name + b"\0" + str(len(text)).encode() + b"\0" + text)
    return digest.hexdigest()


def _copy_atomically(source: str, destination: str) -> None:
    temporary = os.path.join(os.path.dirname(destination) or ".", f".{os.path.basename(destination)}.{os.getpid()}.tmp")
    with open(source, "rb") as reader, open(temporary, "wb") as writer:  # not shutil: its import costs every shader
        writer.write(reader.read())
    os.replace(temporary, destination)


def _compile(glslc: str, args: list[str]) -> tuple[int, bytes]:
    """Run glslc with its stderr captured (a warning keeps the output out of the cache), through os alone: importing
    subprocess cost each missed shader 13 ms, about a fifth of a cold build's extra time in shaders."""
    reader, writer = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, writer, 2), (os.POSIX_SPAWN_CLOSE, reader), (os.POSIX_SPAWN_CLOSE, writer)]
    pid = os.posix_spawnp(glslc, [glslc, *args], os.environ, file_actions=actions)
    os.close(writer)
    chunks = []
    while chunk := os.read(reader, 65536):
        chunks.append(chunk)
    os.close(reader)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), b"".join(chunks)


def _write_depfile(depfile: str, output: str, texts: dict[str, bytes]) -> None:
    """What glslc's -MD writes: the output, then every source it read (an unused #if branch's include is listed too:
    a needless rebuild at worst, never a missed one)."""
    escaped = [path.replace(" ", "\\ ") for path in texts]
    with open(depfile, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(f"{output.replace(' ', chr(92) + ' ')}: {' '.join(escaped)}\n")


def _log(word: str) -> None:
    statslog = os.environ.get(STATSLOG_ENV)
    if statslog:
        with open(statslog, "a", encoding="ascii") as log:
            log.write(word + "\n")


def run(glslc: str, cache: str, args: list[str]) -> int:
    request = parse(args)
    texts = sources(request[1]) if request else None
    if request is None or texts is None:
        _log("direct")
        os.execvp(glslc, [glslc, *args])  # glslc takes this process over: its output and exit status are the launcher's
    flags, shader, output, depfile = request
    digest = key(glslc, flags, shader, texts)
    entry = os.path.join(cache, digest[:2], digest)
    if os.path.isfile(entry):
        _copy_atomically(entry, output)
        if depfile:
            _write_depfile(depfile, output, texts)
        os.utime(entry)  # last use, for prune()
        _log("hit")
        return 0
    returncode, errors = _compile(glslc, args)
    sys.stderr.buffer.write(errors)
    _log("miss")
    if returncode == 0 and not errors and os.path.isfile(output):  # a warning is shown again next time
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        _copy_atomically(output, entry)
    return returncode


def launcher(directory: Path, glslc: str, cache: Path) -> Path:
    """Write the program CMake is given as glslc: this Python, a copy of this file alone beside it (not the package:
    each import costs every shader; and not buildmgr's own file, which a pip upgrade may replace mid-build), the real
    glslc and the cache."""
    from buildmgr.core.fsutil import atomic_write_text  # in buildmgr's process, never a shader's

    with open(__file__, encoding="utf-8") as handle:
        module = handle.read()
    path = directory / "glslc-cached"
    text = (
        f"#!{sys.executable} -S\n"
        "import sys\n"
        f"sys.path.insert(0, {str(directory)!r})\n"
        "from glslc_cache import run\n"
        f"sys.exit(run({glslc!r}, {str(cache)!r}, sys.argv[1:]))\n"
    )
    for target, wanted, mode in ((directory / "glslc_cache.py", module, 0o644), (path, text, 0o755)):
        if not target.is_file() or target.read_text(encoding="utf-8") != wanted:
            atomic_write_text(target, wanted)
            target.chmod(mode)
    return path


UNUSED_DAYS = 30


def prune(cache: Path, now: float, dry: bool = False, days: int = UNUSED_DAYS) -> list[Path]:
    """Remove the entries no build used for `days` (`dry`: only list them): the cache would otherwise keep every
    source version's shaders."""
    removed = []
    for entry in sorted(cache.glob("??/*")):
        try:
            if now - entry.stat().st_mtime > days * 86400:
                if not dry:
                    entry.unlink()
                removed.append(entry)
        except OSError:
            continue  # taken by another gc
    return removed


def environ(statslog: Path) -> dict[str, str]:
    return {STATSLOG_ENV: str(statslog)}


def counts(statslog_text: str) -> dict[str, int]:
    words = statslog_text.split()
    return {word: words.count(word) for word in ("hit", "miss", "direct")}
