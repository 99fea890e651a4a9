"""Levels split across worker processes (and Ray actors), checked against a server that logs what it saw."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from bench_helpers import sagellm
from pacing_server import Remote, pacing_server_process
from sagellm.bench.client.transports import TGI, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.coordinator import split
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.load.pools import ProcessPool, worker_pool
from sagellm.bench.load.workers import auto_workers, pool_size, worker_problems
from sagellm.bench.sweep.run import run_sweep
from sagellm.errors import TargetError
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord, read_records

TOKENS = 8


def workload(seed: int = 7) -> Workload:
    return Workload(WorkloadOptions(seed=seed), Payload(16, TOKENS))


def assert_every_request_once(records: list[RequestRecord], remote: Remote, work: Workload) -> None:
    """Each request the server saw is in the records exactly once, and its prompt is request i's prompt."""
    served = Counter(s.prompt for s in remote.log())
    indices = Counter(r.request for r in records)
    assert max(served.values()) == 1 and max(indices.values()) == 1
    assert served == Counter(work.request(r.request or 0).prompt for r in records)


def assert_in_completion_order(level: LevelResult) -> None:
    ends = [r.end_s for r in level.records]
    assert ends == sorted(ends)


def sweep(url: str, work: Workload, records: list[RequestRecord], pool: object, **kwargs: object
          ) -> list[LevelResult]:
    return asyncio.run(run_sweep(HttpTransport(url, TGI), workload=work, duration_per_level_s=None,
                                 on_record=records.append, pool=pool, **kwargs))  # type: ignore[arg-type]


@pytest.mark.slow
def test_two_worker_processes_send_every_request_once_and_merge_in_completion_order() -> None:
    work, records = workload(), []
    with pacing_server_process(itl_s=0.004, ttft_s=0.02) as remote, \
            worker_pool(2, HttpTransport(remote.url, TGI), work) as pool:
        assert isinstance(pool, ProcessPool)
        levels = sweep(remote.url, work, records, pool, concurrency=[4, 6], requests_per_level=36, warmup=1,
                       workers=2)
        assert_every_request_once(records, remote, work)
    assert [len(lv.records) for lv in levels] == [36 + 4, 36 + 6]
    assert [len(lv.measured) for lv in levels] == [36, 36]
    assert records == [r for lv in levels for r in lv.records]  # on_record got the level's records, in order
    for level in levels:
        assert_in_completion_order(level)
        assert all(r.ok and r.output_tokens == TOKENS and r.concurrency == level.concurrency for r in level.records)
        # Slots are numbered across the workers: 0..C-1, each with its warm-up request.
        assert {r.worker for r in level.records} == set(range(level.concurrency or 0))
        assert Counter(r.worker for r in level.records if r.warmup) == Counter(range(level.concurrency or 0))
        assert level.ramp_excluded and level.started_s < level.window_start_s < level.window_end_s < level.ended_s
        assert 0 < level.window_output_tokens <= TOKENS * len(level.measured)
        assert level.stopped_reason is None


@pytest.mark.slow
def test_open_loop_workers_send_every_nth_arrival_of_one_schedule() -> None:
    work, records = workload(), []
    loop = OpenLoop(rates=(40.0,), seed=3)
    with pacing_server_process(itl_s=0.004, ttft_s=0.02) as remote, \
            worker_pool(2, HttpTransport(remote.url, TGI), work) as pool:
        [level] = sweep(remote.url, work, records, pool, open_loop=loop, requests_per_level=20, warmup=2,
                        workers=2)
        assert_every_request_once(records, remote, work)
    # Arrival i carries request index i, as in one process: indices 0..21, the first two warm-up.
    assert sorted(r.request for r in records) == list(range(22))
    assert sorted(r.request for r in records if r.warmup) == [0, 1]
    assert all(r.ok and r.request_rate == 40.0 and r.late_s is not None for r in records)
    assert_in_completion_order(level)
    # Together they keep the schedule: the last of 22 arrivals at 40/s is due 0.525 s after the first.
    starts = sorted(r.start_s for r in records)
    assert 0.4 < starts[-1] - starts[0] < 1.5
    assert work.issued >= 22  # the next level's indices start after these


@pytest.mark.parametrize("kind", ["processes", pytest.param("ray", marks=pytest.mark.integration)])
@pytest.mark.slow
@pytest.mark.timeout(600)  # a Ray cluster's start and the first requests: minutes on a busy machine
def test_a_dead_worker_turns_its_requests_in_flight_into_client_errors_and_stops_the_sweep(kind: str) -> None:
    if kind == "ray":
        pytest.importorskip("ray")
    records: list[RequestRecord] = []
    slow = Workload(WorkloadOptions(seed=7, output_tokens="40"), Payload(16, 40))
    with pacing_server_process(itl_s=0.05, ttft_s=0.02) as remote, \
            worker_pool(2, HttpTransport(remote.url, TGI), slow, "auto" if kind == "ray" else None) as pool:
        assert pool is not None
        victim = pool.procs[1].pid if isinstance(pool, ProcessPool) else pool.pids[1]  # type: ignore[attr-defined]

        in_flight_at_kill: list[int] = []

        def kill_when_all_four_are_in_flight() -> None:
            # Generous: beside other CPU-bound jobs the first requests can take a while to leave.
            deadline = time.monotonic() + 120
            while len(remote.log()) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            # A worker tells the bench of a request as it sends it (a Ray actor, in its next batch of messages):
            # the kill waits a moment after the fourth reaches the server, well inside its 2 s reply.
            time.sleep(0.5)
            in_flight_at_kill.append(len(remote.log()))
            os.kill(victim, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_all_four_are_in_flight)
        killer.start()
        levels = sweep(remote.url, slow, records, pool, concurrency=[4, 8], requests_per_level=8, warmup=0,
                       workers=2)
        killer.join()
        served = Counter(s.prompt for s in remote.log())
    assert in_flight_at_kill == [4], f"the worker was killed with {in_flight_at_kill} requests at the server, not 4"
    assert len(levels) == 1  # the sweep stops at the level where the worker died
    [level] = levels
    lost = [r for r in level.records if r.error_kind == "client"]
    assert len(lost) == 2  # worker 1 held 2 of the 4 slots
    assert all(not r.ok and "worker 1" in (r.error or "") and r.request is not None and r.request % 2 == 1
               for r in lost)
    assert f"pid {victim}" in (level.stopped_reason or "") and "worker 1" in (level.stopped_reason or "")
    assert level.errors_by_kind["client"] == 2
    # Worker 0 finished its share; every request the server saw is recorded once (the lost ones as errors).
    assert sum(r.ok for r in level.records) == 4
    assert served == Counter(slow.request(r.request or 0).prompt for r in records)
    assert_in_completion_order(level)


@pytest.mark.slow
def test_bench_cli_with_two_workers_writes_each_request_once_to_requests_jsonl(tmp_path: Path) -> None:
    with pacing_server_process(itl_s=0.004, ttft_s=0.02) as remote:
        ran = sagellm("bench", "--target", "http", "--url", remote.url, "--api", "tgi", "--workers", "2",
                      "--concurrency", "2,4", "--requests-per-level", "8", "--output-tokens", str(TOKENS),
                      "--input-tokens", "16", "--seed", "5", "--out", str(tmp_path), "--json")
        served = Counter(s.prompt for s in remote.log())
    assert ran.returncode == 0, ran.stderr
    records = read_records(tmp_path / "requests.jsonl")
    work = Workload(WorkloadOptions(input_tokens="16", output_tokens=str(TOKENS), seed=5), Payload(16, TOKENS))
    assert len(records) == sum(served.values()) == (8 + 2) + (8 + 4)
    assert served == Counter(work.request(r.request or 0).prompt for r in records)
    results = json.loads(ran.stdout)
    assert [lv["requests"] for lv in results["levels"]] == [8, 8]
    assert all(lv["errors"]["client"] == 0 for lv in results["levels"])
    assert (results["run"]["workers"], results["run"]["ray"]) == (2, None)
    assert "from 2 worker processes" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("value", ["0", "x", "-2"])
@pytest.mark.slow
def test_bad_workers_value_is_one_line_and_exit_2(tmp_path: Path, value: str) -> None:
    ran = sagellm("bench", "--target", "http", "--url", "http://127.0.0.1:9", "--workers", value,
                  "--out", str(tmp_path / "out"))
    assert ran.returncode == 2
    assert ran.stderr.strip().count("\n") == 0 and f"--workers: '{value}'" in ran.stderr
    assert not (tmp_path / "out").exists()


def test_ray_flag_without_ray_installed_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert worker_problems(1, "auto") == ["Workers.ray auto: Ray is not installed (pip install 'sagellm[ray]')"]
    assert worker_problems(None, None) == []


def test_auto_is_one_worker_per_256_streams_at_most_one_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert [auto_workers(c, open_loop=None) for c in (1, 256, 257, 512, 5000)] == [1, 1, 2, 2, 4]
    # Open loop: rate × 60 s (the longest a request can last) streams at most, capped by the in-flight cap.
    assert auto_workers(4, open_loop=OpenLoop((4,))) == 1
    assert auto_workers(5, open_loop=OpenLoop((5,))) == 2
    assert auto_workers(1000, open_loop=OpenLoop((1000,), max_in_flight=512)) == 2


def test_one_worker_is_no_extra_process_and_auto_sizes_the_pool_for_the_busiest_level(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    with worker_pool(1, HttpTransport("http://127.0.0.1:9", TGI), workload()) as pool:
        assert pool is None  # the level runs in the bench process, as without workers
    assert pool_size(1, [1, 2048], open_loop=None) == 1
    assert pool_size(None, [1, 64, 600], open_loop=None) == 3
    assert pool_size(None, [1, 64], open_loop=None) == 1


def test_split_is_proportional_and_exact() -> None:
    assert split(10, [1, 1, 1]) == [4, 3, 3]
    assert split(18, [3, 3]) == [9, 9]
    assert split(7, [2, 1]) == [5, 2]
    assert sum(split(1001, [5, 3, 2])) == 1001


@pytest.mark.integration
def test_a_level_through_a_local_ray_cluster_sends_every_request_once() -> None:
    pytest.importorskip("ray")
    work, records = workload(), []
    sigterm = signal.getsignal(signal.SIGTERM)
    with pacing_server_process(itl_s=0.004, ttft_s=0.02) as remote, \
            worker_pool(2, HttpTransport(remote.url, TGI), work, ray_address="auto") as pool:
        assert pool is not None and pool.remote
        # ray.init installs its own SIGTERM handler in the driver; the bench's must stay the one that answers.
        assert signal.getsignal(signal.SIGTERM) is sigterm
        assert all(abs(offset) < 0.05 for offset in pool.offsets)  # one machine: the clocks agree
        # The actors are the load: at Ray's default niceness (15) any busy process on the machine starves them.
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pool.pids] == [own, own]  # type: ignore[attr-defined]
        assert "RAY_worker_niceness" not in os.environ  # set only while the cluster starts
        levels = sweep(remote.url, work, records, pool, concurrency=[4], requests_per_level=12, warmup=1,
                       workers=2)
        assert_every_request_once(records, remote, work)
    [level] = levels
    assert len(level.records) == 12 + 4 and len(level.measured) == 12
    assert all(r.ok for r in level.records)
    assert_in_completion_order(level)
    assert level.ramp_excluded and level.window_start_s < level.window_end_s


@pytest.mark.slow
def test_a_ray_address_nothing_answers_on_fails_at_once_with_exit_3() -> None:
    pytest.importorskip("ray")
    from sagellm.bench.load.ray_workers import RayPool

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(TargetError, match=f"--ray 127.0.0.1:{port}: nothing answers there") as exc:
        RayPool(f"127.0.0.1:{port}", 2, HttpTransport("http://127.0.0.1:9", TGI), workload())
    assert exc.value.exit_status == 3 and time.monotonic() - started < 10
