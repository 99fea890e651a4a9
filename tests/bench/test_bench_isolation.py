"""A bench touches only its own things: it runs from any folder, never executes an app it finds there, writes
only where it is told (relative paths from the caller's folder), and two benches at once stay apart."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from bench_helpers import (
    REPO,
    bench_args,
    finish,
    processes_mentioning,
    results_of,
    sagellm,
    spawn,
    synthesizing,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
# What a run may change in the checkout: caches of the tools that run the tests.
SCRATCH = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
THEIR_APP = """
    from pathlib import Path

    Path({marker!r}).write_text("their app was executed")
"""
TEAM_PROFILE = "name: team-fast\nextends: max-throughput\ndescription: a team's own profile\n"
GATES = "rules:\n  - {metric: error_rate, where: 1, max: 0.05}\n"


def checkout_state() -> dict[str, float]:
    """Every file in the checkout (outside tool caches) with its modification time."""
    state = {}
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SCRATCH]
        for name in files:
            path = Path(root) / name
            state[str(path.relative_to(REPO))] = path.stat().st_mtime
    return state


def test_from_an_empty_folder_results_land_under_the_relative_out(tmp_path: Path) -> None:
    before = checkout_state()

    ran = sagellm(*bench_args(Path("relative/out")), cwd=tmp_path, timeout=600)

    assert ran.returncode == 0, ran.stderr[-3000:]
    out = tmp_path / "relative" / "out"
    assert results_of(out)["teardown"]["status"] == "destroyed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relative"]
    assert checkout_state() == before


def test_inside_another_cdk_app_that_app_is_never_executed(tmp_path: Path) -> None:
    theirs = tmp_path / "their-app"
    theirs.mkdir()
    marker = theirs / "EXECUTED"
    (theirs / "cdk.json").write_text('{"app": "python3 app.py"}')
    (theirs / "app.py").write_text(textwrap.dedent(THEIR_APP.format(marker=str(marker))))
    (theirs / "cdk.out").mkdir()
    (theirs / "cdk.out" / "manifest.json").write_text('{"version": "their assembly"}')
    (theirs / "profiles").mkdir()
    (theirs / "profiles" / "team-fast.yaml").write_text(TEAM_PROFILE)  # found as ./profiles, as documented
    (theirs / "gates.yaml").write_text(GATES)
    args = bench_args(Path("bench-out"), "--thresholds", "gates.yaml", profile="team-fast")
    before = checkout_state()

    ran = sagellm(*args, cwd=theirs, timeout=600)

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert not marker.exists(), "the bench executed the CDK app of the folder it ran in"
    results = results_of(theirs / "bench-out")
    assert results["run"]["profile"] == "team-fast"
    assert results["gate"]["passed"] is True
    assert (theirs / "cdk.out" / "manifest.json").read_text() == '{"version": "their assembly"}'
    assert sorted(p.name for p in theirs.iterdir()) == ["app.py", "bench-out", "cdk.json", "cdk.out",
                                                        "gates.yaml", "profiles"]
    assert checkout_state() == before


def test_ctrl_c_during_synth_while_another_bench_runs_leaves_both_clean(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    started = time.monotonic()
    a = spawn(*bench_args(first), cwd=tmp_path)
    b = spawn(*bench_args(second), cwd=tmp_path)
    try:
        wait_for(lambda: synthesizing(first) or a.poll() is not None, 300, "the first bench to synthesize its app")
        assert a.poll() is None
        a.send_signal(signal.SIGINT)
    finally:
        interrupted, other = finish(a, started, timeout=300), finish(b, started, timeout=600)

    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    assert "TEARDOWN FAILED" not in interrupted.stderr
    assert results_of(first)["teardown"]["status"] in ("not-applicable", "destroyed")
    assert other.returncode == 0, other.stderr[-3000:]
    assert results_of(second)["teardown"]["status"] == "destroyed"
    assert not processes_mentioning(str(first)) and not processes_mentioning(str(second))
