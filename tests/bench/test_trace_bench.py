"""`sagellm bench --trace`: the flags, and a Mooncake trace replayed on the local target end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import INSTANCE, MODEL, request_lines, results_of, sagellm
from sagellm.bench.client.trace import TraceOptions, load_trace

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
MOONCAKE = TRACES / "mooncake.jsonl"


def test_trace_flags_build_one_open_level_at_the_traces_mean_rate(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from sagellm import bench
    from sagellm.bench import runner
    from sagellm.cli.commands.bench import bench as bench_command

    class Built(Exception):
        """What `sagellm bench` would run, caught before it runs."""

    def built(spec: bench.Bench, *args: object) -> None:
        raise Built(spec)

    monkeypatch.setattr(runner, "run", built)
    with pytest.raises(Built) as caught:
        bench_command(profile="max-throughput", model=MODEL, instance=INSTANCE, trace=MOONCAKE, trace_speed="2,3",
                      trace_requests=20, out=tmp_path / "out")
    spec = caught.value.args[0]
    options = TraceOptions(MOONCAKE, 2, 20)
    assert spec.workload.trace == options
    rate = load_trace(options).rate  # at speed 2
    assert spec.load == bench.Open((rate, rate * 3 / 2), requests_per_level=20, warmup=0)
    assert spec.sweep.method == "doubling"


@pytest.mark.parametrize(("given", "message"), [
    ({"trace": MOONCAKE, "concurrency": "1,2"}, "--trace: replays the trace's own arrivals, a level per --trace-speed"),
    ({"trace": MOONCAKE, "input_tokens": "512"}, "--input-tokens: not with --trace"),
    ({"trace_speed": "2"}, "--trace-speed/--trace-requests/--trace-window: only with --trace"),
    ({"trace": MOONCAKE, "trace_speed": "0"}, "--trace-speed: '0': 0.0 is not a level; give speed factors > 0"),
    ({"trace": MOONCAKE, "trace_speed": "1,x"}, "--trace-speed: '1,x': 'x' is not a number"),
    ({"trace": MOONCAKE, "trace_window": "9-3"}, "--trace-window: '9-3' is not a window of the trace"),
    ({"trace": TRACES / "README.md"}, f"--trace: {TRACES / 'README.md'}:1: neither a Mooncake trace"),
])
def test_trace_flags_that_do_not_fit_are_refused_naming_the_flag(tmp_path: Path, given: dict[str, object],
                                                                 message: str) -> None:
    from sagellm.cli.commands.bench import bench as bench_command
    from sagellm.errors import InputError

    with pytest.raises(InputError) as bad:
        bench_command(profile="max-throughput", model=MODEL, instance=INSTANCE, out=tmp_path / "out",
                      **given)  # type: ignore[arg-type]
    assert [m for m in bad.value.messages if message in m], bad.value.messages
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_a_mooncake_trace_replays_on_the_local_target_with_its_arrivals_and_lengths(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ran = sagellm("bench", "--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE,
                  "--time-scale", "0.05", "--trace", str(MOONCAKE), "--trace-speed", "2,4", "--out", str(out))
    assert ran.returncode == 0, ran.stderr[-3000:]

    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    trace = load_trace(TraceOptions(MOONCAKE, speed=2))
    results = results_of(out)
    record = results["run"]["workload"]["trace"]
    assert (record["format"], record["rows"], record["speed"]) == ("mooncake", len(rows), 2)
    assert results["run"]["workload"]["prompts"] == "trace"
    # One level per speed, each named by the trace's mean rate at that speed, each replaying every request.
    assert [lv["request_rate"] for lv in results["levels"]] == pytest.approx([trace.rate, 2 * trace.rate])
    assert [lv["requests"] for lv in results["levels"]] == [len(rows), len(rows)]
    assert all(sum(lv["errors"].values()) == 0 for lv in results["levels"])

    lines = request_lines(out)
    for rate in (trace.rate, 2 * trace.rate):
        sent = sorted((r for r in lines if r["request_rate"] == pytest.approx(rate)), key=lambda r: r["request"])
        assert [r["input_tokens"] for r in sent] == [r["input_length"] for r in rows]  # the emulator's own count
        assert [r["output_tokens"] for r in sent] == [r["output_length"] for r in rows]
    # That each is sent on the trace's schedule is asserted exactly on the client's clock in
    # tests/bench/load/test_trace_replay.py; here the emulator's clock adds the loaded machine's delays.
    assert "trace replay (open loop): each request at its recorded arrival time ÷ the speed (2, 4;" in \
        (out / "report.md").read_text()
