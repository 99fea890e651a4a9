"""Refresh sagellm's image tables (src/sagellm/engines/data/*.json) from an installed SageMaker SDK.

    pip install sagemaker-core && python scripts/refresh_image_tables.py

Copies the inference tables of the frameworks sagellm's engines name (every engine in sagellm.engines.ENGINES and
NEURON_ENGINES) from the SDK's `sagemaker/core/image_uri_config/`, keeping only the fields sagellm.engines.images
reads. Run it where sagellm is importable (its environment, or with src/ on the path: it is put there).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sagellm.engines import ENGINES, NEURON_ENGINES  # the checkout's engines, not an installed copy

ENGINES_ALL = (*ENGINES.values(), *NEURON_ENGINES.values())
FRAMEWORKS = tuple(dict.fromkeys(engine.framework for engine in ENGINES_ALL))
TABLE_KEYS = ("processors", "version_aliases", "versions")
VERSION_KEYS = ("registries", "repository", "py_versions", "container_version", "tag_prefix", "sdk_versions")
# The SDK builds some frameworks' tags with an inference tool in the processor's place (Engine.inference_tool).
INFERENCE_TOOLS = {engine.framework: engine.inference_tool for engine in ENGINES_ALL if engine.inference_tool}
OUT = Path(__file__).resolve().parents[1] / "src" / "sagellm" / "engines" / "data"


def sdk_tables() -> Path:
    """The SDK's image_uri_config folder, found without importing the SDK."""
    spec = find_spec("sagemaker")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (folder := Path(root) / "core" / "image_uri_config").is_dir():
            return folder
    sys.exit("no SageMaker SDK installed: pip install sagemaker-core")


def slim(framework: str, folder: Path) -> dict:
    """The inference table of one framework, with only what sagellm reads."""
    data = json.loads((folder / f"{framework}.json").read_text())
    table = data.get("inference", data)
    out = {k: table[k] for k in TABLE_KEYS if k in table}
    out["versions"] = {v: {k: e[k] for k in VERSION_KEYS if k in e} for v, e in table["versions"].items()}
    if framework in INFERENCE_TOOLS:
        out["inference_tool"] = INFERENCE_TOOLS[framework]
    return out


def main() -> None:
    folder = sdk_tables()
    source = f"sagemaker-core {version('sagemaker-core')}, sagemaker/core/image_uri_config"
    for framework in FRAMEWORKS:
        table = {"source": source, **slim(framework, folder)}
        (OUT / f"{framework}.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"{framework}: {len(table['versions'])} versions from {source}")


if __name__ == "__main__":
    main()
