"""`sagellm init`: write a ready CDK app into a folder, like `cdk init`.

The files are package data (`template/`); `$version` in them becomes this sagellm's version. Existing files
are never overwritten unless asked to.
"""

from __future__ import annotations

import os
import shutil
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
    some already exist and `force` is not set, when something is in the way or links outside the folder, or
    when the folder cannot be written."""
    files = template_files()
    texts = {name: Template(template.read_text(encoding="utf-8")).safe_substitute(version=__version__)
             for name, template in files.items()}
    try:
        _raise_if_in_the_way(folder, files)
        existing = [name for name in files if (folder / name).exists()]
        if existing and not force:
            raise InputError(f"init: {folder} already has {', '.join(existing)}; pick an empty folder, or pass "
                             "--force to overwrite them")
        return _write_all(folder, texts)
    except OSError as exc:  # a folder that cannot be read or written
        where = Path(exc.filename).parent if exc.filename else folder  # the folder, not a staged file's name
        raise InputError(f"init: cannot write into {where}: {exc.strerror or exc}; pick a folder you can write to "
                         "(nothing was written)") from None


def _raise_if_in_the_way(folder: Path, files: dict[str, Traversable]) -> None:
    """InputError when the folder is a file, or a path inside it that the app needs is a symbolic link (writing
    through it could reach outside the folder), a file where a folder goes, or a folder where a file goes."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"init: {folder} is a file, not a folder; pick a folder (it is created if missing)")
    for name in files:
        parts = Path(name).parts
        for depth in range(1, len(parts) + 1):
            path = folder.joinpath(*parts[:depth])
            is_file = depth == len(parts)
            if path.is_symlink():
                raise InputError(f"init: {path} is a symbolic link (to {os.readlink(path)}); init writes only inside "
                                 f"{folder}: remove the link, or pick another folder")
            if path.exists() and path.is_dir() == is_file:
                kind = "a folder" if is_file else "a file"
                raise InputError(f"init: {path} is {kind} in the way of the app's {name}; move it, or pick another "
                                 "folder")


def _write_all(folder: Path, texts: dict[str, str]) -> list[Path]:
    """Each text into a hidden file beside its place, then renamed into place: a failure part-way removes what
    this call made (its folders and staged files), so nothing is left half-written."""
    made: list[Path] = []  # folders this call created, parents first
    staged: dict[Path, Path] = {}
    try:
        for name, text in texts.items():
            path = folder / name
            for parent in reversed([path.parent, *path.parent.parents]):
                if not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            staging = path.with_name(f".{path.name}.sagellm-init")
            staged[path] = staging
            staging.write_text(text, encoding="utf-8")
        for path, staging in staged.items():
            os.replace(staging, path)
    except BaseException:
        for staging in staged.values():
            staging.unlink(missing_ok=True)
        for created in reversed(made):
            shutil.rmtree(created, ignore_errors=True)
        raise
    return list(staged)
