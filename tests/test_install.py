"""sagellm installed with pip (not editable) into a fresh virtualenv runs `sagellm bench` from an empty folder.

Outside a checkout it takes the CDK CLI from PATH (as `npm install -g aws-cdk@…` puts it there), else fetches the
pinned one into the user cache, with no Node.js on PATH; offline with nothing cached it says how to get it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_helpers import REPO, bench_args, results_of
from sagellm.aws.cdk_cli import CDK_CLI_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]
# What `pip install` may build from: the project as committed (no virtualenv, no node_modules, no caches).
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__", "*.egg-info", "build",
                                    ".*_cache", "sagellm-results", "cdk.out")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The `sagellm` script of a fresh virtualenv with the project pip-installed from a copy of the source
    (building in the checkout would write build/ and *.egg-info into it); dependencies come from pip's cache.
    --no-compile: what runs is compiled as it is imported; byte-compiling every installed module up front was
    over half of the install's CPU (101 s with, 41 s without, here)."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                           str(source)], capture_output=True, text=True, timeout=2000, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(source)  # the installed copy must stand on its own
    yield venv / "bin" / "sagellm"


def clean_env(path: list[Path]) -> dict[str, str]:
    """The environment of a shell that has never seen the checkout or its virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return env | {"PATH": os.pathsep.join([*map(str, path), "/usr/local/bin", "/usr/bin", "/bin"])}


def test_the_installed_package_is_not_the_checkout(installed: Path) -> None:
    python = installed.parent / "python"
    where = subprocess.run([str(python), "-c", "import sagellm; print(sagellm.__file__)"], capture_output=True,
                           text=True, check=True, cwd=installed.parent, env=clean_env([])).stdout.strip()

    assert Path(where).is_relative_to(installed.parent.parent)


def test_from_an_empty_folder_it_benches_with_the_cdk_on_path(installed: Path, tmp_path: Path) -> None:
    global_cdk = REPO / "node_modules" / ".bin"  # stands in for `npm install -g aws-cdk@<pinned>`

    done = subprocess.run([str(installed), *bench_args(Path("out"))], cwd=tmp_path, env=clean_env([global_cdk]),
                          capture_output=True, text=True, timeout=1200, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    results = results_of(tmp_path / "out")
    assert results["teardown"]["status"] == "destroyed"
    assert [lv["concurrency"] for lv in results["levels"]] == [1, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    log = (tmp_path / "out" / "cdk" / "cdk-deploy.log").read_text().splitlines()[0]
    assert f"--app '{installed.parent}/python" in log and " -m sagellm.cdk_app'" in log  # its own app


def test_offline_without_a_cdk_cli_it_says_in_one_line_how_to_get_it_and_deploys_nothing(
        installed: Path, tmp_path: Path) -> None:
    env = clean_env([]) | {"XDG_CACHE_HOME": str(tmp_path / "cache"), "npm_config_cache": str(tmp_path / "npm"),
                           "npm_config_registry": "http://127.0.0.1:9/", "npm_config_fetch_retries": "0"}

    done = subprocess.run([str(installed), *bench_args(Path("out"))], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)

    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sagellm: error: could not fetch the AWS CDK CLI {CDK_CLI_VERSION} ")
    assert last.endswith(f"install it with `npm install -g aws-cdk@{CDK_CLI_VERSION}` (or point SAGELLM_CDK_CLI "
                         f"at a cdk 2.x ≥ {CDK_CLI_VERSION})")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "results.json").exists()


def test_with_no_node_on_path_it_fetches_the_cli_benches_then_inits_an_app_that_synthesizes(
        installed: Path, tmp_path: Path) -> None:
    bench_dir, cache = tmp_path / "bench", tmp_path / "cache"
    bench_dir.mkdir()
    # Only the virtualenv on PATH (as when it is active): no node, npm or cdk; the CLI's shell is /bin/sh.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")} | {
        "PATH": str(installed.parent), "XDG_CACHE_HOME": str(cache), "npm_config_cache": str(tmp_path / "npm")}

    done = subprocess.run([str(installed), *bench_args(Path("out"))], cwd=bench_dir, env=env,
                          capture_output=True, text=True, timeout=1200, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    assert f"sagellm: fetching the AWS CDK CLI {CDK_CLI_VERSION} into {cache / 'sagellm'}" in done.stderr
    assert results_of(bench_dir / "out")["teardown"]["status"] == "destroyed"

    init = subprocess.run([str(installed), "init", "app"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert init.returncode == 0, init.stderr
    synth = subprocess.run([str(installed), "cdk", "synth", "--quiet", "-c", "profile=max-throughput",
                            "-c", "model=tiiuae/falcon-7b"], cwd=tmp_path / "app",
                           env=env | {"CDK_HOME": str(tmp_path / "cdk-home"), "CDK_DISABLE_CLI_TELEMETRY": "1"},
                           capture_output=True, text=True, timeout=600, check=False)
    assert synth.returncode == 0, synth.stderr[-3000:]
    assert (tmp_path / "app" / "cdk.out" / "sagellm-max-throughput-falcon-7b.template.json").is_file()
    assert "fetching" not in synth.stderr  # the cached CLI
