"""What AWS's vLLM and SGLang SageMaker images share: every `SM_<X>_*` variable becomes a server flag, the
server queues instead of refusing, and `/invocations` takes OpenAI bodies and streams OpenAI SSE chunks.

The entrypoints' rule (aws/deep-learning-containers at e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0,
`scripts/docker/vllm/sagemaker_args.py` and `scripts/docker/sglang/sagemaker_entrypoint.sh`): a variable
`SM_VLLM_MAX_MODEL_LEN=4096` becomes `--max-model-len 4096` (the name after the prefix, lower case, `_` → `-`);
the value `true` becomes the bare flag and `false` drops it. Sources of every fact in docs/containers.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from sagellm.engines.engine import Engine, ErrorReply, Generation, Limits, Settings, Token, Variable, read_int

# The APIs a `/invocations` body may use (the emulator's `Ask.api` names).
CHAT, COMPLETIONS = "chat", "completions"


def variable_for(prefix: str, flag: str) -> str:
    """The environment variable the entrypoint turns into `flag`: `--max-model-len` → `SM_VLLM_MAX_MODEL_LEN`."""
    return prefix + flag.removeprefix("--").upper().replace("-", "_")


def flag_for(prefix: str, name: str) -> str:
    """The flag an `SM_<X>_*` variable becomes, as the entrypoint writes it."""
    return "--" + name.removeprefix(prefix).lower().replace("_", "-")


class OpenAiServer(Engine):
    """An OpenAI-compatible server behind an image whose entrypoint turns `prefix`-ed variables into flags."""

    prefix: str  # "SM_VLLM_"
    # The flag each Settings field sets (model_id, tensor_parallel, quantization, max_total_tokens,
    # max_batch_size, max_batch_prefill_tokens) and the settings only a profile's environment sets.
    flags: ClassVar[dict[str, str]]
    extra_flags: tuple[tuple[str, str], ...]  # (setting, flag) a profile may set itself
    always: ClassVar[dict[str, str]]  # flag → value every plan sets (not a Settings field)
    reads: frozenset[str]  # the plain names the image reads besides its prefix (the Hub token)
    model_aliases: tuple[str, ...] = ()  # other names the image reads the model id from
    generation_: Generation
    default_prefill_tokens: int  # the server's per-step token budget when its flag is unset
    default_running: int | None  # the server's running-sequence limit when unset (None: its KV pool decides)
    kv_block_tokens: int  # tokens per KV block (page) of its paged cache
    queues = True
    stream_content_type = "text/event-stream"  # `data: {...}` OpenAI chunks, then `data: [DONE]`

    def __init__(self) -> None:
        # Every flag the plan owns as its variable, then those only a profile sets.
        owned = [Variable(field.replace("_", " "), (variable_for(self.prefix, flag),
                                                    *(self.model_aliases if field == "model_id" else ())), field)
                 for field, flag in self.flags.items()]
        self.variables = (*owned, *(Variable(setting, (variable_for(self.prefix, flag),), None)
                                    for setting, flag in self.extra_flags))
        self.model_id_variables = owned[0].names

    def generation(self, version: str | None) -> Generation:
        """Every version sagellm models is one generation."""
        return self.generation_

    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """Both split long prompts over several steps of the per-step token budget."""
        return True

    def environment(self, s: Settings) -> dict[str, str]:
        """The plan's settings as the flags' variables; the running limit is the batch size, else admission."""
        running = s.max_batch_size or s.max_concurrent_requests
        values = {
            "model_id": s.model_id,
            "tensor_parallel": str(s.tensor_parallel),
            "max_total_tokens": str(s.max_total_tokens),
            "max_batch_size": str(running),
            # vLLM refuses to start with a step budget below its running limit (SchedulerConfig
            # verify_max_model_len: max_num_batched_tokens >= max_num_seqs); SGLang has no such rule.
            "max_batch_prefill_tokens": str(max(s.max_batch_prefill_tokens, running)),
        }
        if s.quantization != "none":
            values["quantization"] = s.quantization
        env = {variable_for(self.prefix, self.flags[field]): value for field, value in values.items()}
        return env | {variable_for(self.prefix, flag): value for flag, value in self.always.items()}

    def environment_errors(self, version: str, env: dict[str, str], where: Callable[[str], str]) -> list[str]:
        """Names the image neither turns into a flag nor reads itself."""
        return [f"{where(name)}: the {self.label} {version} image does not read it (it turns every {self.prefix}* "
                f"variable into a flag and reads {', '.join(sorted(self.reads))}); see docs/containers.md"
                for name in env if not name.startswith(self.prefix) and name not in self.reads]

    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """The context cap, the step budget, the running limit; it queues rather than refuses."""
        def flag(field: str, default: int) -> int:
            return read_int(env, variable_for(self.prefix, self.flags[field]), default)

        total = flag("max_total_tokens", context)
        running = flag("max_batch_size", 0) or self.default_running
        return Limits(max_input_tokens=total - 1, max_total_tokens=total,
                      max_batch_prefill_tokens=flag("max_batch_prefill_tokens", self.default_prefill_tokens),
                      max_batch_total_tokens=kv_tokens, max_concurrent_requests=None, max_batch_size=running,
                      kv_block_tokens=self.kv_block_tokens)

    # Neither server has TGI's generate API; the emulator refuses a generate body before it gets here
    # (`invocations` leaves it out), so these are never called.
    def generate_body(self, text: str, details: dict[str, Any] | None, tokens: Sequence[Token], *,
                      invocations: bool) -> Any:
        """No generate API."""
        raise NotImplementedError(f"{self.label} has no generate API")

    def stream_token(self, index: int, token: Token) -> bytes:
        """No generate API."""
        raise NotImplementedError(f"{self.label} has no generate API")

    def stream_last(self, index: int, token: Token, text: str, details: dict[str, Any] | None) -> bytes:
        """No generate API."""
        raise NotImplementedError(f"{self.label} has no generate API")

    def error_reply(self, status: int, error_type: str, message: str) -> ErrorReply:
        """An OpenAI error object; validation errors are 400s (TGI's 422s)."""
        status = 400 if status == 422 else status
        kind = {400: "BadRequestError", 404: "NotFoundError", 413: "BadRequestError"}.get(status, "InternalServerError")
        body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
        return ErrorReply(status, "application/json", json.dumps(body).encode())
