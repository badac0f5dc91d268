"""Recipes (one TOML file each) and their composition with '+'. Pure apart from loading."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from buildmgr.core.errors import UserError

# Shape every build the same way: only what users run, optimised, relocatable.
BASE_DEFINES: dict[str, str] = {
    "CMAKE_BUILD_TYPE": "Release",
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_BUILD_SERVER": "ON",  # llama-cli is built on the server code
    "GGML_CCACHE": "OFF",  # buildmgr sets the compiler launchers itself
}

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_KEYS = {"description", "backends", "targets", "tools", "defines", "conflicts"}


@dataclass(frozen=True)
class Conflict:
    other: str
    reason: str
    unless: tuple[tuple[str, str], ...] = ()  # defines under which the combination is fine


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    backends: tuple[str, ...]
    targets: tuple[str, ...]
    tools: tuple[str, ...] = ()
    defines: tuple[tuple[str, str], ...] = ()
    conflicts: tuple[Conflict, ...] = field(default=(), compare=False)
    source_file: str = field(default="", compare=False)

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.name.split("+"))

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "backends": list(self.backends),
            "targets": list(self.targets),
            "tools": list(self.tools),
            "defines": dict(self.defines),
        }


def _strings(value: object, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def _define_value(value: object, key: str, where: str) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if isinstance(value, (str, int)):
        return str(value)
    raise UserError(f"{where}: define {key} must be a string, number or boolean")


def parse_recipe(name: str, text: str, where: str) -> Recipe:
    """One recipe from its TOML text; every problem is a one-line UserError naming `where`."""
    if not _NAME.match(name):
        raise UserError(f"{where}: recipe name {name!r} must be lower-case letters, digits, '-' or '_'")
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{where}: invalid TOML: {err}") from None
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_KEYS))}")
    for required in ("backends", "targets"):
        if required not in table:
            raise UserError(f"{where}: missing '{required}'")
    defines = table.get("defines", {})
    conflicts = table.get("conflicts", {})
    if not isinstance(defines, dict) or not isinstance(conflicts, dict):
        raise UserError(f"{where}: 'defines' and 'conflicts' must be tables")
    parsed_conflicts = []
    for other, rule in conflicts.items():
        if isinstance(rule, str):
            rule = {"reason": rule}
        if not isinstance(rule, dict) or not isinstance(rule.get("reason"), str):
            raise UserError(f"{where}: conflicts.{other} needs a 'reason' string")
        unless = rule.get("unless", {})
        if not isinstance(unless, dict):
            raise UserError(
                f'{where}: conflicts.{other}.unless must be a table of defines, e.g. {{ GGML_BACKEND_DL = "ON" }}'
            )
        parsed_conflicts.append(
            Conflict(other, rule["reason"], tuple((k, _define_value(v, k, where)) for k, v in unless.items()))
        )
    backends = _strings(table["backends"], "backends", where)
    targets = _strings(table["targets"], "targets", where)
    if not backends or not targets:
        raise UserError(f"{where}: 'backends' and 'targets' must each name at least one")
    from buildmgr.backends import known_backends

    unknown_backends = [b for b in backends if b not in known_backends()]
    if unknown_backends:
        raise UserError(
            f"{where}: unknown backend(s) {', '.join(unknown_backends)}; known: {', '.join(known_backends())}"
        )
    return Recipe(
        name=name,
        description=str(table.get("description", "")),
        backends=backends,
        targets=targets,
        tools=_strings(table.get("tools", []), "tools", where),
        defines=tuple(sorted((k, _define_value(v, k, where)) for k, v in defines.items())),
        conflicts=tuple(parsed_conflicts),
        source_file=where,
    )


def load_recipes(*directories: Path, broken: dict[str, UserError] | None = None) -> dict[str, Recipe]:
    """All recipes; a later directory overrides an earlier one (user recipes over shipped ones).

    With `broken`, a recipe that cannot be read or parsed is put there (by name) instead of failing everything.
    """
    recipes: dict[str, Recipe] = {}
    for directory in directories:
        for path in sorted(directory.glob("*.toml")) if directory.is_dir() else ():
            try:
                try:
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as err:
                    raise UserError(f"{path}: cannot read recipe ({err})") from None
                recipes[path.stem] = parse_recipe(path.stem, text, str(path))
            except UserError as err:
                if broken is None:
                    raise
                broken[path.stem] = err
                recipes.pop(path.stem, None)
    return recipes


def _union(groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for group in groups for item in group))


def compose(expression: str, known: dict[str, Recipe]) -> Recipe:
    """'cuda+vulkan' → one recipe: the union of the parts, or a UserError saying why not."""
    names = [part.strip() for part in expression.split("+")]
    if not expression or any(not n for n in names):
        raise UserError(f"recipe {expression!r} is empty or has an empty part; e.g. 'cpu' or 'cuda+vulkan'")
    for name in names:
        if name not in known:
            raise UserError(f"unknown recipe {name!r}; known recipes: {', '.join(sorted(known))}")
    parts = [known[n] for n in sorted(set(names))]
    if len(parts) == 1:
        return parts[0]
    # Conflicts first: their reasons explain more than the define clash they usually cause.
    every_define = {k: v for p in parts for k, v in p.defines}
    chosen = {p.name for p in parts}
    for part in parts:
        for conflict in part.conflicts:
            excused = conflict.unless and all(every_define.get(k) == v for k, v in conflict.unless)
            if conflict.other in chosen and not excused:
                raise UserError(f"cannot combine {part.name} and {conflict.other}: {conflict.reason}")
    from buildmgr.backends import own_build_conflict

    own = own_build_conflict([(p.name, p.backends) for p in parts], every_define)
    if own is not None:
        raise UserError(own)
    defines: dict[str, str] = {}
    owner: dict[str, str] = {}
    for part in parts:
        for key, value in part.defines:
            if key in defines and defines[key] != value:
                raise UserError(f"recipes {owner[key]} and {part.name} disagree on {key} ({defines[key]} vs {value})")
            defines[key], owner[key] = value, part.name
    return Recipe(
        name="+".join(p.name for p in parts),
        description=" + ".join(p.description for p in parts),
        backends=_union([p.backends for p in parts]),
        targets=_union([p.targets for p in parts]),
        tools=_union([p.tools for p in parts]),
        defines=tuple(sorted(defines.items())),
    )


_DEFINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)=(.*)$")


def parse_defines(items: tuple[str, ...]) -> dict[str, str]:
    """`-D KEY=VALUE` arguments → a dict; a malformed one is a UserError."""
    defines = {}
    for item in items:
        match = _DEFINE.match(item)
        if not match:
            raise UserError(f"--define {item!r}: expected KEY=VALUE, e.g. -D GGML_NATIVE=OFF")
        defines[match.group(1)] = match.group(2)
    return defines


def with_defines(recipe: Recipe, extra: dict[str, str]) -> Recipe:
    """The recipe plus the user's own -D defines, which win over the recipe's."""
    if not extra:
        return recipe
    return replace(recipe, defines=tuple(sorted({**dict(recipe.defines), **extra}.items())))
