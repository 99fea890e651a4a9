"""The emulator's CloudWatch metrics: what SageMaker publishes about an endpoint, derived from the simulation
and put into the local AWS (moto), so the bench reads them back the way it reads a real endpoint's.

Names, namespaces, dimensions and units are SageMaker's (see `sagellm.aws.cloudwatch`, which reads them):
- per SageMaker invocation (timestamped when it ends): `Invocations` (1), `Invocation4XXErrors` and
  `Invocation5XXErrors` (1 or 0, from the status answered), `ModelLatency` (µs: arrival to last token on the
  engine's schedule, in simulated time; admitted requests only), `OverheadLatency` (µs: the emulator's own
  handling time around the model, wall-clock, not scaled);
- every simulated second (at most 20 times a wall second, at least once): `ConcurrentRequestsPerModel` (or
  `…PerCopy` per inference component: the most requests queued or running at once in the interval), `GPUUtilization` (per instance, 0–100 %
  per GPU summed over its GPUs: the share of the interval each copy spent in prefill or decode passes, on
  each of its TP GPUs) and `GPUMemoryUtilization` (the same scale: weights plus the KV budget the server
  allocates at start-up, over device memory, so it is flat, as for TGI and vLLM, which preallocate).
  No `CPUUtilization`: the emulator models no host CPU. No `ModelSetupTime`: that is for serverless.
Timestamps are on the simulated clock: `origin + (now − origin) ÷ time_scale` (origin: when the publisher
started, wall-clock), so a level compressed into 1 wall second spans 1/time_scale seconds of CloudWatch
time, as it would on SageMaker; the bench maps its level windows onto the same clock (`clock()` tells it
the origin). Data are high-resolution (full-precision timestamps, `StorageResolution` 1, which moto
ignores). Publishing runs in a thread, never on the serving loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sagellm.clock import Clock
from sagellm.emulator.serving.copies import ModelServer

SAGEMAKER = "AWS/SageMaker"
ENDPOINTS = "/aws/sagemaker/Endpoints"
VARIANT = "AllTraffic"
# SageMaker emits its concurrency metrics every 10 s; the emulator samples finer, so that a level compressed
# into a fraction of a wall second still holds samples.
SAMPLE_SIMULATED_S = 1.0
PUBLISH_WALL_S = 5.0
_MAX_VALUES = 150  # CloudWatch takes at most 150 values per datum ...
_MAX_DATA = 500  # ... and (moto and CloudWatch alike) a bounded number of data per call


class Publisher:
    """Collects the endpoint's metrics as it serves and puts them into CloudWatch at `url`."""

    def __init__(self, url: str, region: str, endpoint: str, models: dict[str, ModelServer], clock: Clock,
                 instance_count: int, inference_components: bool):
        import boto3  # lazy: only an emulator with a CloudWatch to publish to needs it

        self.client = boto3.client("cloudwatch", endpoint_url=url, region_name=region,
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        self.endpoint = endpoint
        self.models = models
        self.clock = clock
        self.instance_count = instance_count
        self.inference_components = inference_components
        self.components: dict[str, str] = {}  # model name → the inference-component name invoked
        # (namespace, metric, dims, unit, simulated timestamp to the ms) → values
        self._pending: dict[tuple[str, str, tuple[tuple[str, str], ...], str, float], list[float]] = defaultdict(list)
        self.origin = time.time()  # where the simulated clock meets the wall clock
        self._busy = {name: [c.busy_s for c in m.copies] for name, m in models.items()}
        self._sampled = time.perf_counter()
        self._lock = asyncio.Lock()

    # -- collecting -----------------------------------------------------------------------------------

    def _dims(self, component: str | None) -> tuple[tuple[str, str], ...]:
        if component is not None:
            return (("InferenceComponentName", component),)
        return (("EndpointName", self.endpoint), ("VariantName", VARIANT))

    def _add(self, namespace: str, metric: str, dims: tuple[tuple[str, str], ...], unit: str, value: float) -> None:
        self._pending[(namespace, metric, dims, unit, round(self.now(), 3))].append(value)

    def now(self) -> float:
        """Now on the simulated clock (epoch seconds)."""
        return self.origin + self.clock.simulated_s(time.time() - self.origin)

    def clock_info(self) -> dict[str, float]:
        """How to map wall-clock times onto the timestamps published: the origin and the time scale."""
        return {"origin": self.origin, "time_scale": self.clock.scale}

    def invocation(self, model: str | None, component: str | None, status: int, model_s: float | None,
                   wall_s: float, *, no_capacity: bool = False) -> None:
        """One SageMaker invocation ended: `model_s` its time on the engine's schedule (None if not admitted);
        `no_capacity`: refused because the component had no copy (what the scale-from-zero alarm watches)."""
        if model is not None and component is not None:
            self.components[model] = component
        dims = self._dims(component if self.inference_components else None)
        self._add(SAGEMAKER, "Invocations", dims, "None", 1.0)
        self._add(SAGEMAKER, "Invocation4XXErrors", dims, "None", 1.0 if 400 <= status < 500 else 0.0)
        self._add(SAGEMAKER, "Invocation5XXErrors", dims, "None", 1.0 if status >= 500 else 0.0)
        if self.inference_components:
            self._add(SAGEMAKER, "NoCapacityInvocationFailures", dims, "None", 1.0 if no_capacity else 0.0)
        if model_s is not None:
            self._add(SAGEMAKER, "ModelLatency", dims, "Microseconds", self.clock.simulated_s(model_s) * 1e6)
            self._add(SAGEMAKER, "OverheadLatency", dims, "Microseconds", max(0.0, wall_s - model_s) * 1e6)

    def sample(self) -> None:
        """Concurrency, GPU and GPU memory utilisation since the last sample."""
        now = time.perf_counter()
        elapsed = self.clock.simulated_s(now - self._sampled)  # simulated seconds
        if elapsed <= 0:
            return
        self._sampled = now
        endpoint = self._dims(None)
        gpu = memory = 0.0
        for name, model in self.models.items():
            busy = [c.busy_s for c in model.copies]
            before, self._busy[name] = self._busy[name], busy
            before = before[:len(busy)] + [0.0] * (len(busy) - len(before))  # copies scaled out or in
            tp = model.shape.tensor_parallel
            # A pass counts when it starts, so one that crosses a sample counts early: capped at 100 %.
            gpu += sum(min(1.0, (b - a) / elapsed) for a, b in zip(before, busy, strict=True)) * tp * 100
            shape = model.shape
            used_gb = shape.weight_gb_per_gpu + shape.kv_bytes_per_token * model.limits.max_batch_total_tokens / tp / 1e9
            memory += min(1.0, used_gb / shape.instance.device_mem_gb) * 100 * tp * len(model.copies)
            # The most in flight at once since the last sample (a request shorter than the interval counts).
            in_flight = max(model.peak_in_flight, sum(c.in_flight for c in model.copies))
            model.peak_in_flight = 0
            if self.inference_components:
                component = self.components.get(name)
                if component is not None:  # named by the first invocation (the stack names it)
                    per_copy = in_flight / len(model.copies)
                    self._add(SAGEMAKER, "ConcurrentRequestsPerCopy", self._dims(component), "None", per_copy)
            else:
                self._add(SAGEMAKER, "ConcurrentRequestsPerModel", endpoint, "None", float(in_flight))
        # Per instance, as SageMaker reports a variant: the copies' GPUs spread over the instances.
        self._add(ENDPOINTS, "GPUUtilization", endpoint, "Percent", gpu / self.instance_count)
        self._add(ENDPOINTS, "GPUMemoryUtilization", endpoint, "Percent", memory / self.instance_count)

    # -- publishing -----------------------------------------------------------------------------------

    def _data(self) -> list[dict[str, Any]]:
        pending, self._pending = self._pending, defaultdict(list)
        data = []
        for (namespace, metric, dims, unit, stamp), values in pending.items():
            for i in range(0, len(values), _MAX_VALUES):
                chunk = values[i:i + _MAX_VALUES]
                data.append({"Namespace": namespace, "MetricName": metric, "Unit": unit, "StorageResolution": 1,
                             "Dimensions": [{"Name": k, "Value": v} for k, v in dims],
                             "Timestamp": datetime.fromtimestamp(stamp, UTC),
                             "Values": chunk, "Counts": [1.0] * len(chunk)})
        return data

    def _put(self, data: list[dict[str, Any]]) -> None:
        by_namespace: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for datum in data:
            by_namespace[datum.pop("Namespace")].append(datum)
        for namespace, items in by_namespace.items():
            for i in range(0, len(items), _MAX_DATA):
                self.client.put_metric_data(Namespace=namespace, MetricData=items[i:i + _MAX_DATA])

    async def flush(self) -> None:
        """Sample now and put everything collected so far (in a thread: the serving loop keeps running)."""
        async with self._lock:
            self.sample()
            data = self._data()
            if data:
                await asyncio.to_thread(self._put, data)

    async def run(self) -> None:
        """Sample every simulated second (within 0.05–1 wall seconds); publish every few wall seconds."""
        interval = min(1.0, max(0.05, self.clock.wall_s(SAMPLE_SIMULATED_S)))
        last_put = time.perf_counter()
        while True:
            await asyncio.sleep(interval)
            if time.perf_counter() - last_put >= PUBLISH_WALL_S:
                with contextlib.suppress(Exception):  # a failed put drops its batch; the bench's flush reports errors
                    await self.flush()
                last_put = time.perf_counter()
            else:
                self.sample()
