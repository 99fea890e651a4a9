"""What comes back from an endpoint: SSE and AWS event-stream framing, TGI and OpenAI stream events (timed
and counted in one place, into the request's record), and error classification."""

from __future__ import annotations

import json
from typing import Any

from sagellm.results.records import RequestRecord
from sagellm.results.schema import ErrorKind

# Headers and stream-detail keys in which the emulator reports its own timings.
SERVER_TTFT_HEADER = "X-Sagellm-Server-Ttft-S"
SERVER_E2E_HEADER = "X-Sagellm-Server-E2e-S"
SERVER_ARRIVED_HEADER = "X-Sagellm-Server-Arrived-S"
SERVER_TTFT_DETAIL = "sagellm_server_ttft_s"
SERVER_E2E_DETAIL = "sagellm_server_e2e_s"

INFERENCE_COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"


class Failed(Exception):
    """Ends an attempt with an error of a known kind (raised inside the stream parsing)."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None):
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.status = status


# ---------------------------------------------------------------------------------------------------
# Error classification, shared by every transport


def _kind_from_text(text: str) -> ErrorKind | None:
    low = text.lower()
    if "overloaded" in low:
        return "overloaded"
    if "timed out" in low or "timeout" in low or "timeexceeded" in low:
        return "timeout"
    if "validation" in low:
        return "validation"
    return None


def _kind_from_status(status: int) -> ErrorKind:
    if status == 429:
        return "overloaded"  # TGI's admission limit; vLLM/OpenAI-compatible servers use it the same way
    if status in (408, 504):
        return "timeout"
    if status in (400, 413, 422):
        return "validation"
    return "other"


def _error_text(body: str) -> tuple[str, str | None]:
    """The message and the error type from an error body (TGI, OpenAI, vLLM or AWS JSON; or plain text)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:500], None
    if not isinstance(data, dict):
        return body.strip()[:500], None
    err = data.get("error")
    if isinstance(err, dict):  # OpenAI: {"error": {"message", "type"}}
        return str(err.get("message", err)), err.get("type")
    if err is not None:  # TGI: {"error", "error_type"}
        return str(err), data.get("error_type")
    msg = data.get("message") or data.get("Message") or body.strip()[:500]
    return str(msg), data.get("type") or data.get("__type")


def classify_http_error(status: int, body: str) -> tuple[ErrorKind, str]:
    """Kind and message of an HTTP error from a TGI or OpenAI-compatible server."""
    message, error_type = _error_text(body)
    kind = _kind_from_text(error_type or "") or _kind_from_status(status)
    return kind, f"HTTP {status}: {message}"


def classify_sagemaker_error(status: int, error_code: str | None, body: str) -> tuple[ErrorKind, str]:
    """Kind and message of an error from the SageMaker runtime (before the stream starts).

    ThrottlingException is the runtime's own rate limit (`throttled`, retried). ModelError (HTTP 424)
    wraps what the container answered: TGI's 429 "Model is overloaded" → `overloaded`, its 422/400 →
    `validation`, and the 60 s invocation timeout ("timed out while waiting for a response") → `timeout`.
    """
    code = (error_code or "").split(":")[0] or None
    message, body_type = _error_text(body)
    code = code or (body_type.split("#")[-1] if body_type else None)
    text = f"HTTP {status} {code or ''}: {message}".replace(" :", ":")
    if code == "ThrottlingException" or (status == 429 and code in (None, "ThrottlingException")):
        return "throttled", text
    if code == "ValidationError":
        return "validation", text
    if code == "ModelError" or status == 424:
        return _model_error_kind(body, message), text
    return _kind_from_text(message) or ("timeout" if status in (408, 504) else "other"), text


def _model_error_kind(body: str, message: str) -> ErrorKind:
    """The kind of what the container answered inside a ModelError: its own status, or its words."""
    original: int | None = None
    original_message = ""
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            original = int(data["OriginalStatusCode"]) if "OriginalStatusCode" in data else None
            original_message = str(data.get("OriginalMessage", ""))
    except (ValueError, TypeError):
        pass
    by_text = _kind_from_text(f"{original_message} {message}")
    if by_text == "timeout":
        return "timeout"
    if original is not None and original != 0:
        return _kind_from_status(original) if original != 424 else (by_text or "other")
    return by_text or "other"


# ---------------------------------------------------------------------------------------------------
# Stream parsing, shared by every transport


class StreamState:
    """Timing and token accounting of one streamed response: its timings go straight into its record."""

    __slots__ = ("done", "events", "gaps", "input_tokens", "last", "output_tokens", "record", "reply", "t0")

    def __init__(self, t0: float, reply: list[str] | None = None):
        self.t0 = t0  # perf_counter() when the attempt began
        self.reply = reply  # where the reply's text pieces go, if anyone keeps them (a conversation)
        self.record = RequestRecord(start_s=t0)  # on perf_counter()'s clock until the level places it
        self.gaps = self.record.token_gaps_s  # appended to once per token: one lookup fewer
        self.last: float | None = None
        self.events = 0
        self.output_tokens: int | None = None
        self.input_tokens: int | None = None
        self.done = False

    def token(self, now: float) -> None:
        """One token event arrived at `now`."""
        if self.last is None:
            self.record.ttft_s = now - self.t0
        else:
            self.gaps.append(now - self.last)
        self.last = now
        self.events += 1

    def finish(self, end: float, *, ok: bool, status: int | None, error_kind: ErrorKind | None = None,
               error: str | None = None) -> RequestRecord:
        """The request's record, ended at `end`. A failed one keeps its partial timings (TTFT of a stream that
        broke later is still informative), not its output tokens: only a finished request has a server count."""
        r = self.record
        r.ok, r.e2e_s, r.status, r.error_kind, r.error = ok, end - self.t0, status, error_kind, error
        if ok:
            r.output_tokens = self.output_tokens if self.output_tokens is not None else self.events
        if self.input_tokens is not None:
            r.input_tokens, r.input_tokens_by = self.input_tokens, "server"
        return r

    def server_timings(self, source: Any) -> None:
        """Read the server's self-reported timings from headers or a details dict, where present."""
        for attr, key in (("server_ttft_s", SERVER_TTFT_HEADER), ("server_e2e_s", SERVER_E2E_HEADER),
                          ("server_arrived_s", SERVER_ARRIVED_HEADER),
                          ("server_ttft_s", SERVER_TTFT_DETAIL), ("server_e2e_s", SERVER_E2E_DETAIL)):
            value = source.get(key)
            if value is not None:
                try:
                    setattr(self.record, attr, float(value))
                except (TypeError, ValueError):
                    pass


class SseLines:
    """Splits a byte stream into SSE `data:` payloads (or JSON lines); a line may arrive split across chunks.

    Each `data:` line is dispatched as soon as it is complete (the servers spoken to here send one-line
    JSON data fields), so a token is timed when its line arrives, not when the blank line after it does.
    """

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the payloads of the `data:` lines completed by them."""
        data = self._rest + chunk if self._rest else chunk
        lines = data.split(b"\n")
        self._rest = lines.pop()
        out = []
        for line in lines:
            if not line:  # the blank line that ends each event: half of an SSE stream's lines
                continue
            if line.startswith(b"data:"):
                out.append(line[5:].strip())
            elif line.startswith(b"{"):  # LMI streams JSON lines (application/jsonlines), not SSE
                out.append(line.strip())
        return out

    @property
    def pending(self) -> bool:
        """Whether an incomplete non-empty line is buffered."""
        return bool(self._rest.strip())


class EventStreamLines:
    """Unwraps AWS event-stream messages (SageMaker response streaming) into the SSE payloads they carry.

    PayloadPart bytes are TGI's SSE output cut at arbitrary points, so they go through `SseLines`.
    Exception and error messages end the attempt. A truncated last frame is an error (boto3 drops it).
    """

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer, ParserError

        self._buffer = EventStreamBuffer()
        self._parser_error = ParserError  # imported once here, not on every chunk
        self._lines = SseLines()
        self._fed = 0
        self._parsed = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer.add_data(chunk)
        self._fed += len(chunk)
        out: list[bytes] = []
        try:
            for message in self._buffer:
                self._parsed += message.prelude.total_length
                headers = message.headers
                kind = headers.get(":message-type")
                if kind == "event":
                    if headers.get(":event-type") == "PayloadPart":
                        out.extend(self._lines.feed(message.payload))
                    # Other event types (none today) carry no tokens.
                elif kind == "exception":
                    self._raise_exception(headers.get(":exception-type", "exception"), message.payload)
                else:
                    code = headers.get(":error-code", "error")
                    raise Failed(_kind_from_text(f"{code} {headers.get(':error-message', '')}") or "other",
                                  f"{code}: {headers.get(':error-message', '')}")
        except self._parser_error as exc:
            raise Failed("other", f"malformed event stream: {type(exc).__name__}: {exc}") from None
        return out

    @staticmethod
    def _raise_exception(exception_type: str, payload: bytes) -> None:
        message, _ = _error_text(payload.decode("utf-8", "replace"))
        try:
            error_code = json.loads(payload).get("ErrorCode")
        except (ValueError, AttributeError):
            error_code = None
        text = f"{exception_type}{f' ({error_code})' if error_code else ''}: {message}"
        kind = "other" if exception_type == "InternalStreamFailure" else _kind_from_text(message) or "other"
        raise Failed(kind, text)

    def close(self) -> None:
        """Called at the end of the body: a partial frame left over is an error."""
        if self._fed != self._parsed:
            raise Failed("other", f"event stream truncated: {self._fed - self._parsed} bytes of an "
                                   "incomplete frame at the end of the response")


def tgi_event(st: StreamState, event: dict[str, Any], now: float) -> None:
    """One TGI `/generate_stream` event: a token, and on the last one `details`."""
    if "error" in event:
        message = str(event["error"])
        raise Failed(_kind_from_text(f"{event.get('error_type', '')} {message}") or "other", message)
    token = event.get("token")
    if token is not None:
        st.token(now)
        if st.reply is not None and not token.get("special"):
            st.reply.append(str(token.get("text", "")))
    details = event.get("details")
    if details:
        tokens = details.get("generated_tokens")
        st.output_tokens = int(tokens) if tokens is not None else None
        if details.get("input_length") is not None:
            st.input_tokens = int(details["input_length"])
        st.server_timings(details)
    if details or event.get("generated_text") is not None:
        st.done = True


def tgi_plain_token(data: bytes) -> bool:
    """Whether a TGI `/generate_stream` event is a bare token (a token, no `details`, no `generated_text`): all
    `tgi_event` would do with it is count it, so it need not be decoded (the JSON decode was the largest part of
    the client's per-token cost). Structural keys only: a JSON string cannot hold an unescaped quote. TGI writes
    compact JSON (serde: `"details":null`); Python servers often write `"details": null`."""
    return (b'"token":' in data and (b'"details":null' in data or b'"details": null' in data)
            and (b'"generated_text":null' in data or b'"generated_text": null' in data) and b'"error"' not in data)


def openai_event(st: StreamState, event: dict[str, Any], now: float) -> None:
    """One OpenAI-style stream chunk, completions (`choices[].text`) or chat (`choices[].delta.content`):
    a token event, and `usage` where the server sends it (`include_usage`; TGI on its last token chunk,
    vLLM in a chunk of its own)."""
    if "error" in event:
        err = event["error"]
        message = str(err.get("message", err)) if isinstance(err, dict) else str(err)
        raise Failed(_kind_from_text(message) or "other", message)
    choices = event.get("choices") or []
    for choice in choices:
        delta = choice.get("delta")
        text = choice.get("text") if delta is None else delta.get("content")
        # An empty text still counts as a token (a token may decode to nothing), but not chat's opening
        # role-only chunk (vLLM sends `{"role": "assistant", "content": ""}` before the first token).
        if text or (choice.get("finish_reason") is None and not (delta or {}).get("role")):
            st.token(now)
            if st.reply is not None and text:
                st.reply.append(str(text))
            break
    usage = event.get("usage")
    if usage:
        if usage.get("completion_tokens") is not None:
            st.output_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            st.input_tokens = int(usage["prompt_tokens"])
    st.server_timings(event)
    if any(choice.get("finish_reason") for choice in choices):
        st.done = True
