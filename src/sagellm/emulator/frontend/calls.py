"""One admitted request (the copy serving it, its sequence, the server-side timings) and its reply as the pinned
server writes it: the content type and the body pieces, token by token or whole, per API (TGI/LMI, OpenAI)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from sagellm.emulator.frontend import formats
from sagellm.emulator.frontend.formats import Ask
from sagellm.emulator.serving.copies import CopyEngine, ModelServer, Sequence
from sagellm.engines import Engine, ErrorReply

SERVER_TTFT_HEADER = "X-Sagellm-Server-Ttft-S"
SERVER_E2E_HEADER = "X-Sagellm-Server-E2e-S"
# When the request reached the emulator (wall seconds since it began serving), on every admitted reply: the
# arrivals a prediction replays (a client's own send times are a few ms off); the engine saw each its front-end
# latency later, as the simulation has it.
SERVER_ARRIVED_HEADER = "X-Sagellm-Server-Arrived-S"
SERVER_TTFT_DETAIL = "sagellm_server_ttft_s"
SERVER_E2E_DETAIL = "sagellm_server_e2e_s"
SSE = "text/event-stream"
JSON = "application/json"


@dataclass(frozen=True)
class Reply:
    """A whole container reply (an error, or a refused stream that is still HTTP 200)."""

    status: int
    content_type: str
    body: bytes


def reply_of(refusal: ErrorReply) -> Reply:
    """The engine's error reply as a whole container reply."""
    return Reply(refusal.status, refusal.content_type, refusal.body)


class Call:
    """One admitted request: the copy serving it, its sequence, and the server-side timings."""

    __slots__ = ("arrived_s", "ask", "copy", "e2e_s", "model", "origin_s", "seq", "ttft_s")

    def __init__(self, model: ModelServer, ask: Ask, arrived_s: float, deadline_s: float | None,
                 origin_s: float = 0.0, body: bytes | None = None):
        self.model = model
        self.ask = ask
        self.origin_s = origin_s  # when the emulator began serving, on the arrival's clock
        self.copy: CopyEngine
        self.seq: Sequence
        prefix, prefix_key = model.prefix_of(ask.text, body)
        self.copy, self.seq = model.submit(ask.input_tokens, ask.max_new_tokens, deadline_s, arrived_s, prefix,
                                           prefix_key)
        # When it reached the emulator, on its copy's clock: its engine saw it the front end's latency later, and
        # its TTFT and e2e count from here, as a client's (and `plan`'s) do.
        self.arrived_s = self.seq.arrived_s - model.front_end_s
        # Before the copy's next turn (this runs on the event loop): its reply's blocks are cached by their text.
        self.seq.reply_segments = model.reply_segments(ask.text, formats.generated_text)
        self.ttft_s: float | None = None
        self.e2e_s: float | None = None

    def timings(self) -> dict[str, float]:
        """The emulator's own TTFT and e2e (schedule seconds), for details and final chunks."""
        out = {}
        if self.ttft_s is not None:
            out[SERVER_TTFT_DETAIL] = round(self.ttft_s, 6)
        if self.e2e_s is not None:
            out[SERVER_E2E_DETAIL] = round(self.e2e_s, 6)
        return out

    def arrival_header(self) -> dict[str, str]:
        """When the request arrived, on its copy's clock in seconds since the emulator began serving (every
        admitted reply)."""
        return {SERVER_ARRIVED_HEADER: f"{self.arrived_s - self.origin_s:.6f}"}

    def timing_headers(self) -> dict[str, str]:
        """The same timings as response headers, and the arrival (non-streamed replies)."""
        return {SERVER_TTFT_HEADER: f"{self.ttft_s:.6f}", SERVER_E2E_HEADER: f"{self.e2e_s:.6f}",
                **self.arrival_header()}

    async def finish(self) -> int:
        """Wait for the whole generation (non-streamed replies); stamp the timings."""
        async for _ in self.seq.progress():
            pass
        self.first_chunk()
        self.last_chunk()
        return self.seq.generated

    def first_chunk(self) -> None:
        """The first token is about to be written: stamp its time on the schedule."""
        if self.ttft_s is None and self.seq.first_token_s is not None:
            self.ttft_s = self.seq.first_token_s - self.arrived_s

    def last_chunk(self) -> None:
        """The last token is about to be written: stamp its time on the schedule."""
        if self.seq.last_token_s is not None:
            self.e2e_s = self.seq.last_token_s - self.arrived_s

    def close(self) -> None:
        """Free the copy's slot if the request ends early (client gone, timeout, error)."""
        self.copy.cancel(self.seq)


def reply_chunks(call: Call, engine: Engine, *, as_list: bool = True) -> tuple[str, AsyncIterator[bytes]]:
    """The reply of the pinned server to an admitted request: content type and body pieces."""
    ask = call.ask
    model_id = call.model.deployment.model_id
    if ask.api != "generate":
        if ask.stream:
            return SSE, _openai_sse(call, model_id)
        return JSON, _whole(call, lambda n: formats.openai_completion(
            ask.api, _openai_id(ask.api), model_id, int(time.time()), n, ask.input_tokens, call.timings()))
    if ask.stream:
        return engine.stream_content_type, _token_events(
            call, lambda i: engine.stream_token(i, formats.token(i)),
            lambda i: engine.stream_last(i, formats.token(i), formats.generated_text(i + 1),
                                         _details(call, i + 1)))

    def body(n: int) -> object:
        details = _details(call, n)
        tokens = [formats.token(i) for i in range(n)] if details is not None else []
        return engine.generate_body(formats.generated_text(n), details, tokens, invocations=as_list)

    return JSON, _whole(call, body)


def _details(call: Call, n_tokens: int) -> dict[str, object] | None:
    """TGI's (and LMI's) `details` with the emulator's timings, when the request asked for details."""
    return formats.generate_details(n_tokens, call.ask.input_tokens, call.timings()) if call.ask.details else None


async def _token_events(call: Call, token: Callable[[int], bytes], last: Callable[[int], bytes]
                        ) -> AsyncIterator[bytes]:
    """One event per token as the engine produces it; the last is rendered after stamping the e2e time."""
    sent = 0
    final = call.seq.max_new_tokens - 1
    async for n in call.seq.progress():
        call.first_chunk()
        for i in range(sent, n):
            if i < final:
                yield token(i)
            else:
                call.last_chunk()
                yield last(i)
        sent = n


async def _whole(call: Call, render: Callable[[int], object]) -> AsyncIterator[bytes]:
    """A non-streamed reply: wait for every token, then render the body once."""
    n = await call.finish()
    yield json.dumps(render(n)).encode()


def _openai_id(api: str) -> str:
    return f"{'chatcmpl' if api == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"


async def _openai_sse(call: Call, model_id: str) -> AsyncIterator[bytes]:
    """OpenAI stream chunks (a chat role chunk first), the usage chunk if asked for, then `[DONE]`."""
    api, request_id, created = call.ask.api, _openai_id(call.ask.api), int(time.time())
    if api == "chat":
        yield formats.openai_chunk(api, request_id, model_id, created, None)
    async for event in _token_events(
            call, lambda i: formats.openai_chunk(api, request_id, model_id, created, i),
            lambda i: formats.openai_chunk(api, request_id, model_id, created, i, last=True,
                                           timings=call.timings())):
        yield event
    if call.ask.include_usage:
        yield formats.openai_usage_chunk(api, request_id, model_id, created, call.seq.generated,
                                         call.ask.input_tokens)
    yield formats.OPENAI_DONE
