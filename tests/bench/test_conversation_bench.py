"""A 3-turn conversation workload through `sagellm bench` on the local target (moto and the emulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_helpers import INSTANCE, MODEL, bench_args, request_lines, results_of, sagellm


@pytest.mark.integration
def test_a_three_turn_conversation_workload_runs_on_the_local_target(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("conversations") / "out"
    ran = sagellm(*bench_args(out, "--turns", "3", "--think-time", "0.5", "--input-tokens", "64", "--api", "chat",
                              "--json", concurrency="2", requests="6"), timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = results_of(out)
    assert (results["run"]["workload"]["turns"], results["run"]["workload"]["think_time_s"]) == ("3", "0.5")
    lines = request_lines(out)
    assert len(lines) == 6 and all(line["ok"] for line in lines)
    # Each conversation's turns in order, each re-sending the history: the emulator counts 64 new tokens a turn
    # plus the 32-token replies received.
    turns = {(line["conversation"], line["turn"]): line for line in lines}
    assert {t for _, t in turns} == {1, 2, 3}
    for (conversation, turn), line in turns.items():
        assert line["input_tokens_by"] == "server"
        assert line["input_tokens"] == 64 * turn + 32 * (turn - 1)
        if turn > 1:
            before = turns[(conversation, turn - 1)]
            assert line["start_s"] >= before["start_s"] + before["e2e_s"] + 0.5  # after the reply and the think time
    by_turn = results["levels"][0]["by_turn"]
    assert [t["turn"] for t in by_turn] == [1, 2, 3]
    assert [t["request_input_tokens"]["mean"] for t in by_turn] == [64, 160, 256]
    assert all(t["ttft_ms"]["p50"] > 0 for t in by_turn)
    assert "TTFT by turn" in (out / "report.md").read_text()
    # Predicted as conversations (planner.sessions) on the emulator's own engine: the same figures, within noise.
    level = results["levels"][0]
    assert 0.5 < level["latency_ms_per_token"]["p50"] / level["predicted"]["ms_per_token"] < 2


@pytest.mark.parametrize(("flags", "message"), [
    (["--turns", "3", "--workers", "2"], ("--turns: conversations run in one process (each holds its history); leave "
                                          "--workers and --ray out")),
    (["--turns", "3", "--ramp"], "--turns: not with a ramp: conversations run as levels of concurrency or request rate"),
    (["--turns", "0", "--concurrency", "1"], ("--turns: '0' is not a number of turns (use 3 (fixed), 3:1 (mean:stddev) "
                                              "or 2-6 (min-max), each at least 1)")),
    (["--turns", "2", "--think-time", "-1", "--concurrency", "1"], ("--think-time: '-1' is not a time in seconds (use "
                                                                    "2 (fixed seconds), 2:0.5 (mean:stddev) or 1-3 "
                                                                    "(min-max))")),
    (["--think-time", "2", "--concurrency", "1"], ("--think-time: only with --turns (the pause between a "
                                                   "conversation's turns)")),
])
@pytest.mark.slow
def test_bad_conversation_flags_are_one_line_before_anything_is_made(tmp_path: Path, flags: list[str],
                                                                     message: str) -> None:
    out = tmp_path / "out"
    ran = sagellm("bench", "--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE, *flags,
                  "--out", str(out), cwd=tmp_path)
    assert (ran.returncode, ran.stderr.splitlines(), ran.stdout) == (2, [f"sagellm: error: {message}"], "")
    assert not out.exists()
