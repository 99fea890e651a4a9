"""A real HTTP server on loopback whose ground truth is known: it paces tokens at a set ITL and logs, per
request, what it saw and when it wrote. Shared by the bench's tests; reuse it rather than writing another.

Speaks the streaming formats the bench reads:
- TGI `POST /generate_stream` (`data:{...}` events, `details` with `generated_tokens` and `input_length`
  on the last one);
- OpenAI `POST /v1/completions` and `POST /v1/chat/completions` with `stream: true` (`data: {...}`
  chunks, `usage` in a chunk of its own when `stream_options.include_usage` is set, then `[DONE]`;
  chat opens with a role-only chunk, as vLLM does).
Input tokens are counted as whitespace-separated words (the emulator's rule).

Pacing: the first token is written `ttft_s` after the request arrived, alone; later tokens are due every
`itl_s`, written `tokens_per_chunk` to a write (one network chunk), each write when the last token in it
is due. So the per-request ITL, (last write − first write) ÷ (tokens − 1), is `itl_s` whatever the
chunking, while a client that pools token gaps sees k − 1 of every k gaps as 0 ms. Writes are chained on
deadlines (a late wake-up is made up on the next token), so the pace holds under load; `Served` records
the actual write times, which are the ground truth to compare a client against.

Two ways to run it:
- in the test's own event loop: `server = PacingServer(itl_s=0.02); url = await server.start()`,
  then `server.log` and `await server.stop()`;
- in a child process (a client that measures hundreds of streams should not share its interpreter
  with the server): `with pacing_server_process(itl_s=0.02) as remote:` gives `remote.url` and
  `remote.log()` (fetched from the server's `GET /log`); the process is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass
class Served:
    """One request as the server saw it (times are the server's time.perf_counter())."""

    route: str
    prompt: str
    input_tokens: int
    max_tokens: int
    arrived_s: float
    written_s: list[float] = field(default_factory=list)  # when each write went out (one per chunk)
    tokens: int = 0

    @property
    def ttft_s(self) -> float:
        """Arrival → the first token written."""
        return self.written_s[0] - self.arrived_s

    @property
    def itl_s(self) -> float:
        """The server's own per-request ITL: (last write − first write) ÷ (tokens − 1)."""
        return (self.written_s[-1] - self.written_s[0]) / (self.tokens - 1)


class PacingServer:
    """The aiohttp application, its settings and its log."""

    def __init__(self, *, itl_s: float = 0.02, ttft_s: float = 0.05, tokens_per_chunk: int = 1):
        self.itl_s, self.ttft_s, self.tokens_per_chunk = itl_s, ttft_s, tokens_per_chunk
        self.log: list[Served] = []
        self.app = web.Application()
        self.app.router.add_post("/generate_stream", self._tgi)
        self.app.router.add_post("/v1/completions", self._openai)
        self.app.router.add_post("/v1/chat/completions", self._openai)
        self.app.router.add_get("/log", self._log)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen (port 0: a free one) and return the base URL."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        return f"http://{host}:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        """Close the listener and every open stream."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _paced(self, request: web.Request, served: Served, event: Any, last: Any, head: bytes = b"",
                     tail: bytes = b"") -> web.StreamResponse:
        """Write the tokens on their schedule; `event(i)` renders token i, `last(i)` the final one."""
        self.log.append(served)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        n, k = served.max_tokens, self.tokens_per_chunk
        # Token 0 alone at arrival + TTFT, then groups of k, each written when its last token is due.
        groups = [[0]] + [list(range(i, min(i + k, n))) for i in range(1, n, k)]
        first = served.arrived_s + self.ttft_s
        for g, group in enumerate(groups):
            delay = first + group[-1] * self.itl_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            data = b"".join(last(i) if i == n - 1 else event(i) for i in group)
            await resp.write((head if g == 0 else b"") + data + (tail if group[-1] == n - 1 else b""))
            served.written_s.append(time.perf_counter())
            served.tokens += len(group)
        await resp.write_eof()
        return resp

    async def _tgi(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        body = await request.json()
        prompt, n = body["inputs"], int(body["parameters"]["max_new_tokens"])
        served = Served("/generate_stream", prompt, len(prompt.split()), n, arrived)

        def event(i: int) -> bytes:
            return b"data:" + json.dumps({"index": i + 1, "token": {"id": i, "text": " w", "special": False},
                                          "generated_text": None, "details": None}).encode() + b"\n\n"

        def last(i: int) -> bytes:
            details = {"finish_reason": "length", "generated_tokens": n, "input_length": served.input_tokens}
            return b"data:" + json.dumps({"index": i + 1, "token": {"id": i, "text": " w", "special": False},
                                          "generated_text": " w" * n, "details": details}).encode() + b"\n\n"

        return await self._paced(request, served, event, last)

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        n = int(body["max_tokens"])
        served = Served(request.path, prompt, len(prompt.split()), n, arrived)

        def chunk(choice: dict[str, Any], **extra: Any) -> bytes:
            data = {"id": "cmpl-pacing", "object": "chat.completion.chunk" if chat else "text_completion",
                    "model": body.get("model", ""), "choices": [choice], **extra}
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        def event(i: int, finish: str | None = None) -> bytes:
            text = {"delta": {"content": " w"}} if chat else {"text": " w"}
            return chunk({"index": 0, **text, "finish_reason": finish})

        usage = {"prompt_tokens": served.input_tokens, "completion_tokens": n,
                 "total_tokens": served.input_tokens + n}
        tail = b""
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = b"data: " + json.dumps({"id": "cmpl-pacing", "choices": [], "usage": usage}).encode() + b"\n\n"
        head = chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}) \
            if chat else b""
        return await self._paced(request, served, event, lambda i: event(i, "length"), head,
                                 tail + b"data: [DONE]\n\n")

    async def _log(self, request: web.Request) -> web.Response:
        return web.json_response([asdict(s) for s in self.log])

    async def _metrics(self, request: web.Request) -> web.Response:
        """vLLM-style Prometheus metrics of the finished requests (vLLM 0.11+ names, labels and _total)."""
        done = [s for s in self.log if s.tokens == s.max_tokens and s.written_s]
        labels = 'engine="0",model_name="pacing"'
        lines = []
        for name, values in (("vllm:e2e_request_latency_seconds", [s.written_s[-1] - s.arrived_s for s in done]),
                             ("vllm:time_to_first_token_seconds", [s.ttft_s for s in done])):
            lines += [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
            for edge in (0.1, 1.0, 10.0, float("inf")):
                le = "+Inf" if edge == float("inf") else f"{edge}"
                lines.append(f'{name}_bucket{{{labels},le="{le}"}} {sum(v <= edge for v in values)}.0')
            lines += [f"{name}_count{{{labels}}} {len(values)}.0", f"{name}_sum{{{labels}}} {sum(values)!r}"]
        counters = (("vllm:request_success_total", len(done), ',finished_reason="length"'),
                    ("vllm:prompt_tokens_total", sum(s.input_tokens for s in done), ""),
                    ("vllm:generation_tokens_total", sum(s.tokens for s in done), ""))
        for name, value, extra in counters:
            lines += [f"# TYPE {name.removesuffix('_total')} counter", f"{name}{{{labels}{extra}}} {value}.0"]
        lines += ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} 0.0"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


@dataclass
class Remote:
    """A pacing server in a child process."""

    url: str

    def log(self) -> list[Served]:
        """Every request it has served so far."""
        with urllib.request.urlopen(f"{self.url}/log", timeout=30) as reply:
            return [Served(**item) for item in json.load(reply)]


SERVER_NICE = -5  # the emulator's: ahead of the load generator when allowed (root or CAP_SYS_NICE)


@contextlib.contextmanager
def pacing_server_process(*, itl_s: float = 0.02, ttft_s: float = 0.05, tokens_per_chunk: int = 1
                          ) -> Iterator[Remote]:
    """Run a PacingServer in a child process on a free loopback port; stop it on exit."""
    # Its own session, reniced where allowed, as the emulator's child process is (sagellm/emulator/process.py): the
    # kernel shares CPU between sessions (autogroups) before it looks at nice, and a server in the client's session
    # shared one session's share with the load it is the reference for (on a busy machine its accept queue and
    # event loop then delayed requests by hundreds of ms, which the client's TTFT counts). It exits when its
    # parent does.
    proc = subprocess.Popen([sys.executable, str(Path(__file__)), "--itl-s", str(itl_s), "--ttft-s", str(ttft_s),
                             "--tokens-per-chunk", str(tokens_per_chunk), "--parent-pid", str(os.getpid())],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PGRP, proc.pid, SERVER_NICE)
    with contextlib.suppress(OSError):
        Path(f"/proc/{proc.pid}/autogroup").write_text(str(SERVER_NICE))
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the pacing server did not start (exit {proc.poll()})")
        yield Remote(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    """Child-process entry: serve until terminated; the first line on stdout is the URL."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--itl-s", type=float, default=0.02)
    parser.add_argument("--ttft-s", type=float, default=0.05)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--parent-pid", type=int, help="exit once this process is gone (its own session: no SIGHUP)")
    args = parser.parse_args()

    async def serve() -> None:
        server = PacingServer(itl_s=args.itl_s, ttft_s=args.ttft_s, tokens_per_chunk=args.tokens_per_chunk)
        print(await server.start(), flush=True)
        try:
            while args.parent_pid is None or os.getppid() == args.parent_pid:
                await asyncio.sleep(1.0)
        finally:
            await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
