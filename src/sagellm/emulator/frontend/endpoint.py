"""The plan's models behind one endpoint, as the routes see them: which model a request goes to, admission (the
pinned server's payload limit and default tokens, SageMaker's deadline), the pinned server's error replies, and
the simulated target tracking on its own clock. No HTTP here: the routes (`container`, `sagemaker`) use it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace

from sagellm.catalog import Instance
from sagellm.catalog import instances as catalog_instances
from sagellm.catalog import models as catalog_models
from sagellm.clock import REAL, Clock
from sagellm.emulator.frontend.calls import Call, Reply, reply_of
from sagellm.emulator.frontend.formats import Ask
from sagellm.emulator.serving.autoscaling import (
    INSTANCE_STARTUP_S,
    EndpointScaling,
    ManagedInstances,
    Policy,
    TargetTracking,
)
from sagellm.emulator.serving.copies import ModelServer, RequestError
from sagellm.planner.constants import INVOCATION_TIMEOUT_S
from sagellm.profiles.plan import ComputeRequirements, DeploymentPlan, ModelDeployment


class EmulatedEndpoint:
    """The models of `plan` (every copy) behind one endpoint, and the state the routes share.

    `endpoint_name` is the one name the SageMaker routes answer to (without one they answer any name, and
    call themselves `sagellm-<profile>`); `component_names` maps each plan model to its deployed
    inference-component name (default: the plan's model names), the only names the component header may carry;
    `instance_startup_s` is how long a new instance takes to come into service when the simulated autoscaling
    adds one.
    """

    def __init__(self, plan: DeploymentPlan, *, clock: Clock = REAL, endpoint_name: str | None = None,
                 component_names: dict[str, str] | None = None, instance_startup_s: float | None = None):
        self.plan = plan
        self.clock = clock
        self.endpoint_name = endpoint_name or f"sagellm-{plan.profile}"
        # Without a name it stands in for every endpoint of an account (`sagellm emulate` behind `local-aws`).
        self.any_endpoint = endpoint_name is None
        self.models = {m.name: ModelServer(plan, m, clock) for m in plan.models}
        names = component_names or {m.name: m.name for m in plan.models}
        self.component_names = {name: names.get(name, name) for name in self.models}
        self.by_component = {deployed: self.models[name] for name, deployed in self.component_names.items()}
        self.primary = self.models[plan.models[0].name]
        self.engine = self.primary.engine
        self.payload_limit = self.engine.payload_limit(plan.primary.environment)
        self.served = 0
        # Every reply carries these.
        self.headers = {"X-Sagellm-Emulated": "true", "X-Sagellm-Time-Scale": f"{clock.scale:g}"}
        self.autoscaling = _scaling(plan, self.models, instance_startup_s)
        self._zero = time.perf_counter()  # the simulated clock's origin (`start_clock` when serving starts)

    # -- which model answers --------------------------------------------------------------------------

    def model_for(self, component: str | None, model_field: str | None = None) -> ModelServer:
        """Container routes: the component header if given (exactly), else OpenAI's `model`, else the first model."""
        if component is not None:
            model = self.by_component.get(component)
            if model is None:
                raise RequestError(400, "validation", f"unknown inference component {component!r}: "
                                                      f"known: {', '.join(self.by_component)}")
            return model
        if model_field is None:
            return self.primary
        for key, model in self.models.items():  # served names: the model id, the plan's name, the alias
            known = catalog_models().get(model.deployment.model_id)
            if model_field in (key, model.deployment.model_id, known.alias if known else None):
                return model
        raise RequestError(404, "not_found", f"The model `{model_field}` does not exist.")

    # -- admission and the pinned server's refusals -----------------------------------------------------

    def check_payload(self, raw: bytes) -> None:
        """RequestError 413 for a body over the pinned server's payload limit."""
        if self.payload_limit is not None and len(raw) > self.payload_limit:
            raise RequestError(413, "payload", self.engine.payload_too_large)

    def admit(self, model: ModelServer, ask: Ask, arrived_s: float, *, sagemaker: bool, body: bytes | None = None
              ) -> Call:
        """Queue `ask` on one of `model`'s copies (with SageMaker's invocation deadline on its routes; `body`: an
        InvokeEndpoint's, whose first bytes prefix-aware routing compares)."""
        deadline = arrived_s + self.clock.wall_s(INVOCATION_TIMEOUT_S) if sagemaker else None
        default_new_tokens = self.engine.default_max_new_tokens()
        if default_new_tokens is not None and ask.api == "generate" and ask.max_new_tokens is None:
            ask = replace(ask, max_new_tokens=default_new_tokens)
        return Call(model, ask, arrived_s, deadline, self._zero, body)

    def container_error(self, exc: RequestError) -> Reply:
        """The pinned server's error reply (TGI `{"error", "error_type"}`, LMI `{"error", "code"}`)."""
        return reply_of(self.engine.error_reply(exc.status, exc.error_type, exc.message))

    def stream_refusal(self, exc: RequestError) -> Reply:
        """A refused stream as the pinned server sends it (TGI: HTTP 200 and one SSE error event)."""
        return reply_of(self.engine.stream_refusal(exc.status, exc.error_type, exc.message))

    # -- simulated autoscaling ------------------------------------------------------------------------

    def start_clock(self) -> None:
        """Start the simulated clock (serving begins)."""
        self._zero = time.perf_counter()

    def simulated_now_s(self) -> float:
        """Simulated seconds since the emulator started serving."""
        return self.clock.simulated_s(time.perf_counter() - self._zero)

    def apply_scaling(self) -> None:
        """Bring the scaling up to the simulated now; resize the copies of the models whose capacity changed."""
        assert self.autoscaling is not None
        for name in self.autoscaling.advance(self.simulated_now_s()):
            in_service = self.autoscaling.trackers[name].in_service
            if self.plan.endpoint_kind == "inference-component":
                self.models[name].set_copies(in_service)
            else:
                self.models[name].resize(in_service)

    def _tracker(self, model: ModelServer | None) -> TargetTracking | None:
        """The scaling loop of `model`'s capacity (None: no autoscaling, or no such model)."""
        if self.autoscaling is None or model is None:
            return None
        return self.autoscaling.trackers.get(model.deployment.name)

    def no_capacity(self, model: ModelServer) -> bool:
        """Whether `model` has no copy now (SageMaker then refuses the request); the refusal counts in its
        NoCapacityInvocationFailures, which its scale-from-zero alarm watches."""
        if self.autoscaling is not None:
            self.apply_scaling()
        if model.copies:
            return False
        tracker = self._tracker(model)
        if tracker is not None:
            tracker.no_capacity(self.simulated_now_s())
        return True

    async def scale(self) -> None:
        """Run the scaling loop on the simulated clock: one tick per simulated second."""
        while True:
            self.apply_scaling()
            await asyncio.sleep(self.clock.wall_s(1.0))

    @contextlib.contextmanager
    def in_flight(self, component: str | None = None) -> Iterator[None]:
        """An InvokeEndpoint call held by the variant (or by `component`), from arrival to its reply's end: it
        counts in the concurrent-requests metric that model's scaling policy tracks."""
        tracker = self._tracker(self.primary if component is None else self.by_component.get(component))
        if tracker is None:
            yield
            return
        self.apply_scaling()
        tracker.started(self.simulated_now_s())
        try:
            yield
        finally:
            self.apply_scaling()
            tracker.finished(self.simulated_now_s())


def _scaling(plan: DeploymentPlan, models: dict[str, ModelServer],
             instance_startup_s: float | None) -> EndpointScaling | None:
    """The simulated scaling of a plan with autoscaling (None without): the instances of an instance-based variant,
    or every inference component's copies on its own target tracking (the policy each component deploys), over
    the managed instances they share."""
    scaling = plan.scaling
    if scaling is None:
        return None
    startup = INSTANCE_STARTUP_S if instance_startup_s is None else instance_startup_s
    policy = Policy.of(scaling, startup)
    primary = plan.primary.name
    if plan.endpoint_kind == "instance":
        return EndpointScaling({primary: TargetTracking(policy, in_service=plan.initial_instance_count)}, primary)
    instance = catalog_instances()[plan.instance_type]
    bounds = plan.instance_scaling
    fleet = ManagedInstances(
        instance, compute={name: _compute(m.deployment, instance) for name, m in models.items()},
        copies={name: len(m.copies) for name, m in models.items()}, initial_count=plan.initial_instance_count,
        min_count=bounds.min_instance_count if bounds else plan.initial_instance_count,
        max_count=bounds.max_instance_count if bounds else plan.initial_instance_count, instance_startup_s=startup)
    trackers = {name: TargetTracking(policy, in_service=len(m.copies), fleet=fleet, component=name)
                for name, m in models.items()}
    return EndpointScaling(trackers, primary, fleet)


def _compute(model: ModelDeployment, instance: Instance) -> ComputeRequirements:
    """A copy's ComputeResourceRequirements (a copy without them takes a whole instance)."""
    if model.compute is not None:
        return model.compute
    return ComputeRequirements(accelerators=max(1, instance.n_accelerators), cpu_cores=0, min_memory_mib=0)
