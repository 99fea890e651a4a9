"""Where the bench sends load, and which target a run gets.

- `local`: the embedded local AWS and the emulator (stack_targets.LocalTarget);
- `sagemaker`: an AWS account, deploying the bench's own stack (stack_targets.SageMakerTarget), or an existing
  endpoint with `--endpoint-name` (existing.ExistingEndpoint: nothing deployed or deleted);
- `http`: an existing TGI or OpenAI-compatible server (HttpTarget).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sagellm.bench.transports import OpenAiTransport, TgiTransport, Transport
from sagellm.errors import InputError
from sagellm.profiles.plan import DeploymentPlan
from sagellm.results.schema import Teardown

if TYPE_CHECKING:
    from sagellm.aws.endpoints import DeployedEndpoint


class Target(Protocol):
    """A place to bench: deploy() gives a transport; teardown() undoes what deploy() created."""

    kind: str
    emulated: bool
    endpoint: str | None
    deploys: bool  # whether it creates anything (that teardown must delete)

    def deploy(self) -> Transport: ...

    def teardown(self) -> Teardown: ...

    def may_be_left(self) -> list[str]:
        """What may be left when teardown itself failed midway."""
        ...


def choose_target(target: str, plan: DeploymentPlan, *, model: str, url: str | None, api: str,
                  profiles_dir: Path | None, workdir: Path, run: str, process: str, time_scale: float,
                  deployed: DeployedEndpoint | None, say: Callable[[str], None]) -> Target:
    """The target a run asked for (`deployed`: the existing endpoint `--endpoint-name` named)."""
    from sagellm.bench.existing import ExistingEndpoint
    from sagellm.bench.stack_targets import LocalTarget, SageMakerTarget

    if target == "http":
        return HttpTarget(url or "", api, model)
    if deployed is not None:
        return ExistingEndpoint(deployed, plan.region)

    def cdk_line(line: str) -> None:
        say(f"  cdk │ {line}")

    if target == "sagemaker":
        return SageMakerTarget(plan, model, profiles_dir, workdir, run, process, cdk_line)
    return LocalTarget(plan, model, profiles_dir, workdir, run, process, cdk_line, time_scale=time_scale)


def says_emulated(url: str) -> bool:
    """Whether the server is sagellm's emulator (its TGI `/info` says so), so results are labelled right."""
    base = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{base}/info", timeout=5) as reply:
            return json.load(reply).get("emulated") is True
    except (OSError, ValueError, AttributeError):
        return False  # a real server, or one without TGI's /info


def runtime_is_emulated() -> bool:
    """Whether the SageMaker runtime was pointed (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME) at sagellm's emulator."""
    url = os.environ.get("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME")
    return bool(url) and says_emulated(url or "")


class HttpTarget:
    """An existing TGI or OpenAI-compatible (vLLM) server: no deploy, no teardown."""

    kind = "http"
    emulated = False
    deploys = False

    def __init__(self, url: str, api: str, model: str):
        if not url.startswith(("http://", "https://")):
            raise InputError(f"--url: {url!r} must be an http(s) URL of a TGI or OpenAI-compatible server")
        self.endpoint: str | None = url
        self.api = api if api != "auto" else ("openai" if "/v1" in url else "tgi")
        self.model = model

    def deploy(self) -> Transport:
        url = self.endpoint or ""
        self.emulated = says_emulated(url)
        if self.api == "openai":  # the transport appends /v1/completions itself
            return OpenAiTransport(url.rstrip("/").removesuffix("/v1"), self.model)
        return TgiTransport(url)

    def teardown(self) -> Teardown:
        return Teardown(status="not-applicable", detail="existing server: nothing deployed")

    def may_be_left(self) -> list[str]:
        return []
