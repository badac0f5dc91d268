"""Settings declared once (config.Settings): each read the same way, the environment over `<config>/config.toml`,
each refused in one line naming its own key, each documented."""

from dataclasses import fields
from pathlib import Path

import pytest

from buildmgr.core.config import Dirs, Settings
from buildmgr.core.errors import UserError

SPEC = (Path(__file__).parent.parent / "docs" / "spec.md").read_text()


def dirs_with(tmp_path: Path, text: str | None) -> Dirs:
    dirs = Dirs(tmp_path / "data", tmp_path / "cache", tmp_path / "config")
    if text is not None:
        dirs.config.mkdir(parents=True)
        (dirs.config / "config.toml").write_text(text)
    return dirs


def test_each_setting_comes_from_the_file_and_its_variable_wins(tmp_path):
    assert Settings.load(dirs_with(tmp_path / "none", None), {}) == Settings(None, "bundled")
    dirs = dirs_with(tmp_path, '[cache]\nremote = "redis://a:1"\nccache = "system"\n')
    assert Settings.load(dirs, {}) == Settings("redis://a:1", "system")
    environ = {"BUILDMGR_REMOTE_CACHE": "http://b/", "BUILDMGR_CCACHE": "/opt/ccache"}
    assert Settings.load(dirs, environ) == Settings("http://b/", "/opt/ccache")
    assert Settings.load(dirs, {"BUILDMGR_REMOTE_CACHE": ""}).remote_cache is None  # empty: none


@pytest.mark.parametrize(
    ("text", "key"),
    [("[cache]\nremote = 6379\n", "[cache] remote"), ('[cache]\nccache = ""\n', "[cache] ccache")],
)
def test_a_setting_of_the_wrong_type_is_one_line_naming_its_key(tmp_path, text, key):
    with pytest.raises(UserError) as raised:
        Settings.load(dirs_with(tmp_path, text), {})
    assert f"config.toml: {key} must be a string, e.g. " in str(raised.value)


def test_every_setting_is_documented_with_its_variable_and_key():
    for item in fields(Settings):
        setting = item.metadata["setting"]
        assert setting.env in SPEC and f"[{setting.table}] {setting.key}" in SPEC, setting
