"""Where the bench sends load: the embedded local AWS, a real SageMaker account, or an existing server.

Local and SageMaker deploy and destroy the same EndpointStack through the same CDK CLI calls and invoke
through the same SigV4 event-stream transport; only the environment they point at differs.
"""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sagellm.aws import cdk_cli
from sagellm.bench.transports import OpenAiTransport, SageMakerTransport, TgiTransport, Transport
from sagellm.errors import InputError, TargetError
from sagellm.profiles.plan import DeploymentPlan, component_output
from sagellm.results.schema import Teardown

if TYPE_CHECKING:
    from sagellm.emulator import EmulatorProcess


# Beyond the container's own start-up and download timeouts: instance provisioning and CloudFormation.
DEPLOY_MARGIN_S = 15 * 60
# The local AWS's stand-in for an account's Hugging Face token secret (gated models need one at synth).
LOCAL_TOKEN_SECRET = "sagellm/local/hf-token"


class Target(Protocol):
    """A place to bench: deploy() gives a transport; teardown() always runs and says what it left."""

    kind: str
    emulated: bool
    endpoint: str | None

    def deploy(self) -> Transport: ...

    def teardown(self) -> Teardown: ...


def stack_name(plan: DeploymentPlan) -> str:
    """A unique, recognisable stack name per bench run (the stack's tags carry profile and model)."""
    return f"sagellm-bench-{plan.profile}-{uuid.uuid4().hex[:8]}"[:128]


def cdk_context(plan: DeploymentPlan, model: str, profiles_dir: Path | None) -> dict[str, str | None]:
    """CDK context that makes app.py resolve exactly this plan."""
    return {
        "profile": plan.profile,
        "model": model,
        "instance": plan.instance_type,
        "region": plan.region,
        "input_tokens": str(plan.input_tokens),
        "output_tokens": str(plan.output_tokens),
        "profiles_dir": str(profiles_dir.resolve()) if profiles_dir else None,
        "hf_token_secret": plan.hf_token_secret,
    }


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
    """Deploys the plan's EndpointStack with the CDK CLI and destroys it again."""

    emulated = False

    def __init__(self, plan: DeploymentPlan, model: str, profiles_dir: Path | None, out: Path):
        self.plan, self.out = plan, out
        self.stack = stack_name(plan)
        self.context = cdk_context(plan, model, profiles_dir)
        self.endpoint: str | None = None
        self.deployed = False

    def _env(self) -> dict[str, str] | None:
        return None  # the caller's environment: its AWS credentials and region

    def _deploy_stack(self) -> dict[str, str]:
        self.deployed = True  # from here on teardown must run, even if deploy fails half-way
        # CloudFormation waits for InService; bound the wait by what the endpoint may take to start.
        wait_s = self.plan.startup_health_check_timeout_s + self.plan.model_data_download_timeout_s + DEPLOY_MARGIN_S
        outputs = cdk_cli.deploy(self.stack, self.context, self._env(), self.out / "cdk", timeout_s=wait_s)
        self.endpoint = outputs.get("EndpointName")
        if not self.endpoint:
            raise TargetError(f"stack {self.stack} has no EndpointName output: {outputs}")
        return outputs

    def _destroy_stack(self) -> Teardown:
        if not self.deployed:
            return Teardown(status="not-applicable", detail="nothing was deployed")
        try:
            cdk_cli.destroy(self.stack, self.context, self._env(), outdir=self.out / "cdk")
        except TargetError as exc:
            return Teardown(status="failed", detail=str(exc), leftovers=[f"stack {self.stack}"])
        return Teardown(status="destroyed", detail=f"stack {self.stack} destroyed")


class SageMakerTarget(_StackTarget):
    """A real AWS account: CloudFormation waits for InService; the runtime is SigV4 with response streaming."""

    kind = "sagemaker"

    def deploy(self) -> Transport:
        outputs = self._deploy_stack()
        return SageMakerTransport(self.endpoint or "", self.plan.region,
                                  inference_component=_component(self.plan, outputs))

    def teardown(self) -> Teardown:
        return self._destroy_stack()


class LocalTarget(_StackTarget):
    """The embedded default: moto server on loopback as the control plane, the emulator as the endpoint."""

    kind = "local"
    emulated = True

    def __init__(self, plan: DeploymentPlan, model: str, profiles_dir: Path | None, out: Path,
                 time_scale: float = 1.0):
        super().__init__(plan, model, profiles_dir, out)
        from sagellm.aws.local import LocalAws

        self.time_scale = time_scale
        self.aws = LocalAws(plan.region)
        self.emulator: EmulatorProcess | None = None

    def _env(self) -> dict[str, str]:
        return self.aws.env()

    def deploy(self) -> Transport:
        from sagellm.emulator import EmulatorProcess

        # moto reports resources it skips (the bootstrap stack's S3 policy) as logs and warnings.
        logging.getLogger("moto").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
        self.aws.start()
        # A fresh moto has no bootstrap stack; create it the way a new real account gets one.
        cdk_cli.bootstrap(self._env(), log=self.out / "cdk" / "cdk-bootstrap.log")
        if self.plan.gated_models and not self.plan.hf_token_secret:
            # The template references the secret as it would in an account; the emulator needs no token.
            self.aws.client("secretsmanager").create_secret(Name=LOCAL_TOKEN_SECRET, SecretString="local")
            self.context["hf_token_secret"] = LOCAL_TOKEN_SECRET
        outputs = self._deploy_stack()
        emulator = self.emulator = EmulatorProcess(self.plan, time_scale=self.time_scale,
                                                   endpoint_name=self.endpoint,
                                                   component_names=_components(self.plan, outputs))
        emulator.start()
        return SageMakerTransport(self.endpoint or "", self.plan.region, inference_component=_component(
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

    def teardown(self) -> Teardown:
        problems: list[str] = []
        if self.emulator is not None:
            try:
                self.emulator.stop()
            except TargetError as exc:
                problems.append(f"emulator: {exc}")
        result = self._destroy_stack()
        try:
            left = [f"{kind[:-1]} {name}" for kind, names in self.aws.leftovers().items() for name in names]
        except Exception as exc:  # noqa: BLE001 - the server may be gone already; say so, don't hide it
            left = [f"unknown (could not list: {exc})"]
        finally:
            self.aws.stop()
        if result.status != "destroyed" or not (left or problems):
            return result
        problems += [f"left in the local AWS: {', '.join(left)}"] if left else []
        return Teardown(status="failed", detail="; ".join(problems), leftovers=left)


def _says_emulated(url: str) -> bool:
    """Whether the server is sagellm's emulator (its TGI `/info` says so), so results are labelled right."""
    base = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{base}/info", timeout=5) as reply:
            return json.load(reply).get("emulated") is True
    except (OSError, ValueError, AttributeError):
        return False  # a real server, or one without TGI's /info


class HttpTarget:
    """An existing TGI or OpenAI-compatible (vLLM) server: no deploy, no teardown."""

    kind = "http"
    emulated = False

    def __init__(self, url: str, api: str, model: str):
        if not url.startswith(("http://", "https://")):
            raise InputError(f"--url: {url!r} must be an http(s) URL of a TGI or OpenAI-compatible server")
        self.endpoint: str | None = url
        self.api = api if api != "auto" else ("openai" if "/v1" in url else "tgi")
        self.model = model

    def deploy(self) -> Transport:
        url = self.endpoint or ""
        self.emulated = _says_emulated(url)
        if self.api == "openai":  # the transport appends /v1/completions itself
            return OpenAiTransport(url.rstrip("/").removesuffix("/v1"), self.model)
        return TgiTransport(url)

    def teardown(self) -> Teardown:
        return Teardown(status="not-applicable", detail="existing server: nothing deployed")
