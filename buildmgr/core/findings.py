"""One shape for what buildmgr found wrong or worth knowing, wherever it looked: a placement flag, an artifact on
this host, a build's GPU code. Each says how sure it is, what it is about, what is wrong and what would work."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple


class Severity(str, Enum):
    """How sure a finding is (its value is what JSON and messages say)."""

    ERROR = "error"  # llama.cpp (or the host) will certainly fail
    WARNING = "warning"  # risky
    NOTE = "note"  # worth knowing

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Check:
    """One preflight fact, ok or not: what was looked for, what was found, and how to fix it if it failed (`doctor`
    lists every one; a failed one stops a build before it starts)."""

    backend: str
    what: str
    ok: bool
    found: str = ""
    fix: str = ""

    def line(self) -> str:
        return f"{self.backend}: {self.what}: {self.found}" + ("" if self.ok else f"; {self.fix}")


@dataclass(frozen=True)
class Finding:
    severity: Severity
    subject: str  # what it is about: a flag as written, a device, a backend; "" for the whole thing
    message: str
    fix: str = ""
    rule: str = ""  # the id of the rule that found it, where one did

    def text(self) -> str:
        """What is wrong and how to fix it, without the severity."""
        head = f"{self.subject}: {self.message}" if self.subject else self.message
        return head + (f"; {self.fix}" if self.fix else "")

    def line(self) -> str:
        return f"{self.severity.value}: {self.text()}"


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def warnings(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.WARNING]


class Signature(NamedTuple):
    """How a known failure shows in a log (a build's, or a llama.cpp run's), and what fixes it: a new log format or
    failure is one more row in a table of these (a NamedTuple: the tables are made when their modules load, on every
    no-op's path)."""

    name: str
    pattern: str  # a regular expression; compiled on first use (re keeps it), not when the table is made
    fix: str = ""

    def found_in(self, text: str) -> bool:
        return re.search(self.pattern, text) is not None


def first_match(signatures: Iterable[Signature], text: str) -> Signature | None:
    return next((s for s in signatures if s.found_in(text)), None)
