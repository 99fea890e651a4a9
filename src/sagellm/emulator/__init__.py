"""A local endpoint that behaves like a DeploymentPlan: SageMaker runtime, TGI and OpenAI routes over
continuous batching in simulated time (results from it are labelled emulated).

Token rule: one token per whitespace-separated word of the prompt; `make_prompt(n)` builds n tokens.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each name is imported from its module on first use (PEP 562): the simulator (serving.simulate, which `plan` and
# `recommend` run) needs none of the HTTP front, and the front brings aiohttp.
_MODULE_OF = {"Emulator": "frontend.server", "run_emulator": "frontend.server", "EmulatorProcess": "process",
              "count_tokens": "frontend.formats", "make_prompt": "frontend.formats"} | {
    name: "frontend.calls" for name in __all__ if name.startswith("SERVER_")}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
