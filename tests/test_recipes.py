import json
from pathlib import Path

import pytest

from buildmgr.building.recipes import compose, load_recipes, parse_recipe
from buildmgr.core.config import resource_path
from buildmgr.core.errors import UserError

CUDA = """
backends = ["CPU", "CUDA"]
targets = ["llama-cli", "llama-bench"]
tools = ["nvcc"]
[defines]
GGML_CUDA = "ON"
[conflicts.hip]
reason = "CUDA and HIP cannot share one non-DL build"
unless = { GGML_BACKEND_DL = "ON" }
"""
HIP = """
backends = ["CPU", "ROCm"]
targets = ["llama-cli"]
[defines]
GGML_HIP = true
"""
VULKAN = """
backends = ["CPU", "Vulkan"]
targets = ["llama-cli", "llama-server"]
[defines]
GGML_VULKAN = "ON"
GGML_NATIVE = "OFF"
"""
DL = """
backends = ["CPU"]
targets = ["llama-cli"]
[defines]
GGML_BACKEND_DL = "ON"
"""


def known() -> dict:
    return {
        name: parse_recipe(name, text, f"{name}.toml")
        for name, text in {"cuda": CUDA, "hip": HIP, "vulkan": VULKAN, "dl": DL}.items()
    }


def test_shipped_recipes_parse_and_cpu_builds_only_user_tools():
    recipes = load_recipes(resource_path("recipes"))
    assert {"cpu", "cuda", "vulkan", "hip", "sycl", "metal", "rpc", "universal"} <= set(recipes)
    assert set(recipes["cpu"].targets) == {
        "llama-server",
        "llama-cli",
        "llama-bench",
        "llama-completion",
        "llama-fit-params",
    }


def test_composition_is_the_union_in_canonical_order():
    recipe = compose("vulkan+cuda", known())
    assert recipe.name == "cuda+vulkan"
    assert recipe.backends == ("CPU", "CUDA", "Vulkan")
    assert recipe.targets == ("llama-cli", "llama-bench", "llama-server")
    assert dict(recipe.defines) == {"GGML_CUDA": "ON", "GGML_VULKAN": "ON", "GGML_NATIVE": "OFF"}
    assert recipe.tools == ("nvcc",)
    assert compose("cuda+vulkan", known()) == recipe


def test_boolean_defines_become_on_off():
    assert dict(known()["hip"].defines) == {"GGML_HIP": "ON"}


def test_conflict_is_refused_with_its_reason():
    with pytest.raises(UserError, match="cannot combine cuda and hip: CUDA and HIP cannot share one non-DL build"):
        compose("cuda+hip", known())


def test_backends_that_each_need_a_build_of_their_own_conflict_without_a_line_in_any_recipe(tmp_path):
    """No shipped recipe declares the CUDA/HIP/SYCL conflicts: they come from the backends, so a user's own recipe
    with one of those backends is refused beside another just the same, and universal (GGML_BACKEND_DL) excuses it."""
    shipped = load_recipes(resource_path("recipes"))
    assert not [r.name for r in shipped.values() if {c.other for c in r.conflicts} & {"cuda", "hip", "sycl"}]
    mine = parse_recipe("mine", 'backends = ["CPU", "ROCm"]\ntargets = ["llama-cli"]', "mine.toml")
    recipes = shipped | {"mine": mine}
    for expression, first, second, titles in (
        ("cuda+hip", "cuda", "hip", "CUDA and HIP"),
        ("sycl+cuda", "cuda", "sycl", "CUDA and SYCL"),
        ("hip+sycl", "hip", "sycl", "HIP and SYCL"),
        ("cuda+mine", "cuda", "mine", "CUDA and HIP"),
    ):
        with pytest.raises(UserError, match=f"cannot combine {first} and {second}: {titles} cannot share one non-DL"):
            compose(expression, recipes)
    assert compose("cuda+hip+universal", recipes).backends == ("CPU", "CUDA", "ROCm")
    assert compose("hip+mine", recipes).backends == ("CPU", "ROCm")  # one backend twice is one build


def test_conflict_is_excused_under_its_unless_defines():
    assert compose("cuda+dl+hip", known()).backends == ("CPU", "CUDA", "ROCm")


def test_disagreeing_defines_are_refused():
    recipes = known() | {
        "native": parse_recipe("native", 'backends=["CPU"]\ntargets=["x"]\n[defines]\nGGML_NATIVE="ON"', "n")
    }
    with pytest.raises(UserError, match="disagree on GGML_NATIVE"):
        compose("vulkan+native", recipes)


def test_unknown_recipe_lists_known_ones():
    with pytest.raises(UserError, match="unknown recipe 'metal'; known recipes: cuda, dl, hip, vulkan"):
        compose("cuda+metal", known())


@pytest.mark.parametrize("expression", ["", "+", "cuda+", "cuda++vulkan"])
def test_empty_parts_are_refused(expression):
    with pytest.raises(UserError, match="empty"):
        compose(expression, known())


def test_malformed_toml_names_file_and_line():
    with pytest.raises(UserError, match=r"bad\.toml: invalid TOML: .*line 3"):
        parse_recipe("bad", 'backends = ["CPU"]\ntargets = ["x"]\ndefines = {\n', "bad.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('backends = ["CPU"]\ntargets = ["x"]\ntarget = 1', "unknown key"),
        ('targets = ["x"]', "missing 'backends'"),
        ('backends = "CPU"\ntargets = ["x"]', "'backends' must be a list"),
        ('backends = ["CPU"]\ntargets = ["x"]\n[defines]\nX = [1]', "define X must be"),
        ('backends = ["CPU"]\ntargets = ["x"]\n[conflicts]\nhip = 3', "conflicts.hip needs a 'reason'"),
    ],
)
def test_schema_errors(text, message):
    with pytest.raises(UserError, match=message):
        parse_recipe("r", text, "r.toml")


def test_user_recipes_override_shipped_ones(tmp_path: Path):
    (tmp_path / "cpu.toml").write_text('description = "mine"\nbackends = ["CPU"]\ntargets = ["llama-cli"]\n')
    recipes = load_recipes(resource_path("recipes"), tmp_path)
    assert recipes["cpu"].description == "mine"
    assert recipes["cpu"].source_file == str(tmp_path / "cpu.toml")


def test_a_recipe_whose_defines_remove_kernels_says_which_ops_then_run_on_the_cpu(tmp_path: Path):
    from conftest import buildmgr, make_env, user_recipe

    body = 'description = "fast"\nbackends = ["CPU", "CUDA"]\ntargets = ["llama-bench"]\n[defines]\nGGML_CUDA = "ON"\n'
    user_recipe(tmp_path, "cudafast", body + 'GGML_CUDA_FA = "OFF"\n')
    user_recipe(tmp_path, "cudafull", body)
    result = buildmgr(make_env(tmp_path), "recipes", "--json")
    rows = {r["name"]: r for r in json.loads(result.stdout)["recipes"]}
    assert rows["cudafast"]["removed_kernels"] == [
        "this build has no CUDA FlashAttention kernels (GGML_CUDA_FA=OFF): with -fa 1 its FLASH_ATTN_EXT runs on the CPU"
    ]
    assert rows["cudafull"]["removed_kernels"] == [] and rows["vulkan"]["removed_kernels"] == []
