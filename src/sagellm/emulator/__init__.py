"""A local endpoint that behaves like a DeploymentPlan: SageMaker runtime, TGI and OpenAI routes over
continuous batching in simulated time (results from it are labelled emulated).

Token rule: one token per whitespace-separated word of the prompt; `make_prompt(n)` builds n tokens.
"""

from sagellm.emulator.frontend.calls import (
    SERVER_ARRIVED_HEADER,
    SERVER_E2E_DETAIL,
    SERVER_E2E_HEADER,
    SERVER_TTFT_DETAIL,
    SERVER_TTFT_HEADER,
)
from sagellm.emulator.frontend.formats import count_tokens, make_prompt
from sagellm.emulator.frontend.server import Emulator, run_emulator
from sagellm.emulator.process import EmulatorProcess

__all__ = [
    "SERVER_ARRIVED_HEADER", "SERVER_E2E_DETAIL", "SERVER_E2E_HEADER", "SERVER_TTFT_DETAIL", "SERVER_TTFT_HEADER",
    "Emulator", "EmulatorProcess", "count_tokens", "make_prompt", "run_emulator",
]
