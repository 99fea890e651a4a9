"""The pools a sweep's levels run on: N worker processes on this machine, or Ray actors (`ray_workers`).

See `workers` for what a worker runs and how its records come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import queue
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.ray_workers import RayPool
from sagellm.bench.load.workers import Deliver, Share, WorkerPool, run_share


def _send_all(conn: Connection, outbox: queue.SimpleQueue[Any]) -> None:
    """A worker's sender thread: pickle and send each message of `outbox`, in order, until None."""
    while (message := outbox.get()) is not None:
        try:
            conn.send(message)
        except OSError:  # the coordinator is gone: nobody to tell
            return


def _process_main(conn: Connection, transport: Transport, workload: Workload) -> None:
    """A worker process: run the shares it is sent until it is sent None."""
    # Ctrl-C reaches the whole process group: the coordinator alone decides, and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send(("ready",))
    # Messages leave through a thread: a record (its token gaps pickled) sent from the event loop blocked the loop,
    # with its streams unread, whenever the coordinator was slow to drain the pipe (64 KiB: a few dozen records,
    # less than one wave of completions at 512 streams on a busy machine).
    outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    sender = threading.Thread(target=_send_all, args=(conn, outbox), name="sagellm-worker-sender", daemon=True)
    sender.start()
    try:
        while (share := conn.recv()) is not None:
            asyncio.run(run_share(share, transport, workload, outbox.put))
    finally:  # what was emitted before a failure still reaches the coordinator
        outbox.put(None)
        sender.join(timeout=10)


class ProcessPool:
    """N worker processes on this machine (`spawn`: a clean interpreter each, one event loop each)."""

    def __init__(self, size: int, transport: Transport, workload: Workload):
        ctx = multiprocessing.get_context("spawn")
        self.size, self.offsets = size, [0.0] * size  # one machine: CLOCK_MONOTONIC is shared
        self.remote = False
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for k in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_process_main, args=(child, transport, workload), daemon=True,
                               name=f"sagellm-worker-{k}")
            proc.start()
            child.close()  # so the coordinator's end reads EOF when the worker dies
            self.conns.append(parent)
            self.procs.append(proc)
        for k, conn in enumerate(self.conns):  # started and imported: a level's shares start together
            try:
                conn.recv()
            except EOFError:
                self.close()
                raise RuntimeError(f"worker process {k} exited while starting (exit code {self.procs[k].exitcode})")

    async def run(self, shares: list[Share], deliver: Deliver) -> None:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        running = {s.worker for s in shares}

        def end(k: int) -> None:
            loop.remove_reader(self.conns[k].fileno())
            running.discard(k)
            if not running and not finished.done():
                finished.set_result(None)

        def died(k: int) -> None:
            proc = self.procs[k]
            proc.join(timeout=5)
            end(k)
            deliver(k, ("died", f"worker {k} (pid {proc.pid}) exited with code {proc.exitcode}"))

        def readable(k: int) -> None:
            conn = self.conns[k]
            try:
                while conn.poll():
                    try:
                        message = conn.recv()
                    except (EOFError, OSError):
                        died(k)
                        return
                    deliver(k, message)
                    if message[0] == "done":
                        end(k)
                        return
            except Exception as exc:  # noqa: BLE001 - e.g. on_record failed: the level raises it
                if not finished.done():
                    finished.set_exception(exc)

        for share in shares:
            loop.add_reader(self.conns[share.worker].fileno(), readable, share.worker)
            try:
                self.conns[share.worker].send(share)
            except OSError:  # it died between levels
                died(share.worker)
        try:
            await finished
        finally:
            for k in list(running):
                loop.remove_reader(self.conns[k].fileno())
            if running:  # cancelled or failed half-way: the workers' levels cannot be resumed
                for proc in self.procs:
                    proc.terminate()
                self.close()

    def sync_clocks(self) -> None:
        pass  # one machine: one clock

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs, strict=True):
            if proc.is_alive():
                with contextlib.suppress(OSError, BrokenPipeError):
                    conn.send(None)
            proc.join(timeout=2)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            conn.close()


@contextlib.contextmanager
def worker_pool(size: int, transport: Transport, workload: Workload, ray_address: str | None = None
                ) -> Iterator[WorkerPool | None]:
    """The pool a sweep runs on: None for one worker on this machine (the level runs in this process)."""
    pool: WorkerPool | None = None
    if ray_address is not None:
        pool = RayPool(ray_address, size, transport, workload)
    elif size > 1:
        pool = ProcessPool(size, transport, workload)
    try:
        yield pool
    finally:
        if pool is not None:
            pool.close()
