"""What the emulator reads and writes: the token-count rule, request bodies, generated tokens, OpenAI replies.

Token rule (no tokenizer): a prompt's token count is its number of whitespace-separated words
(`len(text.split())`); an OpenAI prompt given as a list of token ids counts one token per id.
`make_prompt(n)` builds a prompt of exactly n such tokens. Generated tokens are deterministic filler
words, each with a leading space, so generated text counts back to the same number of tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sagellm.emulator.serving.copies import RequestError
from sagellm.engines import Token

# A fixed sentence repeated to length, like the published benchmarks' prompts (method.md §5).
_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "again")
_TOKEN_ID_BASE = 1000


def count_tokens(text: str) -> int:
    """Tokens in `text` by the emulator's rule: whitespace-separated words."""
    return len(text.split())


def make_prompt(n_tokens: int) -> str:
    """A prompt the emulator counts as exactly `n_tokens` tokens."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(n_tokens))


def token_text(index: int) -> str:
    """Text of the generated token at `index` (0-based)."""
    return " " + _WORDS[index % len(_WORDS)]


def generated_text(n_tokens: int) -> str:
    """The whole text of `n_tokens` generated tokens."""
    return "".join(token_text(i) for i in range(n_tokens))


@dataclass(frozen=True)
class Ask:
    """A parsed generation request, whatever API it came through."""

    input_tokens: int
    max_new_tokens: int | None  # None: the server's default (up to the total-token cap)
    stream: bool
    details: bool  # TGI/LMI: include `details` (token counts, and the emulator's own timings)
    api: str = "generate"  # generate (TGI/LMI body) | completions | chat (OpenAI bodies)
    include_usage: bool = False  # OpenAI stream_options.include_usage: a final usage chunk
    model: str | None = None  # OpenAI `model`
    text: str = ""  # the prompt's text as counted (chat: the messages' texts, space-joined): its prefix segments


def _invalid(message: str) -> RequestError:
    return RequestError(422, "validation", f"Input validation error: {message}")


def _positive_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"`{name}` must be an integer, got {value!r}")
    return value


def parse(raw: bytes, apis: tuple[str, ...] = ("generate", "chat", "completions")) -> Ask:
    """A body as a SageMaker `/invocations` takes it: chat, completions or generate, of those the server's `apis`
    has (TGI and LMI all three, vLLM chat and completions, SGLang chat)."""
    body = _json_object(raw)
    api = "chat" if "messages" in body else "completions" if "prompt" in body else "generate"
    if api not in apis:
        raise _invalid(f"this server's /invocations takes {' or '.join(apis)} bodies, not {api}")
    return {"chat": _chat, "completions": _completions, "generate": _generate}[api](body)


def parse_tgi(raw: bytes) -> Ask:
    """TGI's generate body: `{"inputs": str, "parameters": {"max_new_tokens", "details"}, "stream"}`."""
    return _generate(_json_object(raw))


def parse_openai(raw: bytes) -> Ask:
    """OpenAI's completions body: `{"prompt": str | [int], "max_tokens", "stream", "stream_options"}`."""
    return _completions(_json_object(raw))


def parse_chat(raw: bytes) -> Ask:
    """OpenAI's chat body: `{"messages": [{"role", "content"}], "max_completion_tokens" | "max_tokens", …}`."""
    return _chat(_json_object(raw))


def _generate(body: dict[str, Any]) -> Ask:
    inputs = body.get("inputs")
    if not isinstance(inputs, str):
        raise _invalid("`inputs` must be a string")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise _invalid("`parameters` must be an object")
    return Ask(
        input_tokens=count_tokens(inputs),
        max_new_tokens=_positive_int(params.get("max_new_tokens"), "max_new_tokens"),
        stream=bool(body.get("stream", False)),
        details=bool(params.get("details", False)),
        text=inputs,
    )


def _completions(body: dict[str, Any]) -> Ask:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        tokens = len(prompt)
    elif isinstance(prompt, str):
        tokens = count_tokens(prompt)
    else:
        raise _invalid("`prompt` must be a string or a list of token ids")
    max_tokens = _positive_int(body.get("max_tokens"), "max_tokens")
    # OpenAI's (and vLLM's) default for completions is 16 tokens.
    return Ask(input_tokens=tokens, max_new_tokens=16 if max_tokens is None else max_tokens,
               stream=bool(body.get("stream", False)), details=True, api="completions",
               include_usage=_include_usage(body), model=body.get("model"),
               text=prompt if isinstance(prompt, str) else "")


def _chat(body: dict[str, Any]) -> Ask:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("`messages` must be a non-empty list")
    tokens = 0
    texts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        parts = content if isinstance(content, list) else [{"text": content}]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(text, str):
                raise _invalid("each message needs a text `content`")
            tokens += count_tokens(text)
            texts.append(text)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    return Ask(input_tokens=tokens, max_new_tokens=_positive_int(limit, "max_completion_tokens"),
               stream=bool(body.get("stream", False)), details=True, api="chat",
               include_usage=_include_usage(body), model=body.get("model"), text=" ".join(texts))


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise _invalid(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object")
    return body


def sse(data: dict[str, Any], *, space: bool = False) -> bytes:
    """One server-sent event: TGI writes `data:{...}`, OpenAI servers `data: {...}`."""
    prefix = "data: " if space else "data:"
    return f"{prefix}{json.dumps(data, separators=(',', ':'))}\n\n".encode()


def token(index: int) -> Token:
    """The generated token at `index` (0-based), as the servers report it: id, text, log-probability."""
    return Token(_TOKEN_ID_BASE + index % len(_WORDS), token_text(index), -0.1)


def generate_details(n_tokens: int, input_tokens: int, timings: dict[str, float]) -> dict[str, Any]:
    """TGI's (and LMI's) `details` plus the emulator's own timings (`sagellm_server_ttft_s`, …_e2e_s)."""
    return {"finish_reason": "length", "generated_tokens": n_tokens, "seed": None,
            "input_length": input_tokens, **timings}


def openai_error(status: int, message: str) -> dict[str, Any]:
    """An error as vLLM's OpenAI server sends it: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": message, "type": _OPENAI_ERROR_TYPES.get(status, "BadRequestError"),
                      "param": None, "code": status}}


_OPENAI_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 413: "BadRequestError",
                       429: "RateLimitError", 503: "ServiceUnavailableError"}


def openai_completion(api: str, request_id: str, model: str, created: int, n_tokens: int, input_tokens: int,
                      timings: dict[str, float]) -> dict[str, Any]:
    """OpenAI's non-streamed completion (`api`: completions) or chat completion (`api`: chat)."""
    text = generated_text(n_tokens)
    choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                               "finish_reason": "length"} if api == "chat" else
                              {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
    return {"id": request_id, "object": "chat.completion" if api == "chat" else "text_completion",
            "created": created, "model": model, "choices": [choice], "usage": _usage(n_tokens, input_tokens),
            **timings}


def openai_chunk(api: str, request_id: str, model: str, created: int, index: int | None, *, last: bool = False,
                 timings: dict[str, float] | None = None) -> bytes:
    """One streamed chunk: token `index` (None: the chat role chunk); the last carries `finish_reason` and the
    emulator's timings."""
    chat = api == "chat"
    if chat:
        delta = {"role": "assistant", "content": ""} if index is None else {"content": token_text(index)}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
    else:
        choice = {"index": 0, "text": token_text(index or 0), "logprobs": None}
    choice["finish_reason"] = "length" if last else None
    data: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk" if chat else "text_completion",
                            "created": created, "model": model, "choices": [choice]}
    if last:
        data.update(timings or {})
    return sse(data, space=True)


def openai_usage_chunk(api: str, request_id: str, model: str, created: int, n_tokens: int,
                       input_tokens: int) -> bytes:
    """The final chunk `stream_options.include_usage` asks for: no choices, the usage."""
    return sse({"id": request_id, "object": "chat.completion.chunk" if api == "chat" else "text_completion",
                "created": created, "model": model, "choices": [], "usage": _usage(n_tokens, input_tokens)},
               space=True)


OPENAI_DONE = b"data: [DONE]\n\n"


def _usage(n_tokens: int, input_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": input_tokens, "completion_tokens": n_tokens,
            "total_tokens": input_tokens + n_tokens}
