"""The workers as Ray actors (`--ray ADDRESS`): the same shares as worker processes, on a Ray cluster.

Ray is an optional extra (`pip install 'sagellm[ray]'`), imported only here. Each actor runs `run_share`
on its own event loop and streams its messages back through a Ray streaming generator, in batches (what
queued up in the last `BATCH_S`: each yield costs the actor a Ray object). Clocks: actors may run on other machines, so each actor's offset from the
coordinator's clock is measured NTP-style (see `clock_offset`) and the run's start is handed to each actor
on its own clock; records come back in seconds since the run's start, on the coordinator's clock. An actor
that dies (its node lost, its process killed) ends its stream with an error: its requests in flight become
`client` errors (see `workers`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.workers import Deliver, Message, Share, run_share
from sagellm.errors import TargetError

CLOCK_SAMPLES = 8  # round trips per actor for its clock offset
BATCH_S = 0.05  # an actor sends what it has at most this often
ACTOR_START_S = 120.0  # how long the cluster may take to place and start the actors


class ShareActor:
    """One worker: runs shares sent to it (the class Ray makes an actor of)."""

    def __init__(self, transport: Transport, workload: Workload):
        self.transport, self.workload = transport, workload

    def clock(self) -> float:
        """This actor's time.perf_counter()."""
        return time.perf_counter()

    def pid(self) -> int:
        """The actor's process id (to say which one died)."""
        import os

        return os.getpid()

    async def run(self, share: Share) -> AsyncIterator[list[Message]]:
        """Run a share; yield its messages in batches as they come."""
        queue: asyncio.Queue[Message | None] = asyncio.Queue()
        task = asyncio.create_task(run_share(share, self.transport, self.workload, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        while True:
            first = await queue.get()
            batch = [first] if first is not None else []
            while not queue.empty():
                item = queue.get_nowait()
                if item is None:
                    first = None
                    break
                batch.append(item)
            if batch:
                yield batch
            if first is None or (batch and batch[-1][0] == "done"):
                break
            # Each yield is a Ray object (serialised, stored, announced): batch a while, on the loop's spare time.
            await asyncio.sleep(BATCH_S)
        await task  # its error, if any, reaches the coordinator


def clock_offset(read: Callable[[], float]) -> tuple[float, float]:
    """(offset, round trip) of a remote clock: offset = remote time − the midpoint of the round trip that
    read it, from the sample with the shortest round trip (its error is at most half that round trip)."""
    samples = []
    for _ in range(CLOCK_SAMPLES):
        sent = time.perf_counter()
        remote = read()
        back = time.perf_counter()
        samples.append((back - sent, remote - (sent + back) / 2))
    rtt, offset = min(samples)
    return offset, rtt


class RayPool:
    """`size` ShareActors on the Ray cluster at `address` (`auto`: this machine's, started if none runs)."""

    def __init__(self, address: str, size: int, transport: Transport, workload: Workload):
        import ray

        self.ray = ray
        self.started_here = not ray.is_initialized()
        if self.started_here:
            _check_reachable(address)
            # ray.init gives the driver its own SIGTERM handler (sys.exit); the bench's (teardown, results,
            # exit 130) must stay the one that answers, so it is put back.
            sigterm = signal.getsignal(signal.SIGTERM)
            # Ray renices its workers to 15 so that its own daemons stay responsive. A cluster started here runs
            # on the bench's machine, where the actors are the load generator: at 15, any other busy process
            # starves them, as it does not the worker processes of `--workers`. So a cluster started here runs
            # them at the bench's own priority (the raylet it starts reads this variable); a value the user set
            # stands, and a running cluster keeps its own.
            niceness = "RAY_worker_niceness" not in os.environ
            if niceness:
                os.environ["RAY_worker_niceness"] = "0"
            try:
                ray.init(address=None if address == "auto" else address, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise TargetError(f"--ray {address}: no Ray cluster could be reached or started: "
                                  f"{_first_line(exc)} (start one with `ray start --head`)") from None
            finally:
                if niceness:
                    os.environ.pop("RAY_worker_niceness", None)
                if sigterm is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, sigterm)
        # SPREAD: across the cluster's nodes, so that no one machine drives more than its share.
        actor: Any = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(ShareActor)
        self.actors: list[Any] = [actor.remote(transport, workload) for _ in range(size)]
        self.size, self.remote = size, True
        try:
            self.pids = ray.get([a.pid.remote() for a in self.actors], timeout=ACTOR_START_S)
        except ray.exceptions.GetTimeoutError:
            cpus = ray.cluster_resources().get("CPU", 0)
            self.close()
            raise TargetError(f"--ray {address}: {size} workers of 1 CPU each did not start within "
                              f"{ACTOR_START_S:g} s (the cluster has {cpus:g} CPUs; use fewer --workers or "
                              "add nodes)") from None
        self.offsets: list[float] = []
        self.sync_clocks()

    def sync_clocks(self) -> None:
        """Measure each actor's clock offset afresh (clocks on different machines drift apart)."""
        self.offsets = [clock_offset(functools.partial(_read_clock, self.ray, a))[0] for a in self.actors]

    async def run(self, shares: list[Share], deliver: Deliver) -> None:
        async def one(share: Share) -> None:
            k = share.worker
            try:
                async for ref in self.actors[k].run.options(num_returns="streaming").remote(share):
                    for message in await ref:
                        deliver(k, message)
            except self.ray.exceptions.RayActorError as exc:
                deliver(k, ("died", f"worker {k} (Ray actor, pid {self.pids[k]}) died: {_first_line(exc)}"))

        await asyncio.gather(*(one(s) for s in shares))

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started_here:
            self.ray.shutdown()


def _check_reachable(address: str) -> None:
    """A cluster address that nothing listens on fails now (Ray itself retries it for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise TargetError(f"--ray {address}: nothing answers there ({exc.strerror or exc}); start the cluster "
                          "with `ray start --head` and pass its address, or use --ray auto") from None


def _read_clock(ray: Any, actor: Any) -> float:
    return float(ray.get(actor.clock.remote()))


def _first_line(exc: Any) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
