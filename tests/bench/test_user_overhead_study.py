"""The user-view overhead study (benchmarks/user_overhead.py): its figures from a level and the server's log."""

from __future__ import annotations

from benchmark_scripts import load_benchmark
from pacing_server import Served
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.level import LevelResult
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from sagellm.results.summary import tokens_in_window

ZERO = 100.0  # the run's start on the shared clock


def _pair(work: Workload, index: int, *, sent: float, arrived: float, first_write: float, first_read: float,
          warmup: bool, itl: float = 0.02, tokens: int = 3) -> tuple[RequestRecord, Served]:
    """A request as the client recorded it and as the server logged it (times on the shared clock)."""
    writes = [first_write + i * itl for i in range(tokens)]
    record = RequestRecord(request=index, start_s=sent - ZERO, ok=True, ttft_s=first_read - sent,
                           token_gaps_s=[itl] * (tokens - 1), e2e_s=first_read - sent + itl * (tokens - 1),
                           output_tokens=tokens, warmup=warmup)
    prompt = work.request(index).prompt
    return record, Served("/generate_stream", prompt, len(prompt.split()), tokens, arrived, writes, tokens)


def test_the_overhead_is_client_ttft_minus_server_ttft_over_every_request_and_splits_into_send_and_read() -> None:
    study = load_benchmark("user_overhead")
    work = Workload(WorkloadOptions(seed=7), Payload(4, 3))
    # A warm-up request that waited 30 ms to reach the server (a connection opened) and a measured one that did not.
    warm = _pair(work, 0, sent=100.0, arrived=100.03, first_write=100.05, first_read=100.052, warmup=True)
    measured = _pair(work, 1, sent=100.2, arrived=100.201, first_write=100.221, first_read=100.226, warmup=False)
    records, log = [warm[0], measured[0]], [warm[1], measured[1]]
    window = (0.15, 0.30)
    level = LevelResult(concurrency=2, records=records, started_s=0.0, ended_s=0.3, window_start_s=window[0],
                        window_end_s=window[1], ramp_excluded=True,
                        window_output_tokens=tokens_in_window([measured[0]], *window))
    run = study.figures(level, ZERO, log, work, 1, 0, 0.5, (0.01, 0.003))

    over = sorted(r.ttft_s - s.ttft_s for r, s in (warm, measured))  # client TTFT − server TTFT, warm-up too
    assert run.overhead_ms_p50 == (over[0] + over[1]) / 2 * 1000
    assert run.measured_overhead_ms_p50 == (measured[0].ttft_s - measured[1].ttft_s) * 1000
    for r, s in (warm, measured):  # send + read = overhead, request by request
        send, read = s.arrived_s - (ZERO + r.start_s), ZERO + r.start_s + r.ttft_s - s.written_s[0]
        assert abs(send + read - (r.ttft_s - s.ttft_s)) < 1e-9
    assert run.send_ms_p99 > 25 and run.read_ms_p99 < 6  # the warm-up's wait shows in the send half
    assert (run.requests, run.errors, run.unmatched) == (2, 0, 0)
    # The server's own count: every write inside the window, warm-up's included (none fall there).
    inside = sum(ZERO + window[0] <= t <= ZERO + window[1] for s in log for t in s.written_s)
    assert run.server_tokens_per_s == inside / (window[1] - window[0])
    assert run.ratio == level.throughput_tokens_per_s / run.server_tokens_per_s
    assert run.client_cpu_ms_per_request == 0.01 * 1000 / 2 and run.server_cpu_share == 0.003 / 0.3


def test_a_wave_is_the_most_sends_within_one_itl_and_the_goal_needs_both_percentiles_the_ratio_and_no_error() -> None:
    study = load_benchmark("user_overhead")
    assert study.peak_sends([0.0, 0.005, 0.019, 0.030, 0.031, 0.0385], 0.02) == 4  # 0.019 … 0.0385
    assert study.peak_sends([0.0, 0.02, 0.04], 0.02) == 1 and study.peak_sends([], 0.02) == 0
    good = {"overhead_ms_p50": 20.0, "overhead_ms_p99": 70.0, "ratio": 1.005, "errors": 0}
    assert study.meets(good, (25, 80), 0.01)
    for worse in ({"overhead_ms_p50": 26.0}, {"overhead_ms_p99": 81.0}, {"ratio": 0.98}, {"errors": 1},
                  {"ratio": None}):
        assert not study.meets(good | worse, (25, 80), 0.01), worse
