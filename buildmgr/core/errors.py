"""Every error that reaches the user. The CLI catches `BuildmgrError` and exits with its code."""

from __future__ import annotations

from pathlib import Path


class BuildmgrError(Exception):
    exit_code = 1


class UserError(BuildmgrError):
    """Bad input: the message says what is wrong and how to fix it. Nothing was written."""

    exit_code = 2


TAIL_LINES = 20  # of a failed build's or tool's output, shown with its error


class BuildFailed(BuildmgrError):
    """The build or a built tool failed. The log is kept."""

    exit_code = 1

    def __init__(
        self, message: str, log: Path | None = None, tail: tuple[str, ...] = (), hints: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.log = log
        self.tail = tail
        self.hints = hints  # known fixes matched in the log, printed above the tail


class CannotRunHere(BuildmgrError):
    """This host certainly cannot run what was asked for (an artifact's glibc, libraries or GPU code): nothing was
    built, nothing was installed."""

    exit_code = 1


class Unreachable(BuildmgrError):
    """Another host named on the command line (an RPC server) that takes no connection, or refuses the client: each
    named with why; nothing was written."""

    exit_code = 1


class RepositoryFault(BuildmgrError):
    """A binary repository that cannot be read, or whose files are not what its index and signatures say (a changed
    blob, a missing file, a bad signature): nothing was installed."""

    exit_code = 1


class NetworkFault(RepositoryFault):
    """A repository that could not be read as it should, in time: unreachable, silent, too slow, cut short, or
    redirected where no hop may go. What came intact of an archive is kept: the next try resumes it."""


class Deadline(BaseException):
    """A repository read's timer went off (`artifacts.repo.net.within`). Not an Exception: no library's broad
    `except Exception` swallows it on its way up; `within` makes it a NetworkFault, and the command line says one
    that got past it (the timer going off as its block ended) as one."""
