"""docs/spec.md is the contract: these keep it true as the code changes."""

import re
from dataclasses import fields
from pathlib import Path

from buildmgr.backends import enumeration_variables
from buildmgr.cli import _parser
from buildmgr.probe import Device

SPEC = (Path(__file__).parent.parent / "docs" / "spec.md").read_text()


def subcommands() -> set[str]:
    action = next(a for a in _parser()._actions if a.dest == "command")
    return set(action.choices)


def test_every_documented_command_exists_and_every_command_is_documented():
    documented = set(re.findall(r"^\| `buildmgr (\w[\w-]*)", SPEC, flags=re.MULTILINE))
    assert documented == subcommands()


def test_every_device_field_is_documented():
    table = SPEC.split("### Device JSON")[1].split("Rules")[0]
    documented = {
        name
        for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.MULTILINE)
        for name in re.findall(r"`(\w+)`", cell)
    }
    assert {f.name for f in fields(Device)} | {"moves_with"} == documented


def test_every_enumeration_variable_is_documented():
    section = SPEC.split("### Enumeration environment")[1].split("###")[0]
    assert set(enumeration_variables()) == set(re.findall(r"`([A-Z][A-Z_]+)`", section))
