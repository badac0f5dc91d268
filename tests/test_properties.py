"""Property tests: every input a user can type either works or is one UserError; never another exception.

Each property runs 500 examples (hypothesis), including NUL bytes, '../', absolute paths, very long names and
text that is not UTF-8 (surrogates).
"""

import string
from pathlib import Path

from conftest import make_receipt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildmgr.backends.cuda.arch import parse_sm
from buildmgr.backends.cuda.smi import parse_nvidia_smi_csv
from buildmgr.backends.hip.arch import parse_gfx
from buildmgr.backends.vulkan.info import parse_vulkaninfo_summary
from buildmgr.building.recipes import compose, load_recipes, parse_defines, parse_recipe
from buildmgr.building.source.tree import parse_source_spec
from buildmgr.core.config import resource_path
from buildmgr.core.errors import UserError
from buildmgr.devices.captures import parse_list_devices, read_text
from buildmgr.placement import syntax
from buildmgr.store import Build

EXAMPLES = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RECIPES = load_recipes(resource_path("recipes"))
hostile = st.one_of(
    st.text(),
    st.text(alphabet=string.printable + "\0/.\\+=,;@:-"),
    st.sampled_from(["../", "/bin/sh", "..", ".", "\0", "a" * 5000, "\udcff", "-rf", "--upload-pack=x", "x@y", "@"]),
    st.builds(lambda parts: "/".join(parts), st.lists(st.sampled_from(["..", ".", "etc", "", "x"]), max_size=6)),
)


def works_or_user_error(function, *args):
    try:
        function(*args)
    except UserError as err:
        assert "\n" not in str(err).strip(), "a user error is one line"


@EXAMPLES
@given(st.one_of(hostile, st.builds("+".join, st.lists(st.sampled_from([*RECIPES, "x", "", "+"]), max_size=5))))
def test_recipe_expressions(expression):
    works_or_user_error(compose, expression, RECIPES)


@EXAMPLES
@given(hostile, st.text())
def test_recipe_files(name, text):
    works_or_user_error(parse_recipe, name, text, "mine.toml")


@EXAMPLES
@given(
    st.dictionaries(
        st.sampled_from(["backends", "targets", "tools", "defines", "conflicts", "description", "x"]),
        st.recursive(
            st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none()),
            lambda inner: st.one_of(
                st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
    )
)
def test_recipe_tables_of_any_shape(table):
    import json

    text = "\n".join(f"{key} = {json.dumps(value)}" for key, value in table.items() if value is not None)
    works_or_user_error(parse_recipe, "mine", text, "mine.toml")


@EXAMPLES
@given(st.lists(hostile, max_size=4))
def test_defines(items):
    works_or_user_error(parse_defines, tuple(items))


@EXAMPLES
@given(hostile)
def test_arch_lists(text):
    works_or_user_error(parse_sm, text, (75, 80, 86, 89, 90, 100, 120), "13.0")
    works_or_user_error(parse_gfx, text)


@EXAMPLES
@given(hostile)
def test_source_values(text):
    works_or_user_error(parse_source_spec, text)


@EXAMPLES
@given(hostile)
def test_tool_names_never_leave_bin(name):
    build = Build("cpu-12345678", Path("/prefix"), make_receipt("cpu-12345678"))
    try:
        path = build.tool(name)
    except UserError:
        return
    assert path.parent == Path("/prefix/bin") and path.name == name


@EXAMPLES
@given(st.text(), st.text(), st.text())
def test_captured_text(listing, vulkaninfo, nvidia_smi):
    works_or_user_error(parse_list_devices, listing)
    works_or_user_error(parse_list_devices, "Available devices:\n" + listing)
    works_or_user_error(read_text, listing)
    works_or_user_error(read_text, "ggml_vulkan: 0 = " + listing)
    parse_vulkaninfo_summary(vulkaninfo)
    parse_nvidia_smi_csv(nvidia_smi)


_WORDS = st.text(alphabet=string.ascii_letters + string.digits + " ()-_.", min_size=1, max_size=40)


@EXAMPLES
@given(
    st.sampled_from(["CUDA", "Vulkan", "ROCm", "SYCL", "MTL", "RPC"]),
    st.integers(0, 31),
    _WORDS.filter(lambda d: d.strip() and d.strip()[0] not in "()"),
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.lists(st.text(alphabet=string.ascii_letters + string.digits + " .-=[]", max_size=60), max_size=4),
)
def test_a_listed_device_reads_back_as_it_was_printed(backend, index, description, total, free, noise):
    """Issue #67: the parsers' property was only that nothing raises. What --list-devices printed, in the format string
    of the pinned source ("  %s: %s (%zu MiB, %zu MiB free)"), with any log noise around it, reads back whole: the
    name, the description (its own parentheses kept), both sizes."""
    name = f"{backend}{index}"
    text = "\n".join([*noise, "Available devices:", f"  {name}: {description} ({total} MiB, {free} MiB free)", *noise])
    for parsed in (parse_list_devices(text), read_text(text).devices):
        [device] = [d for d in parsed if d.name == name]
        assert (device.backend, device.index, device.description) == (backend, index, description.strip())
        assert (device.memory_total_mib, device.memory_free_mib) == (total, free)


@EXAMPLES
@given(
    st.sampled_from(["llama-cli", "llama-bench", "llama-server"]),
    st.lists(
        st.one_of(hostile, st.sampled_from(["-dev", "-sm", "-mg", "-ts", "-ot", "-ngl", "--device=x", "-ncmoe"])),
        max_size=8,
    ),
    st.dictionaries(st.sampled_from([o.env for o in syntax.OPTIONS]), hostile, max_size=3),
)
def test_placement_flags(tool, args, environ):
    works_or_user_error(syntax.parse, tool, args, environ)


@EXAMPLES
@given(st.lists(st.sampled_from(sorted(RECIPES)), min_size=1, max_size=4))
def test_a_composition_of_shipped_recipes_is_their_union_or_names_two_that_clash(names):
    """Over the shipped recipes (cpu, cuda, hip, universal …): either one recipe of exactly the parts (its name
    canonical, its backends and targets the union, every part's defines in it), or a one-line refusal that names two
    of the parts it was given (a conflict, or two defines that disagree)."""
    parts = sorted(set(names))
    try:
        recipe = compose("+".join(names), RECIPES)
    except UserError as err:
        named = [p for p in parts if f" {p} " in f" {str(err).replace(':', ' ')} "]
        assert len(named) >= 2, str(err)
        return
    assert recipe.name == "+".join(parts)
    assert set(recipe.backends) == {b for p in parts for b in RECIPES[p].backends}
    assert set(recipe.targets) == {x for p in parts for x in RECIPES[p].targets}
    assert all(dict(recipe.defines)[k] == v for p in parts for k, v in RECIPES[p].defines)
