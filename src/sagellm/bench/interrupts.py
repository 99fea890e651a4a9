"""SIGINT, SIGTERM and SIGHUP during a bench: the first one stops the work; teardown and results always finish.

SIGTERM is handled directly, not turned into SIGINT: a job started in the background (`cmd &` in a script,
many CI runners) ignores SIGINT, and a re-raised SIGINT would then do nothing while the CI's SIGKILL follows.
SIGHUP (a closed terminal, a dropped SSH session) would otherwise end the process with its stack still up.
A SIGINT or SIGHUP that was ignored when the bench started (`cmd &`, `nohup`) stays ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType, TracebackType
from typing import Any, Self, TypeVar

T = TypeVar("T")
HOLD_MESSAGE = "tearing down — please wait; interrupting now would leave resources behind"


class Interrupted(KeyboardInterrupt):
    """The bench was asked to stop by a signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interrupts:
    """While entered, SIGTERM/SIGINT/SIGHUP are caught. Inside `armed()` the first one raises `Interrupted` (inside
    `run()` it cancels the coroutine first); anywhere else, and after the first, a signal is remembered and
    said, never raised, so teardown and writing results cannot be cut short."""

    def __init__(self, say: Callable[[str], None], output_fds: tuple[int, ...] = (1, 2)):
        self.say = say
        self.output_fds = output_fds  # those of them on a terminal go to /dev/null after a hang-up
        self.signum: int | None = None  # the first signal received
        self._armed = False
        self._previous: dict[int, Any] = {}
        self._terminal_fds: list[int] = []
        self._signals = [signal.SIGTERM, *(s for s in (signal.SIGINT, signal.SIGHUP)
                                           if signal.getsignal(s) != signal.SIG_IGN)]

    def __enter__(self) -> Self:
        # Asked now: once the terminal hangs up, isatty() says False.
        self._terminal_fds = [fd for fd in self.output_fds if os.isatty(fd)]
        self._previous = {s: signal.getsignal(s) for s in self._signals}
        self._install()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    @property
    def name(self) -> str | None:
        """The first signal's name (SIGTERM, SIGINT, SIGHUP), or None."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def _install(self) -> None:
        for s in self._signals:
            signal.signal(s, self._on_signal)

    def _heard(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            # The terminal is gone and writing to it fails (EIO): what is said from now on goes nowhere,
            # rather than an OSError cutting teardown short. Pipes and files (nohup, CI logs) are kept.
            devnull = os.open(os.devnull, os.O_WRONLY)
            for fd in self._terminal_fds:
                os.dup2(devnull, fd)
            os.close(devnull)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._heard(signum)
        first = self.signum is None
        if first:
            self.signum = signum
        if first and self._armed:
            raise Interrupted(signum)
        self.say(HOLD_MESSAGE)

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """The interruptible part (deploy and sweep); a signal that arrived before it raises at once.

        Only inside this block can Interrupted surface, so it always lands where the caller catches it."""
        self._armed = True
        try:
            if self.signum is not None:
                raise Interrupted(self.signum)
            yield
        finally:
            self._armed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """asyncio.run(coro), where a signal cancels the coroutine from the event loop and raises Interrupted.

        Raising from a signal handler could land inside one of aiohttp's own tasks and surface as a stray
        traceback; the loop's own signal handling runs the callback between tasks instead."""
        if self.signum is not None:
            coro.close()
            raise Interrupted(self.signum)

        cancelled = False

        async def main() -> T | None:
            nonlocal cancelled
            loop, task = asyncio.get_running_loop(), asyncio.current_task()
            assert task is not None

            def on_signal(signum: int) -> None:
                self._heard(signum)
                if self.signum is None:
                    self.signum = signum
                    task.cancel()
                else:
                    self.say(HOLD_MESSAGE)

            for s in self._signals:
                loop.add_signal_handler(s, on_signal, s)
            try:
                return await coro
            except asyncio.CancelledError:
                if self.signum is None:
                    raise
                cancelled = True  # raised below, outside the loop: a task ending in a BaseException is logged
                return None
            finally:
                for s in self._signals:
                    loop.remove_signal_handler(s)
                self._install()  # removing a loop handler resets the signal to its default

        result = asyncio.run(main())
        if cancelled and self.signum is not None:
            raise Interrupted(self.signum)
        return result  # type: ignore[return-value]
