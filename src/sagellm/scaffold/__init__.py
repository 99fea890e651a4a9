"""`sagellm init`: write a ready CDK app into a folder, like `cdk init`.

The files are package data (`template/`); `$version` in them becomes this sagellm's version. Existing files
are never overwritten unless asked to.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from sagellm import __version__
from sagellm.errors import InputError

# Package data cannot hold a dotfile reliably (setuptools' globs skip them): stored without the dot.
_RENAMED = {"gitignore": ".gitignore"}


def template_files() -> dict[str, Traversable]:
    """The app's files: relative path in the new app → the template file."""
    files: dict[str, Traversable] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                if entry.name != "__pycache__":
                    walk(entry, f"{prefix}{entry.name}/")
            else:
                files[prefix + _RENAMED.get(entry.name, entry.name)] = entry

    walk(resources.files(__package__).joinpath("template"), "")
    return dict(sorted(files.items()))


def write_app(folder: Path, *, force: bool = False) -> list[Path]:
    """Write the app into `folder` (created if needed); the files written. InputError, writing nothing, when
    some already exist and `force` is not set."""
    files = template_files()
    existing = [name for name in files if (folder / name).exists()]
    if existing and not force:
        raise InputError(f"init: {folder} already has {', '.join(existing)}; pick an empty folder, or pass "
                         "--force to overwrite them")
    written = []
    for name, template in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template.read_text(encoding="utf-8")).safe_substitute(version=__version__),
                        encoding="utf-8")
        written.append(path)
    return written
