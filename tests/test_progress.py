import itertools

from buildmgr.core.progress import NinjaCounter, parse_ninja_status


def test_parse_status_lines():
    assert parse_ninja_status("[12/194] Building CXX object src/llama.cpp.o") == (
        12,
        194,
        "Building CXX object src/llama.cpp.o",
    )
    assert parse_ninja_status("FAILED: x.o") is None
    assert parse_ninja_status("  [1/2] indented is not ninja") is None


def test_nested_external_project_counters_never_move_the_bar_back():
    counter = NinjaCounter()
    lines = [
        "[1/120] Creating directories for 'vulkan-shaders-gen'",
        "[2/120] Performing configure step for 'vulkan-shaders-gen'",
        "[1/3] Building CXX object vulkan-shaders-gen.cpp.o",  # nested ninja
        "[3/3] Linking CXX executable vulkan-shaders-gen",
        "[3/120] Performing build step for 'vulkan-shaders-gen'",
        "warning: something",
        "[40/120] Building CXX object ggml-vulkan.cpp.o",
        "[2/3] late nested line",
    ]
    seen = []
    for line in lines:
        counter.feed(line)
        seen.append((counter.done, counter.total))
    assert seen == [(1, 120), (2, 120), (2, 120), (2, 120), (3, 120), (3, 120), (40, 120), (40, 120)]
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))


def test_a_growing_outer_total_is_followed():
    counter = NinjaCounter()
    counter.feed("[5/10] a")
    counter.feed("[6/12] b")  # ninja re-plans after a restat
    assert (counter.done, counter.total) == (6, 12)
