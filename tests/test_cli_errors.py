"""Every bad input: one line, exit 2, no traceback, nothing written."""

import json
import tarfile
from pathlib import Path

from conftest import assert_user_error, buildmgr, make_env, user_recipe

from buildmgr.cli import COMMANDS


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "config" not in p.parts)


def test_unknown_recipe_lists_known_ones(tmp_path: Path, tmp_env):
    from buildmgr.core.config import resource_path

    shipped = sorted(path.stem for path in resource_path("recipes").glob("*.toml"))
    assert {"cpu", "cuda", "vulkan"} <= set(shipped)
    assert_user_error(buildmgr(tmp_env, "build", "cuda+nope"), "unknown recipe", f"known recipes: {', '.join(shipped)}")
    assert written(tmp_path) == []


def test_malformed_user_recipe_names_file_and_line(tmp_path: Path, tmp_env):
    recipe = user_recipe(tmp_path, "mine", 'backends = ["CPU"]\ntargets = [\n"llama-cli"\ndefines = 3\n')
    result = buildmgr(tmp_env, "build", "mine")
    assert_user_error(result, str(recipe), "invalid TOML", "line 4")
    assert written(tmp_path) == []


def test_source_that_is_not_llama_cpp(tmp_path: Path, tmp_env):
    (tmp_path / "elsewhere").mkdir()
    assert_user_error(
        buildmgr(tmp_env, "build", "--source", str(tmp_path / "elsewhere")), "is not a llama.cpp source tree"
    )
    assert_user_error(
        buildmgr(tmp_env, "build", "--source", "nowhere"), "neither an existing directory nor a git URL@REF"
    )
    assert written(tmp_path) == []


def test_unwritable_data_dir(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    env = make_env(tmp_path, XDG_DATA_HOME=str(blocker / "data"))
    assert_user_error(buildmgr(env, "build"), "cannot write to", "XDG_DATA_HOME")
    assert written(tmp_path) == ["file"]


def test_sdist_with_wrong_checksum_is_refused_and_not_extracted(tmp_path: Path, tmp_env):
    fake = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(__file__, arcname="llama_cpp_python-0.3.36/vendor/llama.cpp/CMakeLists.txt")
    result = buildmgr(tmp_env, "source", "sync", "--archive", str(fake))
    assert_user_error(result, "does not match the lock's 832db069")
    assert written(tmp_path) == ["llama_cpp_python-0.3.36.tar.gz"]


def test_bad_arguments_are_one_line(tmp_env):
    assert_user_error(buildmgr(tmp_env, "build", "--jobs", "0"), "--jobs")
    assert_user_error(buildmgr(tmp_env, "frobnicate"), "invalid choice")
    assert_user_error(buildmgr(tmp_env, "source", "sync", "--archive", "/no/such.tar.gz"), "no such file")


def test_unknown_build_says_what_is_installed(tmp_env):
    assert_user_error(buildmgr(tmp_env, "which", "cpu"), "no installed build 'cpu'", "run 'buildmgr build' first")
    assert_user_error(buildmgr(tmp_env, "run", "cpu", "--", "llama-cli"), "no installed build")
    assert_user_error(buildmgr(tmp_env, "remove", "cpu-12345678"), "no installed build")


def test_a_tool_option_without_the_double_dash_says_where_it_goes(tmp_env, tmp_path):
    """`buildmgr run cpu llama-cli --version`: argparse reads --version as buildmgr's; the line names the fix."""
    for verb in ("run", "check"):
        result = buildmgr(tmp_env, verb, "cpu", "llama-cli", "--version")
        assert_user_error(result, "--version", f"buildmgr {verb} BUILD [options] -- TOOL ARGS")
    assert_user_error(
        buildmgr(tmp_env, "check", "cpu", "--verfy", "--", "llama-cli"), "unrecognized arguments: --verfy"
    )
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


def test_doctor_at_80_columns_folds_each_fix_under_its_check_whole(tmp_path: Path, tmp_env):
    """A table of checks wraps every long path and fix into columns no one can read or copy at 80 columns: each
    check is then its own line, with what was found and the fix under it, whole."""
    import json

    env = tmp_env | {"COLUMNS": "80"}
    result = buildmgr(env, "doctor")
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    checks = json.loads(buildmgr(tmp_env, "doctor", "--json").stdout)["checks"]
    failed = [c for c in checks if not c["ok"]]
    assert failed, "this host has a backend it cannot build (SYCL, Metal): its fix is what is checked"
    for check in failed:
        assert f"     fix: {check['fix']}" in lines, check  # on one line, as it is copied
        assert any(line.endswith(f"{check['backend']}: {check['what']}") for line in lines), check
    wide = buildmgr(env | {"COLUMNS": "1000"}, "doctor").stdout.splitlines()
    assert wide[0].split() == ["check", "ok", "found", "fix"]  # the table, where it fits


def test_piped_doctor_says_each_check_on_one_line_with_its_fix_and_no_padding(tmp_path: Path, tmp_env):
    """Issue #67: piped (no terminal, no COLUMNS), doctor's checks were a table padded to 40 columns; saved or
    grepped, a check is one line: yes/no, the check, what was found and the fix, with nothing padded."""
    import json

    env = {k: v for k, v in tmp_env.items() if k != "COLUMNS"}
    result = buildmgr(env, "doctor")
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    checks = json.loads(buildmgr(env, "doctor", "--json").stdout)["checks"]
    assert len(lines) == len(checks), lines
    for line, check in zip(lines, checks, strict=True):
        said = f"{'yes' if check['ok'] else 'no'} {check['backend']}: {check['what']}: {check['found']}"
        assert line == said + ("" if check["ok"] else f" (fix: {check['fix']})"), line
        assert "  " not in line.removeprefix("no "), line


def test_the_command_line_s_own_mistake_is_said_before_a_broken_config_file(tmp_path: Path, tmp_env):
    config = tmp_path / "config" / "buildmgr" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[cache\n")
    assert_user_error(buildmgr(tmp_env, "build", "nope"), "unknown recipe 'nope'")
    assert_user_error(buildmgr(tmp_env, "build", "-D", "GGML_CCACHE=ON"), "-D GGML_CCACHE is set by buildmgr")
    assert_user_error(buildmgr(tmp_env, "build"), "config.toml: not a valid TOML file")


def test_the_cpu_s_refusal_holds_for_a_recipe_that_does_not_list_the_cpu(tmp_path: Path, tmp_env):
    """ggml-cpu is in every build: GGML_NATIVE=ON with GGML_BACKEND_DL=ON is refused on x86 whatever the recipe lists."""
    import platform

    user_recipe(
        tmp_path,
        "mine",
        'backends = ["RPC"]\ntargets = ["llama-cli"]\n[defines]\nGGML_BACKEND_DL = "ON"\nGGML_NATIVE = "ON"\n',
    )
    result = buildmgr(tmp_env, "build", "mine")
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert_user_error(result, "GGML_NATIVE=ON cannot be combined with GGML_BACKEND_DL=ON on x86")
    assert not (tmp_path / "data").exists()


def test_a_shortened_option_is_offered_its_whole_name_and_a_context_too_small_gets_sizes_that_fit(tmp_env, tmp_path):
    """Issue #52: --reps got no did-you-mean for --repetitions; -p 512 -n 128 on a 256-token model gave no fix."""
    assert_user_error(buildmgr(tmp_env, "bench", "--reps", "3", "cpu"), "did you mean --repetitions?")
    assert_user_error(buildmgr(tmp_env, "build", "--rebuld"), "did you mean --rebuild?")
    from buildmgr.proof.models import write_tiny_model

    model = tmp_path / "tiny.gguf"
    write_tiny_model(model)  # a context of 256
    result = buildmgr(tmp_env, "bench", "-m", str(model), "cpu")
    assert_user_error(result, "-p 512 -n 128 do not fit the model's context of 256; try -p 128 -n 64 (with --depth 0)")


def test_cache_stats_gives_the_hit_rate_as_build_does(tmp_path: Path):
    """Issue #52: `cache stats` said hit_rate 0.663 where build says 66 %. One miss and one hit: 50 %."""
    import shutil
    import subprocess
    import sys

    env = make_env(tmp_path, CCACHE_DIR=str(tmp_path / "ccache"))
    (tmp_path / "x.c").write_text("int x(void) { return 1; }\n")
    ccache = str(Path(sys.executable).parent / "ccache")
    for _ in range(2):
        compiled = [ccache, shutil.which("cc") or "cc", "-c", str(tmp_path / "x.c"), "-o", str(tmp_path / "x.o")]
        subprocess.run(compiled, env=env, check=True, cwd=tmp_path)
    shown = buildmgr(env, "cache", "stats")
    assert shown.returncode == 0, shown.stderr
    assert "hit_rate       50 %" in shown.stdout.splitlines()
    assert json.loads(buildmgr(env, "cache", "stats", "--json").stdout)["hit_rate"] == 0.5  # scripts keep the fraction


def test_a_command_s_result_is_on_stdout_and_its_notes_on_stderr(tmp_env, tmp_path):
    """Issue #52: `key list`, `gc --dry-run`, `check` printed their results on stderr, so a pipe showed nothing."""
    made = buildmgr(tmp_env, "key", "generate", "ci")
    assert made.returncode == 0, made.stderr
    secret = Path(tmp_env["XDG_CONFIG_HOME"]) / "buildmgr" / "keys" / "ci.key"  # issue #52: a byte-level message
    assert_user_error(buildmgr(tmp_env, "key", "trust", str(secret)), "trust its public half, the .pub beside it")
    listed = buildmgr(tmp_env, "key", "list")
    [own] = [line for line in listed.stdout.splitlines() if line.startswith("own ")]
    assert " ci (" in own and own.endswith("ci.key)") and listed.stderr == ""
    tree = Path(tmp_env["XDG_CACHE_HOME"]) / "buildmgr" / "build-trees" / "cpu-44444444"
    tree.mkdir(parents=True)  # the tree of a build that is not installed: gc's to remove
    swept = buildmgr(tmp_env, "gc", "--dry-run")
    assert swept.returncode == 0 and swept.stdout.startswith(f"would remove {tree} (build tree of cpu-44444444")
    assert swept.stderr.startswith("gc: 1 item(s) would remove") and tree.is_dir()


def test_the_help_of_a_command_explains_it_and_shows_an_example(tmp_env):
    """Issue #52: install, list and gc --help showed only usage and options; key --help did not say where keys live;
    devices --help said --parse takes "a captured --list-devices output" though it reads any log and -. Every
    command's help fits 80 columns (its paragraph was filled to 100 whatever the terminal)."""
    narrow = tmp_env | {"COLUMNS": "80"}
    for name in COMMANDS:
        shown = buildmgr(narrow, name, "--help")
        assert shown.returncode == 0, shown.stderr
        paragraph = shown.stdout.split("\n\n")[1]
        assert len(paragraph.split()) > 25 and "\nexamples:\n  buildmgr " + name in shown.stdout, (name, paragraph)
        assert max(map(len, shown.stdout.splitlines())) <= 80, (name, shown.stdout)
    keys = " ".join(buildmgr(tmp_env, "key", "--help").stdout.split())
    assert "<config>/buildmgr/keys/" in keys and "<config>/buildmgr/trusted/" in keys  # where trust puts them
    parse = " ".join(buildmgr(tmp_env, "devices", "--help").stdout.split())
    assert "a pasted log or tool output" in parse and "- reads stdin" in parse


def test_a_json_command_prints_a_json_object_on_every_exit_with_the_error_in_it(tmp_env, tmp_path):
    """Issue #52: `install --from … --json` with a tampered blob printed nothing on stdout and exited 1."""
    for args in (
        ["bench", "--json", "-m", str(tmp_path / "none.gguf"), "cpu"],  # a user error
        ["which", "no-such-build", "--json"],
        ["check", "no-such-build", "--json", "--", "llama-cli"],
    ):
        failed = buildmgr(tmp_env, *args)
        told = json.loads(failed.stdout)
        assert failed.returncode == told["exit_code"] == 2 and told["error"], args
        assert failed.stderr.strip() == f"buildmgr: error: {told['error']}"  # the same one line on stderr
    ok = buildmgr(tmp_env, "list", "--json")
    assert "error" not in json.loads(ok.stdout)


def test_a_table_piped_has_no_padding_beyond_its_content_and_at_80_columns_no_value_is_split(tmp_env):
    """Issue #52: `recipes | cat` gave 484-character lines with ~300 spaces of padding; `COLUMNS=80 list` split
    timestamps mid-value."""
    piped = buildmgr(tmp_env, "recipes")
    rows = piped.stdout.splitlines()
    assert rows[0].split() == ["recipe", "backends", "buildable", "here", "description"]
    assert all("  " * 25 not in row and row == row.rstrip() for row in rows)  # aligned up to 40, never padded past
    narrow = buildmgr(tmp_env | {"COLUMNS": "80"}, "recipes")
    blocks = narrow.stdout.splitlines()
    described = [line for line in blocks if line.startswith("    description: ")]
    assert len(described) == len([r for r in rows[1:] if r]) and "cpu" in blocks  # one block per recipe, its name alone
    whole = next(r for r in rows if r.startswith("cpu ")).split("  ")[-1].strip()  # the cpu recipe's description
    assert f"    description: {whole}" in blocks  # on one line, not folded at 80 columns
