"""The http target against a server that misbehaves the way real ones do (what the emulator never does)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pytest
from aiohttp import web

from bench_helpers import request_lines, results_of, sagellm


class StreamCutter:
    """OpenAI completions that end the running stream when another request arrives, as llama.cpp's server
    (llama-cpp-python) does by default: `[DONE]` right after the last token sent, no `finish_reason`.

    A stand-in for the real llama.cpp server, whose build costs ~800 CPU-seconds; it runs on loopback in
    a thread of the test process with its own event loop.
    """

    def __init__(self) -> None:
        self.running: asyncio.Event | None = None  # the interrupt flag of the stream being sent
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.running is not None:
            self.running.set()
        interrupt = self.running = asyncio.Event()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def event(data: dict[str, object]) -> bytes:
            return f"data: {json.dumps(data)}\n\n".encode()

        for _ in range(body["max_tokens"]):
            if interrupt.is_set():
                break
            await resp.write(event({"choices": [{"index": 0, "text": " tok", "finish_reason": None}]}))
            await asyncio.sleep(0.005)
        else:
            await resp.write(event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
        await resp.write(b"data: [DONE]\n\n")
        if self.running is interrupt:
            self.running = None
        return resp

    def __enter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        runner = web.AppRunner(app)
        self._thread.start()

        async def start() -> int:
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            return int(runner.addresses[0][1])

        port = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        self.url, self._runner = f"http://127.0.0.1:{port}", runner
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def cutter() -> Iterator[StreamCutter]:
    with StreamCutter() as server:
        yield server


@pytest.mark.integration
def test_a_server_that_cuts_streams_is_a_target_failure(cutter: StreamCutter, tmp_path: Path) -> None:
    ran = sagellm("bench", "--target", "http", "--api", "openai", "--url", cutter.url, "--served-model", "m",
                  "--input-tokens", "8", "--output-tokens", "20", "--concurrency", "1,2",
                  "--requests-per-level", "6", "--warmup", "0", "--out", str(tmp_path))

    assert ran.returncode == 3, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    assert "the target failed" in ran.stderr and "at concurrency 2: the server cut the stream" in ran.stderr
    records = request_lines(tmp_path)
    alone = [r for r in records if r["concurrency"] == 1]
    assert len(alone) == 6 and all(r["ok"] and r["output_tokens"] == 20 for r in alone)  # one at a time: whole
    cut = [r for r in records if not r["ok"]]
    assert cut and all(r["concurrency"] == 2 and r["error_kind"] == "other" for r in cut)
    level = results_of(tmp_path)["levels"][1]
    assert level["errors"]["other"] > 0
    assert "No request failed" not in (tmp_path / "report.md").read_text()
