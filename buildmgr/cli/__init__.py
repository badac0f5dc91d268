"""The command line: parse, then call one command's function with the `Context`. Errors become one line and an exit
code. Each command group is its own module (`register(sub, name)` adds one command's parser), imported only when
that command is chosen, so a no-op build imports nothing it does not run."""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from buildmgr import __version__
from buildmgr.core.errors import BuildFailed, BuildmgrError, Deadline, UserError

if TYPE_CHECKING:
    from buildmgr.core.config import Context

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

# command → the module of its group, in the order `--help` lists them
COMMANDS = {
    "build": "build",
    "list": "builds",
    "which": "builds",
    "run": "tools",
    "check": "tools",
    "bench": "bench",
    "tune": "tune",
    "remove": "builds",
    "gc": "builds",
    "recipes": "host",
    "doctor": "host",
    "devices": "devices",
    "source": "host",
    "toolchain": "toolchains",
    "verify": "artifacts",
    "cache": "host",
    "matrix": "artifacts",
    "package": "artifacts",
    "install-artifact": "artifacts",
    "key": "keys",
    "publish": "repos",
    "repo": "repos",
    "install": "repos",
    "rpc": "rpc",
}
TAKES_A_TOOL = ("run", "check")  # `-- TOOL ARGS…` after buildmgr's own arguments
BUILD_HELP = "build id, or a recipe name for its newest build"  # every command's BUILD argument
# what to do about a failed write or read, by its errno: free space is named only where it is the cause
_OS_FIX = {
    errno.ENOSPC: "free some space there, or name another path",
    errno.EDQUOT: "free some of your quota there, or name another path",
    errno.EROFS: "that file system is read-only: name a writable path",
    errno.EACCES: "you may not write or read there: name another path, or fix its permissions",
    errno.EPERM: "you may not write or read there: name another path, or fix its permissions",
}


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # exact flags only: `build --reb` must not be --rebuild
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other user error
        raise UserError(f"{message} (see '{self.prog} --help')")


def command(
    sub: Subparsers,
    name: str,
    func: Callable[[argparse.Namespace, Context], int],
    help: str,
    *,
    json: bool = False,
    about: str = "",
    example: str = "",
) -> argparse.ArgumentParser:
    """One command's parser, calling `func(args, ctx)`; with `json`, its --json switch for scripts. `about`: the
    paragraph its --help opens with (else `help`); `example`: the lines of its example, shown last."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=about or help,
        epilog=("examples:\n" + "\n".join(f"  {line}" for line in example.splitlines())) if example else None,
        formatter_class=_Help,
    )
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=func)
    return parser


def network_timeout_s(ctx: Context) -> float:
    """How long another host may take to answer (a repository, a server --rpc names): the network timeout setting."""
    from buildmgr.artifacts.repo.net import Limits

    return Limits.parse(ctx.settings.network_timeout).timeout_s


class _Help(argparse.HelpFormatter):
    """The paragraph wraps to the terminal as the options do; the examples keep their lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _chosen(argv: list[str]) -> str | None:
    """The command word: the first argument that is not an option of buildmgr itself."""
    return next((word for word in argv if not word.startswith("-")), None)


def split_tool(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """buildmgr's own arguments, and the tool's command line after the first '--' of a command that runs a tool."""
    if _chosen(argv) in TAKES_A_TOOL and "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, None


def parser(command: str | None) -> argparse.ArgumentParser:
    """The parser with the chosen command's parser only, or with every command's where none is known (--help)."""
    top = Parser(prog="buildmgr", description="Build llama.cpp for ggml backends into proven, versioned prefixes.")
    top.add_argument("--version", action="version", version=f"buildmgr {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    names = [command] if command in COMMANDS else list(COMMANDS)
    for name in names:
        importlib.import_module(f"buildmgr.cli.{COMMANDS[name]}").register(sub, name)
    return top


def parse(own: list[str], tool: list[str] | None) -> argparse.Namespace:
    """buildmgr's own arguments; for a command that runs a tool, its command line after '--' (or, without '--', the
    words after BUILD, where an option is taken for buildmgr's and refused with where it goes)."""
    chosen = _chosen(own)
    top = parser(chosen)
    args, unknown = top.parse_known_args(own)
    if unknown:
        raise UserError(_unrecognized(top, chosen, unknown, tool is None))
    if chosen in TAKES_A_TOOL:
        args.tool_command = tool if tool is not None else list(args.words)
    return args


def _unrecognized(top: argparse.ArgumentParser, chosen: str | None, unknown: list[str], no_tool: bool) -> str:
    """What was not understood, the option it is close to, and the help of the command it was given to."""
    import difflib

    commands = next((a.choices for a in top._actions if isinstance(a, argparse._SubParsersAction)), {})
    own = commands.get(chosen) if chosen else None
    options = [o for a in (own or top)._actions for o in a.option_strings]
    word = unknown[0].split("=", 1)[0]
    close = [o for o in options if _abbreviates(word, o)] or (
        difflib.get_close_matches(word, options, n=1, cutoff=0.75) if word.startswith("-") else []
    )
    message = f"unrecognized arguments: {' '.join(unknown)}"
    if close:
        message += f"; did you mean {close[0]}?"
    elif chosen in TAKES_A_TOOL and no_tool:
        message += f"; a tool's command line goes after '--': buildmgr {chosen} BUILD [options] -- TOOL ARGS…"
    return message + f" (see 'buildmgr {chosen} --help')" if own else message + " (see 'buildmgr --help')"


def _abbreviates(word: str, option: str) -> bool:
    """--reps for --repetitions: the same first three letters, and every letter of the word in order in the option."""
    short, long = word.lstrip("-"), option.lstrip("-")
    if len(short) < 3 or len(short) >= len(long) or short[:3] != long[:3] or word[:2] != option[:2]:
        return False
    letters = iter(long)
    return all(letter in letters for letter in short)


def one_line(text: str) -> str:
    """A message that quotes the user's input stays one printable line: a newline, a NUL or an undecodable byte in
    that input is shown escaped."""
    from buildmgr.cli import render

    return render.inert(text).replace("\n", "\\n")


class _Watched:
    """stdout, noting whether anything was written: a --json command that fails before its JSON still prints one."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.written = False

    def write(self, text: str) -> int:
        self.written = self.written or bool(text)
        return self.inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _failed(watched: _Watched | None, message: str, code: int, log: str | None = None) -> int:
    """The error on stderr, and with --json, where nothing was printed yet, as JSON on stdout."""
    from buildmgr.cli import render

    render.say(f"buildmgr: error: {message}")
    if watched is not None and not watched.written:
        print(json.dumps({"error": message, "exit_code": code} | ({"log": log} if log else {})))
    return code


def main(argv: list[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in words[: words.index("--") if "--" in words else len(words)]:
        return _run(words, None)
    watched = _Watched(sys.stdout)
    sys.stdout = watched
    try:
        return _run(words, watched)
    finally:
        sys.stdout = watched.inner


def _run(words: list[str], watched: _Watched | None) -> int:
    from buildmgr.cli import render

    try:
        own, tool = split_tool(words)
        args = parse(own, tool)
        from buildmgr.core.config import Context

        code: int = args.func(args, Context.from_environment(os.environ, render.warn))
        return code
    except BuildFailed as err:
        for hint in err.hints:
            render.say(f"likely fix: {hint}", "bold yellow")
        for line in err.tail:
            render.say(f"  {line}")
        code = _failed(watched, one_line(str(err)), err.exit_code, str(err.log) if err.log is not None else None)
        if err.log is not None:
            render.say(f"full log: {err.log}")
        return code
    except BuildmgrError as err:
        return _failed(watched, one_line(str(err)), err.exit_code)
    except Deadline:  # a repository read's timer that went off as its block ended (`within` says the others)
        return _failed(watched, "a repository's server was cut off at its network timeout; run it again", 1)
    except KeyboardInterrupt:
        render.err().print("buildmgr: interrupted")
        return 130
    except BrokenPipeError:  # `buildmgr list --json | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # disk full, read-only file system, permission, not a directory …: one line, the path
        paths = [str(p) for p in (err.filename, err.filename2) if p]
        where = f": {' → '.join(paths)}" if paths else ""
        message = f"{err.strerror or err}{where}; {_OS_FIX.get(err.errno or 0, 'check that path')}"
        return _failed(watched, one_line(message), 2)
