"""docs/layout.md matches the tree: every module under src/sagellm is in its module list, and every module the
page names exists. `python tests/test_layout.py` rewrites the list from the tree (the prose stays as written)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "layout.md"
MARK = "<!-- the module list: written by `python tests/test_layout.py` -->"
WIDTH = 110
# A placeholder in a path the page gives as a pattern (`engines/NAME.py`, `tests/X/test_y.py`), not a module.
PLACEHOLDER = re.compile(r"[A-Z]{2,}|(^|/)[A-Za-z](/|\.py$)|(^|/)test_y\.py$")
ROOTS = (ROOT / "src" / "sagellm", ROOT / "src", ROOT, ROOT / "tests")


def tree_modules(src: Path = ROOT / "src" / "sagellm") -> dict[str, list[str]]:
    """Package (`sagellm/bench/client/`) → its modules (without `.py`), as the tree holds them; a folder without
    `__init__.py` is package data (scaffold/template/: the app `sagellm init` writes), not modules."""
    packages: dict[str, list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        if any(not (folder / "__init__.py").is_file() for folder in (path.parent, *path.parent.parents)
               if folder.is_relative_to(src)):
            continue
        package = "sagellm/" + "".join(f"{part}/" for part in path.relative_to(src).parent.parts)
        packages.setdefault(package, []).append(path.stem)
    return packages


def render(packages: dict[str, list[str]]) -> str:
    """The module list as the page shows it: a package per line, its modules after it."""
    column = max(map(len, packages)) + 2
    lines = []
    for package, modules in packages.items():
        wrapped = textwrap.wrap(" ".join(modules), WIDTH - column) or [""]
        lines += [f"{package:<{column}}{wrapped[0]}", *(" " * column + more for more in wrapped[1:])]
    return "\n".join(lines)


def page_modules(text: str) -> dict[str, list[str]]:
    """The module list the page holds (the code block after MARK)."""
    block = text.split(MARK, 1)[1].split("```", 2)[1]
    packages: dict[str, list[str]] = {}
    package = ""
    for line in block.splitlines()[1:]:
        if line.strip() and not line.startswith(" "):
            package, _, line = line.partition(" ")
        if package:
            packages.setdefault(package, []).extend(line.split())
    return packages


def named_paths(text: str) -> list[str]:
    """The `.py` files the page's prose names (a path or a bare file name), placeholders left out."""
    head, tail = text.split(MARK, 1)
    prose = head + tail.split("```", 2)[2]  # the module list left out: it is checked against the tree
    return [p for p in dict.fromkeys(re.findall(r"[\w./]*\w\.py\b", prose)) if not PLACEHOLDER.search(p)]


def missing(path: str, basenames: set[str]) -> bool:
    """Whether a file the page names exists nowhere it could mean: a path under src/sagellm, src, the repository or
    tests, or a bare file name that some module of the package has."""
    if "/" not in path:
        return path not in basenames and not (ROOT / path).exists()
    return not any((root / path).is_file() for root in ROOTS)


def test_every_module_in_the_tree_is_in_the_list_and_no_other() -> None:
    tree, page = tree_modules(), page_modules(PAGE.read_text(encoding="utf-8"))
    listed = {f"{package}{module}" for package, modules in page.items() for module in modules}
    present = {f"{package}{module}" for package, modules in tree.items() for module in modules}
    assert not present - listed, f"docs/layout.md lacks {sorted(present - listed)}; run python tests/test_layout.py"
    assert not listed - present, f"docs/layout.md lists {sorted(listed - present)}, which do not exist"


def test_every_file_the_prose_names_exists() -> None:
    basenames = {path.name for folder in ("src", "scripts", "benchmarks", "docs") for path in (ROOT / folder).rglob("*.py")}
    gone = [path for path in named_paths(PAGE.read_text(encoding="utf-8")) if missing(path, basenames)]
    assert not gone, f"docs/layout.md names files that do not exist: {gone}"


def test_the_checks_see_a_module_left_out_and_a_file_that_is_not_there(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    for name in ("__init__.py", "bench/__init__.py", "bench/runner.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    tree = tree_modules(tmp_path)
    assert tree == {"sagellm/": ["__init__"], "sagellm/bench/": ["__init__", "runner"]}
    page = f"`cli/recommend.py`, `engines/NAME.py`, `tests/engines/test_NAME.py`\n{MARK}\n```\n{render(tree)}\n```\n`tests/X/test_y.py`"
    assert page_modules(page) == tree
    assert named_paths(page) == ["cli/recommend.py"]
    assert missing("cli/recommend.py", {"recommend.py"}) and not missing("cli/commands/recommend.py", set())


def write() -> None:
    """Rewrite the page's module list from the tree."""
    text = PAGE.read_text(encoding="utf-8")
    head, tail = text.split(MARK, 1)
    _, _, rest = tail.split("```", 2)
    PAGE.write_text(f"{head}{MARK}\n\n```\n{render(tree_modules())}\n```{rest}", encoding="utf-8")


if __name__ == "__main__":
    write()
    sys.exit(0)
