"""A command's temporary files live in one folder it owns, gone when it ends however it ends; a folder a
killed run left is removed by the next command. TMPDIR points at a folder each test owns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_helpers import (
    bench_args,
    emulator_children_of,
    request_lines,
    sagellm,
    spawn,
    synthesizing,
    wait_for,
)
from sagellm.aws.node import bundled_node
from sagellm.scratch import PREFIX, run_scratch


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR is a fresh folder of this test's, for this process and its children."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    return folder


@pytest.mark.slow
def test_a_command_and_its_children_make_temporary_files_in_its_folder_removed_at_the_end(tmpdir_env: Path) -> None:
    with run_scratch() as folder:
        assert folder.parent == tmpdir_env and folder.name.startswith(f"{PREFIX}{os.getpid()}-")
        made = Path(tempfile.mkdtemp(prefix="sagellm-emulator-"))
        python = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp(prefix='tmp'))"],
                                capture_output=True, text=True, check=True).stdout.strip()
        node = bundled_node() or "node"  # the CDK CLI's runtime (and jsii's): os.tmpdir() reads TMPDIR
        node_tmp = subprocess.run([node, "-e", "console.log(require('os').tmpdir())"],
                                  capture_output=True, text=True, check=True).stdout.strip()
        assert made.parent == folder and Path(python).parent == folder and Path(node_tmp) == folder
    assert list(tmpdir_env.iterdir()) == []
    assert os.environ["TMPDIR"] == str(tmpdir_env) and tempfile.gettempdir() == str(tmpdir_env)


def test_the_folder_goes_when_the_command_fails(tmpdir_env: Path) -> None:
    with pytest.raises(KeyboardInterrupt), run_scratch() as folder:
        (folder / "half-written").write_text("x")
        raise KeyboardInterrupt
    assert list(tmpdir_env.iterdir()) == []


@pytest.fixture
def owners(tmpdir_env: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Processes that each hold a scratch folder until killed; the test's own, killed by id at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def own_a_folder(owners: list[subprocess.Popen[str]]) -> tuple[subprocess.Popen[str], Path]:
    code = ("import time\nfrom sagellm.scratch import run_scratch\nwith run_scratch() as f:\n"
            "    (f / 'sagellm-emulator-x').mkdir()\n    print(f, flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    owners.append(proc)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


@pytest.mark.slow
def test_a_killed_runs_folder_is_removed_at_the_next_start_and_a_running_ones_kept(
        tmpdir_env: Path, owners: list[subprocess.Popen[str]]) -> None:
    killed, killed_folder = own_a_folder(owners)
    _, running_folder = own_a_folder(owners)
    killed.send_signal(signal.SIGKILL)  # no chance to clean up
    killed.wait()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    # Killed between making its folder and locking it: told by its process id alone.
    never_locked = tmpdir_env / f"{PREFIX}{gone.pid}-x"
    being_made = tmpdir_env / f"{PREFIX}{os.getpid()}-y"  # a live process about to lock it
    never_locked.mkdir()
    being_made.mkdir()
    assert killed_folder.is_dir()

    with run_scratch():
        pass

    assert sorted(tmpdir_env.iterdir()) == sorted([running_folder, being_made])
    assert (running_folder / "sagellm-emulator-x").is_dir()


# ------------------------------------------------------------------------------------- a real bench

@pytest.mark.integration
def test_sigterm_during_synth_leaves_no_temporary_files(tmpdir_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    proc = spawn(*bench_args(out), env=dict(os.environ), cwd=tmp_path)
    try:
        wait_for(lambda: synthesizing(out) or proc.poll() is not None, 300, "the bench to synthesize its app")
        assert proc.poll() is None
        time.sleep(1)  # the app is under way: jsii has unpacked its kernel
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, time.monotonic() - started
    assert list(tmpdir_env.iterdir()) == []


@pytest.mark.integration
def test_a_bench_killed_outright_leaves_a_folder_the_next_command_removes(tmpdir_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = spawn(*bench_args(out, concurrency="1", requests="200"), env=dict(os.environ), cwd=tmp_path)
    try:
        wait_for(lambda: bool(request_lines(out)) or proc.poll() is not None, 300, "the sweep to start")
        assert proc.poll() is None
    finally:
        proc.kill()  # SIGKILL: no teardown, no cleanup
        proc.communicate()
    wait_for(lambda: not emulator_children_of(proc.pid), 30, "the emulator child to notice its parent is gone")
    [left] = tmpdir_env.iterdir()
    assert left.name.startswith(f"{PREFIX}{proc.pid}-")
    assert any(left.iterdir())  # what the run and its CDK CLI wrote

    ran = sagellm("--help", env=dict(os.environ), cwd=tmp_path)

    assert ran.returncode == 0, ran.stderr
    assert list(tmpdir_env.iterdir()) == []
