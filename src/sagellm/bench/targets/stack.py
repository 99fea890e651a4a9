"""Targets that deploy the bench's own EndpointStack and delete exactly that stack again.

Local and SageMaker deploy the same stack through the same CDK CLI call (sagellm's own app, this run's work
folder, the run's plan handed over as plan.json: the app deploys it as it is, resolving nothing again) and invoke
through the same SigV4 event-stream transport; only the environment they point at differs.
Teardown deletes the stack by name through CloudFormation, and only if it carries this run's tag: never
another run's stack, never through a cloud assembly a folder happened to hold.
"""

from __future__ import annotations

import json
import logging
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sagellm.aws import cdk_cli, cloudformation
from sagellm.aws.account import Account
from sagellm.bench.client.transports import TGI, Api, SageMakerTransport, Transport
from sagellm.bench.targets.http import runtime_is_emulated
from sagellm.bench.targets.scaling_watch import Watched
from sagellm.clock import REAL, Clock
from sagellm.errors import TargetError
from sagellm.profiles.plan import DeploymentPlan, component_output
from sagellm.results.schema import Teardown

if TYPE_CHECKING:
    from sagellm.emulator import EmulatorProcess

# Beyond the container's own start-up and download timeouts: instance provisioning and CloudFormation.
DEPLOY_MARGIN_S = 15 * 60
# The local AWS's stand-in for an account's Hugging Face token secret (gated models need one at synth).
LOCAL_TOKEN_SECRET = "sagellm/local/hf-token"


def stack_name(plan: DeploymentPlan, run: str) -> str:
    """The run's stack: recognisable, unique per run (its tags carry profile, model and run)."""
    return f"sagellm-bench-{plan.profile}-{run}"[:128]


def cdk_context(plan: DeploymentPlan, workdir: Path, run: str, process: str) -> dict[str, str]:
    """CDK context that makes sagellm.cdk_app build exactly this plan (written to the work folder as plan.json),
    tagged with the run."""
    handed = workdir.resolve() / "plan.json"  # absolute: the CDK CLI starts the app in the work folder
    handed.parent.mkdir(parents=True, exist_ok=True)
    handed.write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return {"plan": str(handed), "bench_run": run, "bench_process": process}


def _components(plan: DeploymentPlan, outputs: dict[str, str]) -> dict[str, str]:
    """Each model's inference component name (plan model name → deployed name) from the stack outputs."""
    if plan.endpoint_kind != "inference-component":
        return {}
    names = {}
    for model in plan.models:
        key = component_output(model.name)
        if key not in outputs:
            raise TargetError(f"stack outputs carry no {key} for model {model.name!r}: {', '.join(outputs)}")
        names[model.name] = outputs[key]
    return names


def _component(plan: DeploymentPlan, outputs: dict[str, str]) -> str | None:
    """The inference component to invoke (the plan's first model) from the stack outputs."""
    return _components(plan, outputs).get(plan.primary.name)


class _StackTarget:
    """Deploys the plan's EndpointStack with the CDK CLI into `workdir` and deletes it again."""

    emulated = False
    deploys = True

    def __init__(self, plan: DeploymentPlan, workdir: Path, run: str, process: str,
                 on_line: Callable[[str], None] | None = None, *, api: Api = TGI):
        cdk_cli.find_cli()  # found, or fetched once (exit 2 when it cannot be), before anything starts
        self.plan, self.workdir, self.run, self.process, self.on_line, self.api = \
            plan, workdir, run, process, on_line, api
        self.stack = stack_name(plan, run)
        self.endpoint: str | None = None
        self.deploying = False  # whether `cdk deploy` was started: only then can a stack exist

    def _env(self) -> dict[str, str]:
        raise NotImplementedError

    def _deploy_stack(self, plan: DeploymentPlan) -> dict[str, str]:
        """Deploy `plan` (this target's, or the local AWS's variant of it) as the run's stack."""
        # CloudFormation waits for InService; bound the wait by what the endpoint may take to start.
        wait_s = plan.startup_health_check_timeout_s + plan.model_data_download_timeout_s + DEPLOY_MARGIN_S
        self.deploying = True
        outputs = cdk_cli.deploy(self.stack, cdk_context(plan, self.workdir, self.run, self.process), self._env(),
                                 self.workdir, timeout_s=wait_s, on_line=self.on_line)
        self.endpoint = outputs.get("EndpointName")
        if not self.endpoint:
            raise TargetError(f"stack {self.stack} has no EndpointName output: {outputs}")
        return outputs

    def _delete_stack(self) -> Teardown:
        if not self.deploying:
            return Teardown(status="not-applicable", detail="nothing was deployed")
        try:
            try:
                deleted = cloudformation.delete_run_stack(cloudformation.client(self._env()), self.stack, self.run)
            except cloudformation.CredentialsExpired:
                # A new client reads the credentials again: a login renewed meanwhile (SSO, a credential
                # process, a refreshed profile) finishes the job.
                deleted = cloudformation.delete_run_stack(cloudformation.client(self._env()), self.stack, self.run)
        except TargetError as exc:
            return Teardown(status="failed", detail=str(exc), leftovers=[f"stack {self.stack}"])
        if not deleted:
            return Teardown(status="not-applicable", detail=f"stack {self.stack} does not exist (never created, "
                            "or deleted after a failed deploy): nothing to delete")
        return Teardown(status="destroyed", detail=f"stack {self.stack} deleted")

    def may_be_left(self) -> list[str]:
        """What a teardown that failed midway may have left: this run's stack, once its deploy started."""
        return [f"stack {self.stack}"] if self.deploying else []


class SageMakerTarget(_StackTarget, Watched):
    """An AWS account: CloudFormation waits for InService; the runtime is SigV4 with response streaming; its
    scaling is read from the control plane (`scaling_watch`). Every call goes to the one account and region
    the bench resolved before deploying."""

    kind = "sagemaker"

    def __init__(self, plan: DeploymentPlan, account: Account, workdir: Path, run: str, process: str,
                 on_line: Callable[[str], None] | None = None, *, api: Api = TGI):
        super().__init__(plan, workdir, run, process, on_line, api=api)
        self.account = account

    def _env(self) -> dict[str, str]:
        return cdk_cli.cli_env(self.account.env)  # the caller's credentials, the run's region pinned

    def deploy(self) -> Transport:
        outputs = self._deploy_stack(self.plan)
        self.emulated = runtime_is_emulated()
        component = _component(self.plan, outputs)
        self.watch_scaling(self.endpoint or "", component, self.account)
        return SageMakerTransport(self.endpoint or "", self.account.region, api=self.api,
                                  inference_component=component, boto_session=self.account.session())

    def teardown(self) -> Teardown:
        self.stop_watching()
        return self._delete_stack()


class LocalTarget(_StackTarget):
    """The embedded default: moto server on loopback as the control plane, the emulator as the endpoint."""

    kind = "local"
    emulated = True

    def __init__(self, plan: DeploymentPlan, workdir: Path, run: str, process: str,
                 on_line: Callable[[str], None] | None = None, clock: Clock = REAL, *, api: Api = TGI,
                 instance_startup_s: float | None = None):
        super().__init__(plan, workdir, run, process, on_line, api=api)
        from sagellm.aws.local import LocalAws

        self.clock = clock
        self.instance_startup_s = instance_startup_s
        self.aws = LocalAws(plan.region)
        self.emulator: EmulatorProcess | None = None

    def _env(self) -> dict[str, str]:
        return cdk_cli.cli_env(self.aws.env())

    def deploy(self) -> Transport:
        from sagellm.emulator import EmulatorProcess

        # moto reports resources it skips (the bootstrap stack's S3 policy) as logs and warnings.
        logging.getLogger("moto").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
        self.aws.start()
        # A fresh moto has no bootstrap stack; create it the way a new real account gets one.
        cdk_cli.bootstrap(self._env(), self.workdir)
        deployed = self.plan
        if self.plan.gated_models and not self.plan.hf_token_secret:
            # The template references the secret as it would in an account; the emulator needs no token.
            self.aws.client("secretsmanager").create_secret(Name=LOCAL_TOKEN_SECRET, SecretString="local")
            deployed = self.plan.model_copy(update={"hf_token_secret": LOCAL_TOKEN_SECRET})
        outputs = self._deploy_stack(deployed)
        emulator = self.emulator = EmulatorProcess(self.plan, clock=self.clock,
                                                   endpoint_name=self.endpoint,
                                                   component_names=_components(self.plan, outputs),
                                                   instance_startup_s=self.instance_startup_s,
                                                   cloudwatch_url=self.aws.endpoint_url)
        emulator.start()
        return SageMakerTransport(self.endpoint or "", self.plan.region, api=self.api, inference_component=_component(
            self.plan, outputs), endpoint_url=emulator.url, boto_session=self.aws.session())

    def loop_lag_ms(self) -> float | None:
        """The emulator's worst event-loop lag since the last call (then reset), or None if unknown."""
        if self.emulator is None:
            return None
        try:
            with urllib.request.urlopen(f"{self.emulator.url}/metrics?reset=1", timeout=5) as reply:
                return float(json.load(reply)["loop_lag_s"]["max"]) * 1000
        except (OSError, ValueError, KeyError):
            return None

    def autoscaling(self) -> dict | None:
        """The emulator's simulated target tracking (its `/autoscaling` reply), or None if it cannot be read."""
        if self.emulator is None:
            return None
        try:
            with urllib.request.urlopen(f"{self.emulator.url}/autoscaling", timeout=5) as reply:
                return dict(json.load(reply))
        except (OSError, ValueError):
            return None

    def may_be_left(self) -> list[str]:
        return []  # the local AWS lives in this process and goes with it

    def teardown(self) -> Teardown:
        problems: list[str] = []
        if self.emulator is not None:
            try:
                self.emulator.stop()
            except TargetError as exc:
                problems.append(f"emulator: {exc}")
        if not self.aws.running:
            return Teardown(status="failed" if problems else "not-applicable",
                            detail="; ".join(problems) or "nothing was deployed")
        try:
            result = self._delete_stack()
            left = [f"{kind[:-1]} {name}" for kind, names in self.aws.leftovers().items() for name in names]
        except Exception as exc:  # noqa: BLE001 - the server may be gone already; say so, don't hide it
            result, left = Teardown(status="failed", detail=str(exc)), [f"unknown (could not list: {exc})"]
        finally:
            self.aws.stop()
        if result.status == "failed" or not (left or problems):
            return result
        problems += [f"left in the local AWS: {', '.join(left)}"] if left else []
        return Teardown(status="failed", detail="; ".join(problems), leftovers=left)
