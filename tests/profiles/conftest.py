"""Fixtures for profile tests: an isolated working folder and team profile files."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # resolve() reads ./profiles when no profiles_dir is given; the repository's example profiles must
    # not leak into (or shadow) the standard ones under test.
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture
def team_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    return folder


@pytest.fixture
def write(team_dir: Path) -> Callable[[str, str], Path]:
    """Write `<team_dir>/<file>` from dedented YAML text and return its path."""

    def _write(file: str, text: str) -> Path:
        path = team_dir / file
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    return _write
