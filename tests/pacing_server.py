"""A real HTTP server on loopback whose ground truth is known: it paces tokens at a set ITL and logs, per
request, what it saw and when it wrote. Shared by the bench's tests; reuse it rather than writing another.

Speaks the streaming formats the bench reads:
- TGI `POST /generate_stream` (`data:{...}` events, `details` with `generated_tokens` and `input_length`
  on the last one);
- OpenAI `POST /v1/completions` and `POST /v1/chat/completions` with `stream: true` (`data: {...}`
  chunks, `usage` in a chunk of its own when `stream_options.include_usage` is set, then `[DONE]`;
  chat opens with a role-only chunk, as vLLM does).
Input tokens are counted as whitespace-separated words (the emulator's rule). Also `GET /log` (what it served)
and `GET /metrics` (vLLM-style Prometheus); any other route is a 404. HTTP/1.1 with keep-alive, request bodies
with a Content-Length (what aiohttp and urllib send), responses streamed in chunked encoding.

Pacing: a request arrives when its last byte is read (`Served.arrived_s`); the first token is written `ttft_s`
after that, alone; later tokens are due every `itl_s`, written `tokens_per_chunk` to a write (one network
chunk), each write when the last token in it is due. So the per-request ITL, (last write − first write) ÷
(tokens − 1), is `itl_s` whatever the chunking, while a client that pools token gaps sees k − 1 of every k gaps
as 0 ms. Writes are chained on deadlines (a late wake-up is made up on the next token), so the pace holds under
load; `Served` records the actual write times, which are the ground truth to compare a client against.

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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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


Events = tuple[bytes, Callable[[int], bytes], Callable[[int], bytes], bytes]  # head, event(i), last(i), tail


class PacingServer:
    """The server, its settings and its log: HTTP/1.1 on a bare asyncio protocol, each stream paced by timers."""

    # Not aiohttp's server: it is the yardstick, not the product. Its request parsing, task per request and
    # coroutine per write cost about a core at 512 paced streams (0.9 of one, benchmarks/user_overhead.py, quiet
    # machine), so in a wave of sends its accept queue delayed requests by a hundred ms and more, which the client's
    # TTFT counted as the load generator's overhead. Here a request is parsed once its head and Content-Length body
    # are in, and each token write is one timer callback.

    def __init__(self, *, itl_s: float = 0.02, ttft_s: float = 0.05, tokens_per_chunk: int = 1):
        self.itl_s, self.ttft_s, self.tokens_per_chunk = itl_s, ttft_s, tokens_per_chunk
        self.log: list[Served] = []
        self._server: asyncio.Server | None = None
        self.connections: set[_Connection] = set()  # open ones, closed on stop
        self._tgi_events: dict[int, bytes] = {}  # token i's bare event: the same in every TGI stream

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen (port 0: a free one) and return the base URL."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, backlog=4096)
        return f"http://{host}:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        """Close the listener and every open stream."""
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()

    def route(self, method: str, path: str, body: bytes, arrived: float) -> tuple[Served, Events] | bytes:
        """A stream to pace (what was served, and its bytes), or a whole response."""
        if method == "POST" and path == "/generate_stream":
            return self._tgi(json.loads(body), arrived)
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return self._openai(path, json.loads(body), arrived)
        if method == "GET" and path == "/log":
            return _response(200, "application/json", json.dumps([asdict(s) for s in self.log]).encode())
        if method == "GET" and path == "/metrics":
            return _response(200, "text/plain; charset=utf-8", self._metrics().encode())
        return _response(404, "text/plain; charset=utf-8", b"404: Not Found")

    def _tgi(self, body: dict[str, Any], arrived: float) -> tuple[Served, Events]:
        prompt, n = body["inputs"], int(body["parameters"]["max_new_tokens"])
        served = Served("/generate_stream", prompt, len(prompt.split()), n, arrived)

        def event(i: int) -> bytes:
            if (data := self._tgi_events.get(i)) is None:
                data = self._tgi_events[i] = b"data:" + json.dumps(
                    {"index": i + 1, "token": {"id": i, "text": " w", "special": False}, "generated_text": None,
                     "details": None}).encode() + b"\n\n"
            return data

        def last(i: int) -> bytes:
            details = {"finish_reason": "length", "generated_tokens": n, "input_length": served.input_tokens}
            return b"data:" + json.dumps({"index": i + 1, "token": {"id": i, "text": " w", "special": False},
                                          "generated_text": " w" * n, "details": details}).encode() + b"\n\n"

        return served, (b"", event, last, b"")

    def _openai(self, path: str, body: dict[str, Any], arrived: float) -> tuple[Served, Events]:
        chat = path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        n = int(body["max_tokens"])
        served = Served(path, prompt, len(prompt.split()), n, arrived)

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
        return served, (head, event, lambda i: event(i, "length"), tail + b"data: [DONE]\n\n")

    def _metrics(self) -> str:
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
        return "\n".join(lines) + "\n"


def _response(status: int, content_type: str, body: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" \
              b"Transfer-Encoding: chunked\r\n\r\n"


class _Connection(asyncio.Protocol):
    """One client connection: requests parsed in turn (keep-alive), a stream's writes on the loop's timers."""

    def __init__(self, server: PacingServer):
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.keep_alive = True
        self.timer: asyncio.TimerHandle | None = None  # the stream's next write; None: no stream running
        self.streaming = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        arrived = time.perf_counter()  # the request is in: what the server's TTFT counts from
        self.buffer += data
        self._serve_next(arrived)

    def _serve_next(self, arrived: float) -> None:
        """Serve the request now complete in the buffer, if any (one at a time on a connection)."""
        if self.streaming or self.transport is None:
            return
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        try:
            request_line, *header_lines = self.buffer[:head_end].decode("latin-1").split("\r\n")
            method, target, version = request_line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self.transport.write(_response(400, "text/plain; charset=utf-8", b"400: Bad Request"))
            self.transport.close()
            return
        if len(self.buffer) < head_end + 4 + length:
            return
        body = bytes(self.buffer[head_end + 4: head_end + 4 + length])
        del self.buffer[: head_end + 4 + length]
        connection = headers.get("connection", "").lower()
        self.keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
        routed = self.server.route(method, target.split("?", 1)[0], body, arrived)
        if isinstance(routed, bytes):
            self.transport.write(routed)
            self._finished()
            return
        served, events = routed
        self.server.log.append(served)
        self.transport.write(STREAM_HEAD)  # headers at once, as TGI and vLLM send theirs
        self.streaming = True
        _Stream(self, served, events).schedule()

    def _finished(self) -> None:
        """A response is complete: close, or serve what the client sent next."""
        self.streaming, self.timer = False, None
        if self.transport is None:
            return
        if not self.keep_alive:
            self.transport.close()
        elif self.buffer:
            self._serve_next(time.perf_counter())


class _Stream:
    """One paced response: token 0 alone at arrival + TTFT, then groups of k, each written when its last token is
    due; deadlines chained from the first, so a late wake-up is made up on the next token."""

    def __init__(self, connection: _Connection, served: Served, events: Events):
        server = connection.server
        self.connection, self.served, self.itl_s = connection, served, server.itl_s
        self.head, self.event, self.last, self.tail = events
        n, k = served.max_tokens, server.tokens_per_chunk
        self.groups = [[0]] + [list(range(i, min(i + k, n))) for i in range(1, n, k)]
        self.first_s = served.arrived_s + server.ttft_s
        self.next = 0

    def schedule(self) -> None:
        due = self.first_s + self.groups[self.next][-1] * self.itl_s
        self.connection.timer = self.connection.loop.call_later(max(0.0, due - time.perf_counter()), self.write)

    def write(self) -> None:
        transport = self.connection.transport
        if transport is None:
            return
        group, n = self.groups[self.next], self.served.max_tokens
        if (delay := self.first_s + group[-1] * self.itl_s - time.perf_counter()) > 0:  # woken a little early
            self.connection.timer = self.connection.loop.call_later(delay, self.write)
            return
        data = b"".join(self.last(i) if i == n - 1 else self.event(i) for i in group)
        data = (self.head if self.next == 0 else b"") + data + (self.tail if group[-1] == n - 1 else b"")
        transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        self.served.written_s.append(time.perf_counter())
        self.served.tokens += len(group)
        self.next += 1
        if self.next < len(self.groups):
            self.schedule()
        else:
            transport.write(b"0\r\n\r\n")
            self.connection._finished()


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
