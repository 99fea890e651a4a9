"""A 3-turn conversation workload through `sagellm bench` on the local target (moto and the emulator)."""

from __future__ import annotations

import pytest

from bench_helpers import bench_args, request_lines, results_of, sagellm


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
