"""One name per thing: no class name is defined twice in src/, and no module-level alias (a type alias, a CLI
option's Annotated type) takes the name of a class defined elsewhere, where a reader would take it for that class."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# Left on purpose, each until the reason beside it is gone; the test fails once one is no longer a duplicate.
DEFERRED = {
    # Each module's own frozen, extra="forbid" base: ruff's RUF012 knows a pydantic model only where the module
    # subclasses BaseModel itself (https://github.com/astral-sh/ruff/issues/5639: direct inheritance only), so
    # one shared base imported from elsewhere flags every list default of the 34 models as a mutable class default.
    "_Strict": "profiles/schema.py, results/schema.py, results/gate.py",
    # recommend.slo's class and planner/simulate.py's alias: simulate.py is being changed (prefix caching); after
    # the merge the alias is renamed.
    "Load": "planner/simulate.py's alias of the simulated load shapes",
}


def _names(path: Path) -> tuple[list[str], list[str]]:
    """The classes a module defines (nested ones too) and the capitalised names it assigns at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    aliases = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []  # (3.12's `type X = …` is not used: 3.11 is supported)
        aliases += [t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()]
    return classes, aliases


def duplicates(src: Path = SRC) -> dict[str, list[str]]:
    """Each name defined as a class more than once, or as a class and an alias elsewhere → where (path, kind)."""
    classes: dict[str, list[str]] = defaultdict(list)
    aliases: dict[str, list[str]] = defaultdict(list)
    for path in sorted(src.rglob("*.py")):
        where = path.relative_to(src).as_posix()
        defined, assigned = _names(path)
        for name in defined:
            classes[name].append(f"{where} (class)")
        for name in assigned:
            aliases[name].append(f"{where} (alias)")
    return {name: places + aliases.get(name, []) for name, places in classes.items()
            if len(places) > 1 or name in aliases}


@cache
def _source() -> dict[str, list[str]]:
    """src/'s duplicates, scanned once for the tests below."""
    return duplicates()


def test_no_class_name_is_defined_twice_in_src() -> None:
    found = {name: places for name, places in _source().items() if name not in DEFERRED}
    assert not found, "one name per thing; rename one of each: " + "; ".join(
        f"{name}: {', '.join(places)}" for name, places in sorted(found.items()))


def test_every_deferred_name_is_still_a_duplicate() -> None:
    stale = sorted(set(DEFERRED) - set(_source()))
    assert not stale, f"remove from DEFERRED (no longer defined twice): {', '.join(stale)}"


def test_the_scan_finds_a_class_twice_and_an_alias_shadowing_one(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Endpoint:\n    pass\n\n\nclass Engine:\n    pass\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("from typing import Annotated\n\n\nclass Endpoint:\n    pass\n\n\n"
                                   "Engine = Annotated[str, 'the --engine option']\nLIMIT = 3\n", encoding="utf-8")
    assert duplicates(tmp_path) == {"Endpoint": ["a.py (class)", "b.py (class)"],
                                    "Engine": ["a.py (class)", "b.py (alias)"]}
