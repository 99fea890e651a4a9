"""A Hugging Face cache built from the real config.json files in hub_configs/, in the Hub's own layout."""

from __future__ import annotations

import shutil
from pathlib import Path

CONFIGS = Path(__file__).parent / "hub_configs"
COMMIT = "0" * 40  # a snapshot name; huggingface_hub resolves refs/main to it


def build_cache(root: Path, *names: str) -> Path:
    """`models--<owner>--<name>/{refs/main, snapshots/<commit>/config.json}` for each `owner__name` given."""
    for name in names:
        repo = root / f"models--{name.replace('__', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(COMMIT)
        snapshot = repo / "snapshots" / COMMIT
        snapshot.mkdir(parents=True)
        shutil.copy(CONFIGS / f"{name}.json", snapshot / "config.json")
    return root


def all_configs() -> list[str]:
    """Every config kept here, as `owner__name`."""
    return sorted(p.stem for p in CONFIGS.glob("*.json"))
