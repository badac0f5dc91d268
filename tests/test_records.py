"""The typed receipt and inventory: every one buildmgr wrote on real GPUs reads back as the same JSON, and any field
of the wrong shape is refused with its path, never a KeyError in a command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import WORKS, buildmgr, make_env, receipt_json, write_fake_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from buildmgr import store
from buildmgr.core.jsonshape import ShapeError
from buildmgr.devices.inventory_file import Inventory
from buildmgr.store.receipt import Receipt

FIXTURES = Path(__file__).parent / "fixtures"
REAL = sorted(FIXTURES.rglob("*receipt.json"))
H200_SCHEMA_1 = json.loads((FIXTURES / "h200" / "cold-2" / "buildmgr.receipt.json").read_text())
H200X2_INVENTORY = json.loads((FIXTURES / "h200x2" / "devices.json").read_text())


def as_schema_2(data: dict) -> dict:
    """What a schema-1 receipt is in schema 2: `cuda_sass` + `cuda_ptx` are CUDA's device code, `hip_targets` ROCm's."""
    if data["schema"] != 1:
        return data
    if "runtime" not in data:
        return data | {"schema": 2}
    runtime = {k: v for k, v in data["runtime"].items() if k not in ("cuda_sass", "cuda_ptx", "hip_targets")}
    cuda = data["runtime"]["cuda_sass"] + data["runtime"]["cuda_ptx"]
    code = ({"CUDA": cuda} if cuda else {}) | (
        {"ROCm": data["runtime"]["hip_targets"]} if data["runtime"]["hip_targets"] else {}
    )
    return data | {"schema": 2, "runtime": runtime | {"device_code": code}}


@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_receipt_made_on_a_gpu_host_reads_back_as_the_same_json(path):
    data = json.loads(path.read_text())
    # receipts from before the shader cache lack the key; it is written as null
    assert Receipt.from_json(data).to_json() == {"shader_cache": None} | as_schema_2(data)


def test_the_optional_parts_are_written_only_where_they_were_read():
    """`installed_from` only in an installed artifact (h200/typed/installed.receipt.json is a real one); `runtime`
    absent in receipts before 2026-11-30."""
    assert Receipt.from_json(
        json.loads((FIXTURES / "h200" / "typed" / "installed.receipt.json").read_text())
    ).installed_from
    made = receipt_json()
    installed = made | {
        "installed_from": {
            "artifact": "a.tar.gz",
            "sha256": "0" * 64,
            "installed": "2026-12-01T00:00:00+00:00",
            "smoke": made["smoke"],
            "warnings": ["w"],
            "log": "/l",
        }
    }
    old = {k: v for k, v in made.items() if k != "runtime"}
    assert Receipt.from_json(installed).to_json() == installed
    assert Receipt.from_json(old).to_json() == old and Receipt.from_json(old).runtime is None


def _leaves(value, path="", keys=()):
    """(path, keys, value) for every value in a JSON tree, containers included, with the reader's path spelling."""
    yield path, keys, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        yield from _leaves(item, here, (*keys, key))


def _set(data, keys, new):
    if not keys:
        return new
    copy = dict(data) if isinstance(data, dict) else list(data)
    copy[keys[0]] = _set(data[keys[0]], keys[1:], new)
    return copy


def _wrong_value(value):
    """A value of another JSON type than `value`, that no field typed like `value` accepts."""
    if value is None:
        return [1]
    if isinstance(value, (bool, int, float)):
        return "x"
    if isinstance(value, str):
        return 3
    return "x"  # a list or an object


def _checked(path: str) -> bool:
    """Every field but the schema (tested below), the inventory's free-form host facts and its derived moves_with."""
    return path not in ("", "schema") and not path.startswith("host.") and ".moves_with" not in path


H200 = as_schema_2(H200_SCHEMA_1)
LEAVES = [(Receipt, H200, leaf) for leaf in _leaves(H200) if _checked(leaf[0])]
LEAVES += [(Inventory, H200X2_INVENTORY, leaf) for leaf in _leaves(H200X2_INVENTORY) if _checked(leaf[0])]


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(LEAVES))
def test_a_field_of_the_wrong_type_is_refused_with_its_path(case):
    record, sample, (path, keys, value) = case
    with pytest.raises(ShapeError) as raised:
        record.from_json(_set(sample, keys, _wrong_value(value)))
    assert str(raised.value).startswith(f"{path}:"), (path, str(raised.value))


@pytest.mark.parametrize(
    "path",
    [
        FIXTURES / "h200x2" / "devices.json",
        FIXTURES / "h200" / "typed" / "devices.json",
        FIXTURES / "h200" / "structure" / "devices.json",
    ],
)
def test_the_inventories_made_on_gpu_hosts_read_back(path):
    data = json.loads(path.read_text())
    assert Inventory.from_json(data).to_json() == data


def test_an_older_inventory_still_reads():
    older = json.loads((FIXTURES / "h200" / "devices.json").read_text())  # before the API probe and the cards
    entry = next(iter(Inventory.from_json(older).builds.values()))
    assert entry.probe.method == "" and entry.devices and entry.default_selection == {}


@pytest.mark.parametrize("field", ["id", "recipe", "source", "files", "smoke", "host"])
def test_a_missing_field_is_named(field):
    with pytest.raises(ShapeError, match=f"^{field} is missing$"):
        Receipt.from_json({k: v for k, v in H200.items() if k != field})


def test_a_newer_schema_is_named_as_such_and_a_missing_one_is_not_a_receipt():
    with pytest.raises(ShapeError, match="written by a newer buildmgr"):
        Receipt.from_json(H200 | {"schema": 3})
    for schema in (0, None, True, "1"):
        with pytest.raises(ShapeError, match=r"^schema: expected 2"):
            Receipt.from_json(H200 | {"schema": schema})


def test_list_names_a_prefix_whose_receipt_it_cannot_read_and_lists_the_rest(tmp_path):
    env = make_env(tmp_path)
    builds = Path(env["XDG_DATA_HOME"]) / "buildmgr" / "builds" / "0.5.0-0c1e570"
    good, bad = builds / "cpu-11111111", builds / "cpu-22222222"
    good.mkdir(parents=True)
    bad.mkdir()
    (good / store.RECEIPT).write_text(json.dumps(receipt_json("cpu-11111111")))
    (bad / store.RECEIPT).write_text(json.dumps(receipt_json("cpu-22222222", recipe={"backends": "CPU"})))
    table = buildmgr(env, "list")
    assert table.returncode == 0, table.stderr
    assert "cpu-11111111" in table.stdout and "cpu-22222222" not in table.stdout
    assert f"{bad}: its receipt cannot be read (recipe.backends: expected a list" in table.stderr
    (good / store.RECEIPT).unlink()
    assert "no build this buildmgr can read" in buildmgr(env, "list").stderr
    (good / store.RECEIPT).write_text(json.dumps(receipt_json("cpu-11111111")))
    listed = json.loads(buildmgr(env, "list", "--json").stdout)
    assert [b["id"] for b in listed["builds"]] == ["cpu-11111111"]
    assert listed["unreadable"] == [
        {"prefix": str(bad), "reason": "recipe.backends: expected a list, got 'CPU'"},
    ]


def test_a_build_whose_receipt_cannot_be_read_is_built_again_and_says_so(tmp_path):
    """Not silently: the prefix is replaced by a whole build with a readable receipt, and the run says why."""
    tree = write_fake_tree(tmp_path / "src", WORKS)
    env = make_env(tmp_path)
    prefix = Path(json.loads(buildmgr(env, "build", "--source", str(tree), "--json").stdout)["prefix"])
    (prefix / store.RECEIPT).write_text('{"schema": 1}')
    which = buildmgr(env, "which", prefix.name)
    assert which.returncode == 2 and "1 prefix whose receipt cannot be read ('buildmgr list' names it)" in which.stderr
    again = buildmgr(env, "build", "--source", str(tree))
    assert again.returncode == 0, again.stderr
    assert f"{prefix}: its receipt cannot be read (id is missing); building it again replaces it" in again.stderr
    assert store.read_receipt(prefix) is not None and buildmgr(env, "which", prefix.name).returncode == 0


@pytest.mark.parametrize("wrong", ["sm_90", [90]])
def test_a_schema_1_gpu_code_field_of_the_wrong_shape_is_refused_not_dropped(wrong):
    data = H200_SCHEMA_1 | {"runtime": H200_SCHEMA_1["runtime"] | {"cuda_sass": wrong}}
    with pytest.raises(ShapeError, match=r"^runtime\.device_code\.CUDA"):
        Receipt.from_json(data)
