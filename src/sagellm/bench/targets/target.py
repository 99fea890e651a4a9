"""Where the bench sends load, and which target a run gets.

- `local`: the embedded local AWS and the emulator (stack.LocalTarget);
- `sagemaker`: an AWS account, deploying the bench's own stack (stack.SageMakerTarget), or an existing
  endpoint with `--endpoint-name` (existing.ExistingEndpoint: nothing deployed or deleted);
- `http`: an existing TGI or OpenAI-compatible server (http.HttpTarget).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sagellm.aws.account import Account
from sagellm.aws.endpoints import DeployedEndpoint
from sagellm.bench.client.transports import APIS, Api, Transport
from sagellm.bench.targets.existing import ExistingEndpoint
from sagellm.bench.targets.http import HttpTarget
from sagellm.bench.targets.stack import LocalTarget, SageMakerTarget
from sagellm.clock import Clock
from sagellm.engines import ENGINES
from sagellm.profiles.plan import DeploymentPlan
from sagellm.results.schema import Teardown


class Target(Protocol):
    """A place to bench: deploy() gives a transport; teardown() undoes what deploy() created."""

    kind: str
    emulated: bool
    endpoint: str | None
    api: Api  # what requests say (decided by deploy() for an http server asked for `auto`)
    deploys: bool  # whether it creates anything (that teardown must delete)

    def deploy(self) -> Transport: ...

    def teardown(self) -> Teardown: ...

    def may_be_left(self) -> list[str]:
        """What may be left when teardown itself failed midway."""
        ...


def choose_target(target: str, plan: DeploymentPlan | None, *, model: str | None, url: str | None, api: str,
                  served_model: str | None, workdir: Path, run: str, process: str, clock: Clock,
                  deployed: DeployedEndpoint | None, say: Callable[[str], None], account: Account | None = None,
                  instance_startup_s: float | None = None) -> Target:
    """The target a run asked for (`deployed`: the existing endpoint `--endpoint-name` named; `account`: the
    account and region a sagemaker target uses throughout)."""
    if target == "http":
        return HttpTarget(url or "", api, served_model, model)
    assert plan is not None  # the specs' checks: the other targets have a profile and a model
    # SageMaker endpoints: auto is what the plan's engine takes on /invocations (TGI's generate, vLLM's
    # completions, SGLang's chat).
    chosen = APIS[ENGINES[plan.container].sagemaker_api if api == "auto" else api]

    def cdk_line(line: str) -> None:
        say(f"  cdk │ {line}")

    if target == "local":
        return LocalTarget(plan, workdir, run, process, cdk_line, clock=clock, api=chosen,
                           instance_startup_s=instance_startup_s)
    assert account is not None  # plan_bench resolves it for every sagemaker target
    if deployed is not None:
        return ExistingEndpoint(deployed, account, api=chosen)
    return SageMakerTarget(plan, account, workdir, run, process, cdk_line, api=chosen)
