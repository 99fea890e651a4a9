"""Shared pieces of the bench's end-to-end tests: the CLI as a subprocess, small fast sweeps, and probes
that find what a run left behind (moto resources, emulator children, CDK CLI processes, ports)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sagellm.aws.local import LocalAws
from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.workers import Deliver, Share, run_share
from sagellm.emulator import EmulatorProcess
from sagellm.emulator.process import port_is_free
from sagellm.emulator.serving.copies import CopyEngine, Sequence
from sagellm.results.records import RequestRecord

REPO = Path(__file__).resolve().parents[1]
# The venv's console script, so exit codes come from `main()` exactly as a pipeline sees them.
SAGELLM = str(Path(sys.executable).parent / "sagellm")
MODEL = "meta-llama/Llama-2-7b-hf"
INSTANCE = "ml.g5.2xlarge"
# Small and compressed: a local run is then dominated by the CDK deploy (~10 s), not by the sweep.
FAST = ["--time-scale", "0.05", "--output-tokens", "32"]


def bench_args(out: Path, *extra: str, profile: str = "max-throughput", concurrency: str = "1,4",
               requests: str | None = "4", warmup: str = "0") -> list[str]:
    """`sagellm bench …` arguments for a quick local sweep into `out`."""
    args = ["bench", "--profile", profile, "--model", MODEL, "--instance", INSTANCE, *FAST,
            "--concurrency", concurrency, "--warmup", warmup, "--out", str(out)]
    if requests is not None:
        args += ["--requests-per-level", requests]
    return args + list(extra)


@dataclass
class Ran:
    """A finished `sagellm` process."""

    pid: int
    returncode: int
    stdout: str
    stderr: str
    wall_s: float


# Runs a command with SIGINT and SIGHUP at their defaults, as a command typed at a terminal starts, however
# this test run was started: `nohup … &` and many CI runners start it with both ignored, and an ignored
# signal is inherited across exec. A re-exec rather than preexec_fn, which is unsafe while this process
# runs threads.
AS_FROM_A_TERMINAL = [sys.executable, "-I", "-S", "-c", (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])")]


def spawn(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[str]:
    """Start the `sagellm` console script in the background (for signals), as from a terminal: Ctrl-C
    (SIGINT) and a hang-up (SIGHUP) act on it, as they would on a user's."""
    return subprocess.Popen([*AS_FROM_A_TERMINAL, SAGELLM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd or REPO, env=env, stdin=subprocess.DEVNULL)


def finish(proc: subprocess.Popen[str], started: float, timeout: float = 120) -> Ran:
    """Wait for a spawned `sagellm`; kill it (and fail) if it does not end in time."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"sagellm did not exit within {timeout:g} s; stderr:\n{stderr[-2000:]}")
    return Ran(proc.pid, proc.returncode, stdout, stderr, time.monotonic() - started)


def sagellm(*args: str, timeout: float = 120, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> Ran:
    """Run the `sagellm` console script to completion."""
    started = time.monotonic()
    return finish(spawn(*args, env=env, cwd=cwd), started, timeout)


def results_of(out: Path) -> dict[str, Any]:
    """results.json of a bench --out folder, as plain JSON."""
    return json.loads((out / "results.json").read_text())


def request_lines(out: Path) -> list[dict[str, Any]]:
    """requests.jsonl of a bench --out folder (every line must be JSON)."""
    path = out / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.02) -> None:
    """Poll until `condition()` holds; fail the test naming `what` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def account_env(port: int) -> dict[str, str]:
    """The caller's environment pointed at the local account, with dummy credentials and no real AWS setup."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_DEFAULT_"))}
    return env | {"AWS_ENDPOINT_URL": f"http://localhost:{port}", "AWS_ACCESS_KEY_ID": "testing",
                  "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                  "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                  "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
                  "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


@contextmanager
def local_aws_server(folder: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """`sagellm local-aws` started as a person starts it, in `folder` (its log there), ready; with the environment
    that points a child process at it. It must stop cleanly on SIGTERM."""
    port = free_port()
    log_path = folder / "local-aws.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([SAGELLM, "local-aws", "--port", str(port)], stdout=log, stderr=log,
                                  text=True, stdin=subprocess.DEVNULL, cwd=folder)
        try:
            wait_for(lambda: "Ctrl-C to stop" in log_path.read_text() or server.poll() is not None,
                     300, "sagellm local-aws to be ready", poll_s=0.5)
            assert server.poll() is None, log_path.read_text()
            yield server, account_env(port)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                assert server.wait(timeout=30) == 0


def _proc_text(pid: str, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone meanwhile, or not ours to read
        return ""


def processes_mentioning(*needles: str) -> list[str]:
    """`pid cmdline` of every live process whose command line or environment contains any needle.

    The bench's children are found by what is unique to one run (its --out folder, which the CDK CLI and
    the app it synthesizes carry in their arguments or CDK_OUTDIR; its pid, which the emulator child
    carries as --parent-pid), never by a broad name: other runs may share this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        status = _proc_text(entry.name, "status")
        if "State:\tZ" in status:  # a zombie holds nothing and waits only for its parent to reap it
            continue
        cmdline = _proc_text(entry.name, "cmdline")
        haystack = cmdline + " " + _proc_text(entry.name, "environ")
        if any(needle in haystack for needle in needles):
            found.append(f"{entry.name} {cmdline.strip()}")
    return found


def synthesizing(out: Path) -> bool:
    """Whether sagellm's CDK app is running for the bench writing to `out` (the CDK CLI passes the run's
    assembly folder to it as CDK_OUTDIR)."""
    return any("sagellm.cdk_app" in p for p in processes_mentioning(str(out / "cdk")))


def emulator_children_of(pid: int) -> list[str]:
    """Emulator processes a bench with process id `pid` started (they carry `--parent-pid PID`)."""
    return [p for p in processes_mentioning(f"--parent-pid {pid} ") if "sagellm.emulator" in p]


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists and is not a zombie."""
    status = _proc_text(str(pid), "status")
    return bool(status) and "State:\tZ" not in status


@dataclass
class Probe:
    """What an in-process bench left behind, captured at the moment its local AWS stopped."""

    leftovers: list[dict[str, list[str]]] = field(default_factory=list)  # one entry per LocalAws.stop()
    emulators: list[EmulatorProcess] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # of the emulator children that started

    def assert_nothing_left(self) -> None:
        """Nothing in moto when it stopped, and no emulator process or port afterwards."""
        assert self.leftovers, "the local AWS was never stopped"
        assert self.leftovers == [{}] * len(self.leftovers), f"left in moto: {self.leftovers}"
        assert not LocalAws._running, "the local AWS still runs"
        for emu in self.emulators:
            assert emu.pid is None, "the emulator was never stopped"
            assert emu.port, "the emulator never reported its port"
            assert port_is_free(emu.host, emu.port, wait_s=0.5), f"port {emu.port} still accepts connections"
        for pid in self.pids:
            assert not pid_alive(pid), f"emulator process {pid} survived"


def install_probe(monkeypatch: pytest.MonkeyPatch) -> Probe:
    """Record moto's contents just before each LocalAws stops, and every emulator child started."""
    probe = Probe()
    stop, start = LocalAws.stop, EmulatorProcess.start

    def recording_stop(self: LocalAws) -> None:
        if self._server is not None:
            probe.leftovers.append(self.leftovers())
        stop(self)

    def recording_start(self: EmulatorProcess) -> None:
        probe.emulators.append(self)
        start(self)  # a start that fails stops its own child
        assert self.pid is not None
        probe.pids.append(self.pid)

    monkeypatch.setattr(LocalAws, "stop", recording_stop)
    monkeypatch.setattr(EmulatorProcess, "start", recording_start)
    return probe


class FakeTransport:
    """A transport without a network: each request sleeps; above `admit` in flight it is refused at once."""

    def __init__(self, *, duration_s: tuple[float, float] = (0.005, 0.02), admit: int = 10_000,
                 timeout_at: int | None = None, fail_first: int = 0):
        self.duration_s = duration_s
        self.admit = admit
        self.timeout_at = timeout_at  # the n-th request (1-based) times out
        self.fail_first = fail_first  # the first n requests fail (a validation error)
        self.in_flight = 0
        self.max_in_flight = 0
        self.in_flight_at_start: list[int] = []
        self.sent = 0
        self.cancelled = 0

    async def send(self, session: aiohttp.ClientSession, prompt: str, max_new_tokens: int) -> RequestRecord:
        t0 = time.perf_counter()
        self.sent += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.in_flight_at_start.append(self.in_flight)
        try:
            if self.in_flight > self.admit:
                await asyncio.sleep(0)
                return RequestRecord(ok=False, start_s=t0, e2e_s=time.perf_counter() - t0, status=429,
                                     error_kind="overloaded", error="Model is overloaded")
            if self.sent <= self.fail_first:
                await asyncio.sleep(0.001)
                return RequestRecord(ok=False, start_s=t0, e2e_s=time.perf_counter() - t0, status=422,
                                     error_kind="validation", error="Input validation error")
            if self.sent == self.timeout_at:
                await asyncio.sleep(0.01)
                return RequestRecord(ok=False, start_s=t0, e2e_s=time.perf_counter() - t0,
                                     error_kind="timeout", error="timed out")
            await asyncio.sleep(random.uniform(*self.duration_s))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        e2e = time.perf_counter() - t0
        return RequestRecord(ok=True, start_s=t0, e2e_s=e2e, output_tokens=max_new_tokens, ttft_s=e2e / 2,
                             token_gaps_s=[e2e / 2 / max_new_tokens] * (max_new_tokens - 1), status=200)


class InProcessPool:
    """Workers as tasks of this event loop, all on one transport: the coordinator's logic without processes."""

    remote = False

    def __init__(self, size: int, transport: Transport, workload: Workload):
        self.size, self.offsets, self.transport, self.workload = size, [0.0] * size, transport, workload

    async def run(self, shares: list[Share], deliver: Deliver) -> None:
        await asyncio.gather(*(run_share(share, self.transport, self.workload, functools.partial(deliver, share.worker))
                               for share in shares))

    def sync_clocks(self) -> None:
        """One clock: nothing to measure."""

    def close(self) -> None:
        """Nothing runs between levels."""


class EngineTransport:
    """Requests straight into one emulated model copy, without HTTP: tokens stamped on its simulated clock."""

    def __init__(self, engine: CopyEngine, input_tokens: int):
        self.engine = engine
        self.input_tokens = input_tokens

    async def send(self, session: aiohttp.ClientSession, prompt: str, max_new_tokens: int) -> RequestRecord:
        t0 = time.perf_counter()
        seq = Sequence(self.input_tokens, max_new_tokens, t0, None)
        self.engine.submit(seq)
        stamps = []
        async for _ in seq.progress():
            assert seq.last_token_s is not None
            stamps.append(seq.last_token_s)
        return RequestRecord(ok=True, start_s=t0, e2e_s=stamps[-1] - t0, output_tokens=len(stamps),
                             ttft_s=stamps[0] - t0, token_gaps_s=[b - a for a, b in itertools.pairwise(stamps)],
                             status=200)


@contextmanager
def hung_server() -> Iterator[str]:
    """A server on loopback that accepts every connection and answers its GETs (`/info`: 404) but never a POST:
    a hung endpoint. Gives its URL; runs on a thread of its own, so a bench in this process can be pointed at it."""
    loop = asyncio.new_event_loop()
    held: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if (await reader.readline()).startswith(b"GET "):
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
        else:
            held.append(writer)  # read, never answered, closed when the server stops

    server = loop.run_until_complete(asyncio.start_server(serve, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        async def stop() -> None:
            server.close()
            for writer in held:
                writer.close()
        asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
