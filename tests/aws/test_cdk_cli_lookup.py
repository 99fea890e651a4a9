"""Which CDK CLI runs: the chosen one, the checkout's, a compatible one on PATH, else the pinned one fetched once
into the user cache with the bundled npm; offline with nothing cached is exit 2 with the fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sagellm.aws import cdk_cli_lookup
from sagellm.aws.cdk_cli_lookup import CDK_CLI_VERSION, cache_dir, fetch_cli, find_cli, own_python_first
from sagellm.aws.node import bundled_node
from sagellm.errors import InputError

REPO = Path(__file__).resolve().parents[2]
PINNED = REPO / "node_modules" / "aws-cdk" / "bin" / "cdk"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Where an installed sagellm's module lives: no package.json above it."""
    return tmp_path / "site-packages" / "sagellm" / "aws" / "cdk_cli_lookup.py"


def fake_cdk(folder: Path, version: str) -> Path:
    """A `cdk` wrapper script on a PATH folder that answers `--version` like the real one."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "cdk"
    script.write_text(f'#!/bin/sh\necho "{version} (build 1a2b3c4)"\n')
    script.chmod(0o755)
    return script


def cached_cli(cache_home: Path) -> Path:
    """A CLI as an earlier fetch leaves it in the cache under `cache_home`."""
    script = cache_home / "sagellm" / f"cdk-{CDK_CLI_VERSION}" / "node_modules" / "aws-cdk" / "bin" / "cdk"
    script.parent.mkdir(parents=True)
    script.write_text("// the CLI\n")
    return script


def no_fetch(*args: object, **kwargs: object) -> None:
    raise AssertionError("fetched although a CLI was found")


def test_the_variable_wins_over_the_checkout(tmp_path: Path) -> None:
    chosen = fake_cdk(tmp_path / "mine", "2.1000.0")  # any version: the user chose it

    assert find_cli(environ={"SAGELLM_CDK_CLI": str(chosen)}) == [str(chosen)]


@pytest.mark.slow
def test_a_chosen_npm_link_runs_with_the_wheels_node(tmp_path: Path) -> None:
    command = find_cli(environ={"SAGELLM_CDK_CLI": str(REPO / "node_modules" / ".bin" / "cdk")})

    assert command == [bundled_node(), str(PINNED)]


def test_a_chosen_cli_that_is_not_there_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with pytest.raises(InputError) as bad:
        find_cli(environ={"SAGELLM_CDK_CLI": str(tmp_path / "nope")})

    assert bad.value.exit_status == 2
    assert str(bad.value) == (f"SAGELLM_CDK_CLI (or --cdk-cli): {tmp_path / 'nope'}: not an executable file; "
                              "point it at a `cdk` (e.g. node_modules/.bin/cdk), or unset it to let sagellm find "
                              "or fetch one")


def test_from_the_checkout_it_runs_the_pinned_cli_before_any_on_path(tmp_path: Path) -> None:
    path = fake_cdk(tmp_path / "bin", CDK_CLI_VERSION).parent

    assert find_cli(path=str(path), environ={}) == [bundled_node(), str(PINNED)]


@pytest.mark.parametrize("version", [CDK_CLI_VERSION, "2.1200.0"])
def test_outside_a_checkout_a_cdk_on_path_of_the_pinned_major_and_not_older_runs(
        outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(cdk_cli_lookup, "fetch_cli", no_fetch)
    script = fake_cdk(tmp_path / "bin", version)

    assert find_cli(outside, path=str(script.parent), environ={}) == [str(script)]


def test_an_npm_linked_cdk_on_path_is_read_from_its_package_json_and_run_with_the_wheels_node(
        outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cdk_cli_lookup, "fetch_cli", no_fetch)

    command = find_cli(outside, path=str(REPO / "node_modules" / ".bin"), environ={})

    assert command == [bundled_node(), str(PINNED)]


@pytest.mark.parametrize("version", ["2.100.0", "2.1147.9", "3.0.0", "banana"])
def test_a_cdk_on_path_of_another_major_or_older_gives_way_to_the_cached_one(
        outside: Path, tmp_path: Path, version: str) -> None:
    script = fake_cdk(tmp_path / "bin", version)
    cached = cached_cli(tmp_path / "cache")

    command = find_cli(outside, path=str(script.parent), environ={"XDG_CACHE_HOME": str(tmp_path / "cache")})

    assert command == [bundled_node(), str(cached)]


def test_with_nothing_found_it_fetches_into_the_cache_saying_why(
        outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = fake_cdk(tmp_path / "bin", "2.100.0")
    calls: list[tuple[Path, str]] = []

    def fetch(target: Path, **kwargs: str) -> Path:
        calls.append((target, kwargs["why"]))
        return target / "cdk"

    monkeypatch.setattr(cdk_cli_lookup, "fetch_cli", fetch)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}

    assert find_cli(outside, path=str(script.parent), environ=env)[1] == str(cache_dir(env) / "cdk")
    assert calls == [(tmp_path / "cache" / "sagellm" / f"cdk-{CDK_CLI_VERSION}",
                      f"the `cdk` on PATH is 2.100.0; sagellm needs 2.x ≥ {CDK_CLI_VERSION}")]


def test_the_cache_honours_xdg_cache_home_and_ignores_a_relative_one(tmp_path: Path) -> None:
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "sagellm" / f"cdk-{CDK_CLI_VERSION}"
    assert cache_dir({"XDG_CACHE_HOME": "rel"}) == Path.home() / ".cache" / "sagellm" / f"cdk-{CDK_CLI_VERSION}"
    assert cache_dir({}) == Path.home() / ".cache" / "sagellm" / f"cdk-{CDK_CLI_VERSION}"


def test_a_run_that_loses_the_race_uses_the_winners_copy_and_leaves_no_staging_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "sagellm" / f"cdk-{CDK_CLI_VERSION}"

    def install_while_another_run_finishes(npm: list[str], prefix: Path, env: dict[str, str], say: object) -> None:
        for folder in (prefix, target):  # ours, and the other run's complete copy renamed into place
            (folder / "node_modules" / "aws-cdk" / "bin").mkdir(parents=True)
            (folder / "node_modules" / "aws-cdk" / "bin" / "cdk").write_text(f"// {folder.name}\n")

    monkeypatch.setattr(cdk_cli_lookup, "_npm_install", install_while_another_run_finishes)

    script = fetch_cli(target, say=lambda line: None)

    assert script.read_text() == f"// {target.name}\n"
    assert sorted(p.name for p in tmp_path.joinpath("sagellm").iterdir()) == [target.name]


def offline_env(tmp_path: Path) -> dict[str, str]:
    """An npm that cannot reach its registry (nothing listens on port 9) and has nothing in its own cache."""
    return {**os.environ, "npm_config_registry": "http://127.0.0.1:9/", "npm_config_cache": str(tmp_path / "npm"),
            "npm_config_fetch_retries": "0", "XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.mark.slow
def test_offline_with_nothing_cached_is_exit_2_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    env = offline_env(tmp_path)
    said: list[str] = []

    with pytest.raises(InputError) as offline:
        fetch_cli(cache_dir(env), environ=env, say=said.append)

    message = str(offline.value)
    assert offline.value.exit_status == 2 and "\n" not in message
    assert message.startswith(f"could not fetch the AWS CDK CLI {CDK_CLI_VERSION} (sagellm deploys through it; "
                              f"nothing is cached in {cache_dir(env)}): npm: ")
    assert "ECONNREFUSED" in message
    assert message.endswith(f"install it with `npm install -g aws-cdk@{CDK_CLI_VERSION}` (or point "
                            f"SAGELLM_CDK_CLI at a cdk 2.x ≥ {CDK_CLI_VERSION})")
    assert said[0].startswith(f"fetching the AWS CDK CLI {CDK_CLI_VERSION} into {cache_dir(env)} (once")
    assert list((tmp_path / "cache" / "sagellm").iterdir()) == []  # no half-installed CLI left behind


@pytest.mark.integration
def test_it_fetches_the_pinned_cli_from_the_npm_registry_once_even_when_two_runs_race(tmp_path: Path) -> None:
    # A fresh npm cache too: the fetch downloads, as on a new machine.
    env = {**os.environ, "npm_config_cache": str(tmp_path / "npm"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    said: list[str] = []
    found: list[Path] = []

    def fetch() -> None:
        found.append(fetch_cli(cache_dir(env), environ=env, say=said.append))

    started = time.monotonic()
    runs = [threading.Thread(target=fetch) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    elapsed = time.monotonic() - started

    script = cache_dir(env) / "node_modules" / "aws-cdk" / "bin" / "cdk"
    assert found == [script, script]
    assert sorted(p.name for p in (tmp_path / "cache" / "sagellm").iterdir()) == [f"cdk-{CDK_CLI_VERSION}"]
    version = subprocess.run([str(bundled_node()), str(script), "--version"], capture_output=True, text=True,
                             check=True, timeout=120, env={**env, "CDK_DISABLE_CLI_TELEMETRY": "1"})
    assert version.stdout.split()[0] == CDK_CLI_VERSION
    assert any(line.startswith("  npm http fetch GET 200 ") and "aws-cdk" in line for line in said), said
    assert len([line for line in said if re.fullmatch(rf"AWS CDK CLI {CDK_CLI_VERSION} ready in \d+ s", line)]) == 2
    print(f"two concurrent fresh fetches took {elapsed:.1f} s")  # the number the report quotes (pytest -s)

    before = len(said)
    assert fetch_cli(cache_dir(env), environ=env, say=said.append) == script
    assert len(said) == before  # cached: nothing fetched, nothing said


@pytest.mark.slow
def test_the_benchs_cdk_cli_option_is_the_first_place_looked(tmp_path: Path) -> None:
    sagellm = Path(sys.executable).with_name("sagellm")
    env = {k: v for k, v in os.environ.items() if k != "SAGELLM_CDK_CLI"}

    done = subprocess.run([str(sagellm), "bench", "--profile", "max-throughput", "--model", "tiiuae/falcon-7b",
                           "--cdk-cli", "nope/cdk", "--out", "out"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)

    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith(
        f"sagellm: error: SAGELLM_CDK_CLI (or --cdk-cli): {tmp_path / 'nope' / 'cdk'}: not an executable file")


@pytest.mark.slow
def test_a_chosen_program_that_prints_no_cdk_version_is_refused_through_the_cli_before_anything_runs(
        tmp_path: Path) -> None:
    sagellm = Path(sys.executable).with_name("sagellm")
    env = {k: v for k, v in os.environ.items() if k != "SAGELLM_CDK_CLI"}
    impostor = fake_cdk(tmp_path / "bin", "hello")  # an executable that answers, but not with a version

    done = subprocess.run([str(sagellm), "bench", "--profile", "max-throughput", "--model", "tiiuae/falcon-7b",
                           "--cdk-cli", str(impostor), "--out", "out"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)

    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"sagellm: error: SAGELLM_CDK_CLI (or --cdk-cli): {impostor}: not the AWS CDK CLI (`cdk --version` printed "
        "'hello' within 20 s); point it at a `cdk` (e.g. node_modules/.bin/cdk), or unset it to let sagellm find "
        "or fetch one")
    assert not (tmp_path / "out").exists()  # nothing made


def test_a_chosen_program_that_prints_nothing_is_not_the_cdk_cli(tmp_path: Path) -> None:
    silent = tmp_path / "cdk"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)

    with pytest.raises(InputError, match=r"^SAGELLM_CDK_CLI \(or --cdk-cli\): .*/cdk: not the AWS CDK CLI "
                                         r"\(`cdk --version` printed no version within 20 s\); point it at"):
        find_cli(environ={"SAGELLM_CDK_CLI": str(silent)})


def test_an_app_commands_python3_is_the_interpreter_running_sagellm(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}  # no virtualenv active: PATH's python3 (if any) is not this one

    own_python_first(env)
    done = subprocess.run(["python3", "-c", "import sys, sagellm; print(sys.prefix)"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == sys.prefix  # the virtualenv's, found through the shim
    assert env["PATH"].endswith(os.pathsep + "/usr/bin:/bin")
