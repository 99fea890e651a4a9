"""The emulator as a child process for the bench: own session, reniced, health-checked, and stopped for sure.

Why a child in its own session: the kernel shares CPU between sessions before it looks at `nice`, and a
server in the same session as a busy load generator stalled for 0.1–1 s at a time (platform notes).
The child exits by itself if its parent dies, so a killed bench leaves no server behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

import sagellm
from sagellm.clock import REAL, Clock
from sagellm.errors import TargetError
from sagellm.profiles.plan import DeploymentPlan

_READY_PREFIX = "SAGELLM_EMULATOR_URL="
_NICE = -5  # ahead of the load generator when allowed (root or CAP_SYS_NICE); left at 0 otherwise


class EmulatorProcess:
    """`with EmulatorProcess(plan) as emu: emu.url` — the emulator in a child process, stopped on exit."""

    def __init__(self, plan: DeploymentPlan | str | os.PathLike[str], *, port: int | None = None,
                 clock: Clock = REAL, endpoint_name: str | None = None,
                 component_names: dict[str, str] | None = None, host: str = "127.0.0.1",
                 startup_timeout_s: float = 30.0, instance_startup_s: float | None = None,
                 cloudwatch_url: str | None = None):
        self.plan = plan
        self.host = host
        self.port = port or 0  # 0: the child binds any free port and reports it
        self.clock = clock
        self.endpoint_name = endpoint_name
        self.component_names = component_names
        self.startup_timeout_s = startup_timeout_s
        self.instance_startup_s = instance_startup_s  # autoscaling: None for the documented default
        self.cloudwatch_url = cloudwatch_url  # publish SageMaker's endpoint metrics there (the local AWS)
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Spawn the child, wait for its URL and for `/ping` to answer; raise TargetError if it does not."""
        self._tmp = tempfile.TemporaryDirectory(prefix="sagellm-emulator-")
        tmp = Path(self._tmp.name)
        if isinstance(self.plan, DeploymentPlan):
            plan_path = tmp / "plan.json"
            plan_path.write_text(self.plan.model_dump_json(), encoding="utf-8")
        else:
            plan_path = Path(self.plan)
        log_path = tmp / "emulator.log"
        cmd = [sys.executable, "-m", "sagellm.emulator", "--plan", str(plan_path), "--host", self.host,
               "--port", str(self.port), "--time-scale", repr(self.clock.scale),
               "--parent-pid", str(os.getpid()), "--work-dir", str(tmp)]
        if self.endpoint_name:
            cmd += ["--endpoint-name", self.endpoint_name]
        if self.component_names:
            cmd += ["--component-names", json.dumps(self.component_names)]
        if self.instance_startup_s is not None:
            cmd += ["--instance-startup-s", repr(self.instance_startup_s)]
        if self.cloudwatch_url:
            cmd += ["--cloudwatch-url", self.cloudwatch_url]
        env = dict(os.environ)
        # The child must import this very sagellm, whether it is installed or only on sys.path.
        src = str(Path(sagellm.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        with log_path.open("wb") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                          env=env, start_new_session=True)
        # Best effort: the process group's nice, and (autogroup kernels) the nice of its session's group.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PGRP, self._proc.pid, _NICE)
        with contextlib.suppress(OSError):
            Path(f"/proc/{self._proc.pid}/autogroup").write_text(str(_NICE))
        try:
            self.url = self._read_url(log_path)
            self.port = int(self.url.rsplit(":", 1)[1])
            self._wait_ping(log_path)
        except BaseException:
            self.stop()
            raise

    def _read_url(self, log_path: Path) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout_s
        buffer = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=0.1):
                    data = os.read(self._proc.stdout.fileno(), 4096)
                    if not data:
                        break
                    buffer += data
                    for line in buffer.decode(errors="replace").splitlines():
                        if line.startswith(_READY_PREFIX):
                            return line[len(_READY_PREFIX):].strip()
                if self._proc.poll() is not None:
                    break
        raise TargetError(f"emulator did not start{self._log_tail(log_path)}")

    def _wait_ping(self, log_path: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=2.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise TargetError(f"emulator at {self.url} did not answer /ping{self._log_tail(log_path)}")

    @staticmethod
    def _log_tail(log_path: Path) -> str:
        try:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            return ""
        return ": " + " | ".join(tail) if tail else ""

    def flush_metrics(self) -> dict[str, float]:
        """Have the child put every metric it holds into CloudWatch now; its clock (`origin`, `time_scale`:
        the timestamps are `origin + (wall − origin) ÷ time_scale`); TargetError if it cannot."""
        try:
            request = urllib.request.Request(f"{self.url}/cloudwatch/flush", data=b"", method="POST")
            with urllib.request.urlopen(request, timeout=30) as reply:
                return dict(json.load(reply)["clock"])
        except urllib.error.HTTPError as exc:
            raise TargetError(f"emulator: publishing metrics failed: {exc.read().decode(errors='replace')}") from None
        except OSError as exc:
            raise TargetError(f"emulator: publishing metrics failed: {exc}") from None

    def prefix_cache(self) -> tuple[float, float]:
        """Prompt tokens its models' prefix caches were asked for and served so far (`/metrics`); TargetError if
        it cannot say."""
        try:
            with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as reply:
                models = json.load(reply)["models"].values()
        except (OSError, ValueError, KeyError) as exc:
            raise TargetError(f"emulator: /metrics could not be read: {exc}") from None
        return (sum(m.get("prefix_cache_queries", 0) for m in models),
                sum(m.get("prefix_cache_hits", 0) for m in models))

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL to the child's process group; then check that the port is free."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout_s)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        if self.url and not port_is_free(self.host, self.port):
            raise TargetError(f"emulator stopped but {self.host}:{self.port} still accepts connections")


def port_is_free(host: str, port: int, wait_s: float = 2.0) -> bool:
    """Whether nothing listens on `host:port` (polled for up to `wait_s`, as a listener closes)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
        except OSError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
