"""Where the bench sends load: the embedded local AWS, a real SageMaker account, or an existing server.

Local and SageMaker deploy and destroy the same EndpointStack through the same CDK CLI calls and invoke
through the same SigV4 event-stream transport; only the environment they point at differs.
"""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sagellm.aws import cdk_cli
from sagellm.bench.transports import APIS, TGI, Api, HttpTransport, SageMakerTransport, Transport
from sagellm.errors import InputError, TargetError
from sagellm.profiles.plan import DeploymentPlan, component_output
from sagellm.results.schema import Teardown

if TYPE_CHECKING:
    from sagellm.emulator import EmulatorProcess


# Beyond the container's own start-up and download timeouts: instance provisioning and CloudFormation.
DEPLOY_MARGIN_S = 15 * 60


class Target(Protocol):
    """A place to bench: deploy() gives a transport; teardown() always runs and says what it left."""

    kind: str
    emulated: bool
    endpoint: str | None
    api: Api

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
    }


def _component(plan: DeploymentPlan, outputs: dict[str, str]) -> str | None:
    """The inference component to invoke (the plan's first model) from the stack outputs."""
    if plan.endpoint_kind != "inference-component":
        return None
    key = component_output(plan.primary.name)
    name = outputs.get(key)
    if name is None:
        raise TargetError(f"stack outputs carry no {key} for model {plan.primary.name!r}: {', '.join(outputs)}")
    return name


class _StackTarget:
    """Deploys the plan's EndpointStack with the CDK CLI and destroys it again."""

    emulated = False

    def __init__(self, plan: DeploymentPlan, model: str, profiles_dir: Path | None, out: Path, *,
                 api: Api = TGI):
        self.plan, self.out, self.api = plan, out, api
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
        return SageMakerTransport(self.endpoint or "", self.plan.region, api=self.api,
                                  inference_component=_component(self.plan, outputs))

    def teardown(self) -> Teardown:
        return self._destroy_stack()


class LocalTarget(_StackTarget):
    """The embedded default: moto server on loopback as the control plane, the emulator as the endpoint."""

    kind = "local"
    emulated = True

    def __init__(self, plan: DeploymentPlan, model: str, profiles_dir: Path | None, out: Path,
                 time_scale: float = 1.0, *, api: Api = TGI):
        super().__init__(plan, model, profiles_dir, out, api=api)
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
        outputs = self._deploy_stack()
        emulator = self.emulator = EmulatorProcess(self.plan, time_scale=self.time_scale,
                                                   endpoint_name=self.endpoint,
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


def http_address(url: str) -> tuple[str, int]:
    """Host and port of an http(s) server URL; an input error when the URL is not one."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port < 0:
        raise InputError(f"--url: {url!r} must be an http(s) URL of a TGI or OpenAI-compatible server "
                         "(e.g. http://localhost:8080)")
    return parts.hostname, port


def check_reachable(url: str, timeout_s: float = 5.0) -> None:
    """Fail in one line when nothing answers at the server's address: before anything is planned or written."""
    host, port = http_address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TargetError(f"--url: {url}: nothing answers at {host}:{port} ({reason}); start the server or fix "
                          "the URL") from None


def _get_json(url: str) -> tuple[int | None, object]:
    """GET a JSON document: (HTTP status, body), (status, None) if not JSON, (None, None) if unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            status, body = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return None, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def served_models(base: str) -> list[str] | None:
    """The model names an OpenAI-compatible server serves (`/v1/models`), or None if it does not say."""
    status, body = _get_json(f"{base}/v1/models")
    data = body.get("data") if status == 200 and isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


class HttpTarget:
    """An existing TGI or OpenAI-compatible (vLLM) server: no deploy, no teardown.

    The OpenAI `model` field is the name the server serves (`served_model`, or the one `/v1/models`
    lists), independent of the catalog model that labels the run and predicts it.
    """

    kind = "http"
    emulated = False

    def __init__(self, url: str, api: str, served_model: str | None = None, catalog_model: str | None = None):
        http_address(url)
        self.endpoint: str | None = url
        self.base = url.rstrip("/").removesuffix("/v1")
        self.requested_api = api  # tgi | openai | chat | auto (decided when the server is reached)
        self.api: Api = APIS.get(api, TGI)
        self.served_model = served_model
        self.catalog_model = catalog_model

    def deploy(self) -> Transport:
        status, info = _get_json(f"{self.base}/info")  # TGI's (and the emulator's) self-description
        self.emulated = isinstance(info, dict) and info.get("emulated") is True
        name = self.requested_api
        if name == "auto":
            name = "openai" if self.endpoint and "/v1" in self.endpoint else "tgi"
            if name == "tgi" and status == 404:
                raise InputError(f"--api auto: {self.base}/info answered 404, so {self.base} is no TGI server; "
                                 "for an OpenAI-compatible one (vLLM) use --api openai (or a URL ending in /v1)")
        self.api = APIS[name]
        if self.api is not TGI:  # OpenAI-style bodies name the model the server serves
            self.served_model = self.served_model or self._discover_model()
        # The transport appends the API's route (/generate_stream, /v1/completions, /v1/chat/completions).
        return HttpTransport(self.base, self.api, self.served_model or "")

    def _discover_model(self) -> str:
        names = served_models(self.base)
        if names is not None and len(names) == 1:
            return names[0]
        if names:
            raise InputError(f"--served-model: {self.base} serves {', '.join(names)}; name the one to bench")
        if self.catalog_model:  # a server without /v1/models (older servers): send the catalog id as is
            return self.catalog_model
        raise InputError(f"--served-model: {self.base}/v1/models does not list the served model; "
                         "give --served-model NAME (the server's name for it)")

    def teardown(self) -> Teardown:
        return Teardown(status="not-applicable", detail="existing server: nothing deployed")
