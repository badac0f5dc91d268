"""docs/spec.md is the contract: these keep it true as the code changes."""

import re
from dataclasses import fields
from pathlib import Path

from buildmgr.backends import enumeration_table, enumeration_variables
from buildmgr.cli import parser
from buildmgr.core.device_records import Device

SPEC = (Path(__file__).parent.parent / "docs" / "spec.md").read_text()


def subcommands() -> set[str]:
    action = next(a for a in parser(None)._actions if a.dest == "command")
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


def test_the_enumeration_list_is_the_one_the_backends_declare():
    listed = SPEC.split("<!-- enumeration: begin -->\n")[1].split("\n<!-- enumeration: end -->")[0]
    assert listed == enumeration_table(), (
        "docs/spec.md's enumeration list is stale: replace it with "
        'python -c "from buildmgr import backends; print(backends.enumeration_table())"'
    )
    assert set(enumeration_variables()) <= set(re.findall(r"`([A-Z][A-Z_]+)`", listed))


def documented_receipt_fields() -> set[str]:
    """Every name in backticks in the receipt table: its fields, and the fields of its parts."""
    table = SPEC.split("## Receipt: `buildmgr-receipt.json`")[1].split("\n## ")[0]
    return set(re.findall(r"`(\w+)`", table))


def test_every_matrix_entry_field_is_documented(tmp_path):
    from buildmgr.artifacts import matrix
    from buildmgr.building.options import all_recipes
    from buildmgr.core.config import Dirs

    known = all_recipes(Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "cfg"))
    request = matrix.MatrixRequest(("cpu", "universal+cuda+vulkan"), {"--sm": ("90",)})
    entries, _ = matrix.matrix(request, known, 11312, "0c1e57098bba43ac29e6e3b677cdceebdd22334f")
    section = SPEC.split("**matrix** entries")[1].split("\n\n")[0]
    assert set(entries[0]) | set(entries[1]) <= set(re.findall(r"`(\w+)`", section))


def test_every_field_of_the_typed_receipt_is_documented():
    from dataclasses import is_dataclass
    from typing import get_args, get_type_hints

    from buildmgr.store.receipt import Receipt

    def names(record) -> set[str]:
        found = set()
        hints = get_type_hints(record)
        for name, kind in ((f.name, hints[f.name]) for f in fields(record)):
            found.add(name)
            for part in (kind, *get_args(kind)):
                if is_dataclass(part) and part is not record:
                    found |= names(part)
        return found

    assert names(Receipt) <= documented_receipt_fields()


def test_every_field_of_the_typed_inventory_is_documented():
    from buildmgr.devices.inventory_file import BuildEntry, Inventory, InventoryCard, ProbeRecord

    section = SPEC.split("### Inventory:")[1].split("\n## ")[0]
    # a field is documented where the section names it as code (`ok`, or inside `{ok, time, …}`), never by a word of
    # its prose: "time" or "error" in a sentence documents no field (issue #67)
    named = {word for span in re.findall(r"`([^`]+)`", section) for word in re.findall(r"\w+", span)}
    for record in (Inventory, BuildEntry, ProbeRecord, InventoryCard):
        missing = {f.name for f in fields(record)} - named
        assert not missing, (record.__name__, missing)


def test_every_field_of_the_repository_index_is_documented():
    from buildmgr.artifacts.index import ArchiveSummary, Entry, Index

    section = SPEC.split("## Binary repositories")[1].split("\n## ")[0]
    quoted = set(re.findall(r'"(\w+)"', section))
    assert {f.name for record in (Index, Entry, ArchiveSummary) for f in fields(record)} <= quoted
