"""resolve(): profile + model + instance + payload → a validated DeploymentPlan, `auto` filled by the planner."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sagellm import __version__
from sagellm.catalog import Instance, Model, find_instance, find_model, instances
from sagellm.catalog import models as catalog_models
from sagellm.errors import InputError
from sagellm.planner import Calibration, Payload, Shape, generation_of, max_concurrency_in_timeout, predict
from sagellm.profiles.calibration import load_calibration
from sagellm.profiles.loader import Source, Where, all_sources, load_profile, local_models
from sagellm.profiles.plan import ComputeRequirements, DeploymentPlan, ModelDeployment, ScalingPlan
from sagellm.profiles.schema import Architecture, Profile
from sagellm.profiles.validate import cap_errors, profile_errors, region_errors, with_values

# Instance families that come with local NVMe storage: SageMaker refuses VolumeSizeInGB on them.
NVME_FAMILIES = ("ml.g5.", "ml.g6.", "ml.g6e.", "ml.p4d.", "ml.p4de.", "ml.p5.", "ml.p5e.", "ml.p5en.")
# Share of the instance's vCPUs and host memory handed to inference-component copies; the rest is
# left to the SageMaker agent and the OS (write-up example: 13B on p4d → 10 vCPUs, 100 GiB per copy).
IC_CPU_SHARE = 0.9
IC_MEMORY_SHARE = 0.7
DEFAULT_PREFILL_TOKENS = 4096  # TGI's usual default for MAX_BATCH_PREFILL_TOKENS


@dataclass(frozen=True)
class Copy:
    """One model as it will be served: architecture, TP, copies and resolved TGI limits (per copy)."""

    model: Model
    tp: int
    copies: int
    quantization: str
    max_input_tokens: int
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_batch_total_tokens: int
    max_concurrent_requests: int


@dataclass(frozen=True)
class Design:
    """A resolved profile before container images are looked up (what `sagellm plan` needs)."""

    profile: Profile
    instance: Instance
    instance_count: int
    payload: Payload
    copies: tuple[Copy, ...]
    scaling: ScalingPlan | None
    region: str
    notes: tuple[str, ...] = field(default=())
    generation: str = "tgi-3"  # the server generation of the profile's container (planner.generation_of)
    calibration: Calibration | None = None  # the main model's measured correction, if one is stored

    def shape(self, instance_count: int | None = None) -> Shape:
        """The planner shape of the main model (copies × instances, admission and KV budget applied)."""
        main = self.copies[0]
        return Shape(
            model=main.model, instance=self.instance, tp_degree=main.tp, copies=main.copies,
            instance_count=instance_count or self.instance_count, quantization=main.quantization,
            max_concurrent_requests=main.max_concurrent_requests,
            max_batch_total_tokens=main.max_batch_total_tokens,
            generation=self.generation, calibration=self.calibration,
        )


def _slug(model: Model) -> str:
    return model.alias or model.hf_id.split("/")[-1].lower()


def _model(model_id: str, arch: Architecture | None, local: dict[str, Architecture], where: str) -> Model:
    arch = arch or local.get(model_id)
    if arch is None:
        return find_model(model_id, where)
    return Model(hf_id=model_id, **arch.model_dump())


def _valid_tp(model: Model, gpus: int) -> list[int]:
    """TP degrees the server can shard this model at on this instance (divisors of GPUs and heads)."""
    out = []
    for tp in range(1, gpus + 1):
        if gpus % tp or model.n_heads % tp:
            continue
        if model.n_kv_heads > 1 and (tp > model.n_kv_heads or model.n_kv_heads % tp):
            continue
        out.append(tp)
    return out


def _fits(model: Model, instance: Instance, tp: int, quant: str, payload: Payload) -> bool:
    shape = Shape(model, instance, tp, quantization=quant)
    return shape.memory_shortfall_gb == 0 and shape.max_sequences(payload) >= 1


def _per_copy_limit(shape: Shape, payload: Payload) -> int:
    single = replace(shape, copies=1, instance_count=1, max_concurrent_requests=None)
    return max_concurrency_in_timeout(single, payload)


def _choose_instance(profile: Profile, model: Model, payload: Payload, region: str, gen: str) -> Instance:
    """instance_type: auto — the cheapest type (per hour or per predicted token) where the model fits."""
    quant = profile.serving.quantization
    best: tuple[float, Instance] | None = None
    for inst in instances().values():
        price = inst.price_per_h(region)
        if inst.is_neuron or price is None:
            continue  # Neuron needs compiled artefacts; unpriced types can't be ranked
        tps = [tp for tp in _valid_tp(model, inst.n_accelerators) if _fits(model, inst, tp, quant, payload)]
        if not tps:
            continue
        tp = max(tps)
        if profile.instance_selection == "cheapest-per-hour":
            score = price
        else:
            shape = Shape(model, inst, tp, quantization=quant, generation=gen)
            limit = _per_copy_limit(shape, payload)
            curve = predict(replace(shape, max_concurrent_requests=limit or 1), payload, (max(1, limit),), region)
            cost = curve.usd_per_1m_tokens(curve.points[0])
            if cost is None or not curve.points[0].within_timeout:
                continue
            score = cost
        if best is None or score < best[0]:
            best = (score, inst)
    if best is None:
        raise InputError(f"instance_type: auto: {model.hf_id} fits no priced instance type at quantization "
                         f"{quant!r} (try serving.quantization: gptq, or a bigger payload-free profile)")
    return best[1]


def design(
    profile: Profile,
    model_id: str,
    sources: dict[str, Source],
    *,
    instance: str | None = None,
    payload: Payload | None = None,
    region: str = "us-east-1",
    tensor_parallel: int | None = None,
    copies: int | None = None,
    instance_count: int | None = None,
    profiles_dir: Path | None = None,
) -> Design:
    """Fill every `auto` value and validate; all errors of the profile are raised together."""
    # Values given on the command line (or as CDK context) are named by their option, not a profile line.
    given = {"instance_type": ("instance", instance), "serving.tensor_parallel": ("tensor_parallel", tensor_parallel),
             "components.copies": ("replicas", copies), "initial_instance_count": ("instance_count", instance_count)}
    where = Where(profile.name, sources, {path: label for path, (label, value) in given.items() if value is not None})
    # The one validation path first (what `profiles validate` runs), on the profile as overridden.
    problems = region_errors(region) + profile_errors(
        with_values(profile, {path: value for path, (_, value) in given.items() if value is not None}), where)
    if problems:
        raise InputError(problems)
    errors: list[str] = []
    payload = payload or Payload(profile.payload.input_tokens, profile.payload.output_tokens)
    local = local_models(profiles_dir)
    model = _model(model_id, profile.architecture, local, "model")
    s = profile.serving
    quant = s.quantization
    gen = generation_of(profile.container, profile.container_version)

    inst_name = instance if instance is not None else _pinned(profile.instance_type)
    if inst_name is None:
        inst = _choose_instance(profile, model, payload, region, gen)
    else:
        inst = find_instance(inst_name, where("instance_type"))
    gpus = inst.n_accelerators
    count = instance_count if instance_count is not None else profile.initial_instance_count
    ic = profile.endpoint_kind == "inference-component"

    # Extra models on an inference-component endpoint take their GPUs first.
    extras: list[Copy] = []
    used = 0
    for i, extra in enumerate(profile.components.extra_models):
        xm = _model(extra.model, None, local, f"components.extra_models[{i}].model")
        xshape = Shape(xm, inst, extra.tensor_parallel, quantization=extra.quantization)
        extras.append(_caps(xm, extra.tensor_parallel, extra.copies, extra.quantization, xshape, payload,
                            profile, where, errors, prefix=f"components.extra_models[{i}]"))
        used += extra.tensor_parallel * extra.copies

    # TP degree: pinned, or the planner's choice.
    tp_pin = tensor_parallel if tensor_parallel is not None else _pinned(s.tensor_parallel)
    valid = _valid_tp(model, gpus)
    if tp_pin is not None:
        tp = tp_pin
        if gpus % tp or tp > gpus:
            errors.append(f"{where('serving.tensor_parallel')}: {tp} must divide the {gpus} accelerators of "
                          f"{inst.instance_type} (valid: {', '.join(map(str, valid)) or 'none'})")
        elif tp not in valid:
            errors.append(f"{where('serving.tensor_parallel')}: {tp} cannot shard {model.hf_id} "
                          f"(attention heads: {model.n_heads}, KV heads: {model.n_kv_heads}; valid: "
                          f"{', '.join(map(str, valid)) or 'none'})")
    elif ic:
        tp = _best_ic_tp(model, inst, quant, payload, gpus - used, valid, gen) or (max(valid) if valid else 1)
    else:
        tp = max(valid) if valid else 1

    copies_pin = copies if copies is not None else _pinned(profile.components.copies)
    n_copies = copies_pin or (max(1, (gpus - used) // tp) if ic else 1)
    if ic and n_copies * tp + used > gpus:
        errors.append(f"{where('components.copies')}: {n_copies} copies × {tp} GPUs"
                      f"{f' + {used} GPUs of extra models' if used else ''} exceed the {gpus} accelerators of "
                      f"{inst.instance_type} (at most {max(0, (gpus - used) // tp)} copies at TP {tp})")

    calibration = load_calibration(profiles_dir, model.hf_id, inst.instance_type, profile.container,
                                   profile.container_version)
    shape = Shape(model, inst, tp, copies=n_copies, instance_count=count, quantization=quant, generation=gen,
                  calibration=calibration)
    if shape.memory_shortfall_gb > 0:
        errors.append(_misfit(model, inst, tp, quant, shape, payload, where("instance_type"), valid))
    main = _caps(model, tp, n_copies, quant, shape, payload, profile, where, errors, prefix="serving")
    copies_all = (main, *extras)

    scaling = None
    if profile.autoscaling is not None:
        scaling = _scaling(profile, main, inst, payload, region, ic, shape)
    if errors:
        raise InputError(errors)
    return Design(profile, inst, count, payload, copies_all, scaling, region, generation=gen,
                  calibration=calibration)


def _pinned(value: Any) -> Any:
    """A profile value, or None where it is `auto`."""
    return None if value == "auto" else value


def _best_ic_tp(model: Model, inst: Instance, quant: str, payload: Payload, gpus: int, valid: list[int],
                gen: str) -> int | None:
    """TP per copy with the best predicted instance throughput inside the timeout (copies = GPUs ÷ TP)."""
    best: tuple[float, int] | None = None
    for tp in valid:
        if tp > gpus or not _fits(model, inst, tp, quant, payload):
            continue
        shape = Shape(model, inst, tp, copies=gpus // tp, quantization=quant, generation=gen)
        limit = _per_copy_limit(shape, payload)
        if limit == 0:
            continue
        point = predict(replace(shape, max_concurrent_requests=limit), payload, (limit * shape.copies,)).points[0]
        if best is None or point.throughput_tokens_per_s > best[0] * 1.02:  # prefer fewer GPUs on a tie
            best = (point.throughput_tokens_per_s, tp)
    return best[1] if best else None


def _misfit(model: Model, inst: Instance, tp: int, quant: str, shape: Shape, payload: Payload, where: str,
            valid: list[int]) -> str:
    """Say how much memory is missing and what would fit."""
    fixes = [f"tensor_parallel {t}" for t in valid if t > tp and _fits(model, inst, t, quant, payload)]
    if quant == "none" and _fits(model, inst, tp, "gptq", payload):
        fixes.append("serving.quantization: gptq (or awq)")
    bigger = sorted(
        (i for i in instances().values() if not i.is_neuron and any(
            _fits(model, i, t, quant, payload) for t in _valid_tp(model, i.n_accelerators))),
        key=lambda i: i.price_per_h("us-east-1") or 1e9,
    )[:3]
    fixes += [i.instance_type for i in bigger]
    return (f"{where}: {model.hf_id} needs {shape.weight_gb_per_gpu:.1f} GB of weights per accelerator at TP {tp} "
            f"({quant}) but {inst.instance_type} has {shape.usable_gb_per_gpu:.1f} GB usable: "
            f"{shape.memory_shortfall_gb:.1f} GB missing; would fit: {', '.join(fixes) or 'nothing in the catalog'}")


def _caps(model: Model, tp: int, n_copies: int, quant: str, shape: Shape, payload: Payload, profile: Profile,
          where: Where, errors: list[str], prefix: str) -> Copy:
    """Resolve TGI's token and admission limits for one model; validate them against each other."""
    s = profile.serving
    main = prefix == "serving"

    def pinned(name: str, auto_value: int) -> int:
        value = getattr(s, name) if main else "auto"
        return auto_value if value == "auto" else int(value)

    max_input = pinned("max_input_tokens", payload.input_tokens)
    max_total = pinned("max_total_tokens", max_input + payload.output_tokens)
    kv = shape.kv_capacity_tokens
    batch_total = pinned("max_batch_total_tokens", kv)
    prefill = pinned("max_batch_prefill_tokens", min(max(max_input, DEFAULT_PREFILL_TOKENS), max(batch_total, max_input)))
    sized = Payload(max_input, max_total - max_input) if max_total > max_input else payload
    limit = _per_copy_limit(replace(shape, max_batch_total_tokens=batch_total), sized) if shape.memory_shortfall_gb == 0 else 1
    concurrent = pinned("max_concurrent_requests", max(1, limit))
    w = (lambda f: where(f"serving.{f}")) if main else (lambda f: f"{where('components.extra_models')}: {prefix}")

    errors.extend(cap_errors(max_input, max_total, prefill, w))
    if max_total > model.max_context:
        errors.append(f"{w('max_total_tokens')}: {max_total} exceeds the {model.max_context}-token context of "
                      f"{model.hf_id}; lower max_total_tokens or the payload")
    if shape.memory_shortfall_gb == 0 and batch_total > kv:
        errors.append(f"{w('max_batch_total_tokens')}: {batch_total} exceeds the {kv} KV-cache tokens that fit "
                      f"in free memory at TP {tp}; use auto or at most {kv}")
    if shape.memory_shortfall_gb == 0 and batch_total < max_total:
        errors.append(f"{w('max_batch_total_tokens')}: {batch_total} cannot hold one request of max_total_tokens "
                      f"({max_total}); raise it to at least {max_total} or lower the token caps")
    if shape.memory_shortfall_gb == 0 and limit == 0 and s.max_concurrent_requests == "auto" and main:
        errors.append(f"{w('max_concurrent_requests')}: auto: even one request of {sized.input_tokens}+"
                      f"{sized.output_tokens} tokens is predicted to exceed the 60 s invocation timeout; "
                      "shorten the payload or use a faster instance")
    return Copy(model, tp, n_copies, quant, max_input, max_total, prefill, batch_total, concurrent)


def _scaling(profile: Profile, main: Copy, inst: Instance, payload: Payload, region: str, ic: bool,
             planned: Shape) -> ScalingPlan:
    a = profile.autoscaling
    assert a is not None
    target = a.target_value
    if target == "auto":
        shape = replace(planned, copies=1 if ic else main.copies, instance_count=1,
                        max_concurrent_requests=main.max_concurrent_requests,
                        max_batch_total_tokens=main.max_batch_total_tokens)
        sweep = tuple(2**i for i in range(13) if 2**i <= max(1, main.max_concurrent_requests * shape.copies))
        knee = predict(shape, payload, sweep, region).knee
        if knee is None:
            target = 1.0
        elif ic:
            target = float(knee.concurrency)  # concurrent requests per copy
        else:
            target = float(max(1, round(knee.requests_per_s * 60)))  # invocations per instance per minute
    return ScalingPlan(min_capacity=a.min_capacity, max_capacity=a.max_capacity, target_value=target,
                       scale_in_cooldown_s=a.scale_in_cooldown_s, scale_out_cooldown_s=a.scale_out_cooldown_s)


def environment(copy: Copy, container: str, profile: Profile, neuron: bool) -> dict[str, str]:
    """The container environment of one model (TGI names, or LMI's OPTION_* equivalents)."""
    if container == "lmi":
        env = {
            "HF_MODEL_ID": copy.model.hf_id,
            "OPTION_TENSOR_PARALLEL_DEGREE": str(copy.tp),
            "OPTION_MAX_MODEL_LEN": str(copy.max_total_tokens),
            "OPTION_MAX_ROLLING_BATCH_SIZE": str(copy.max_concurrent_requests),
            "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS": str(copy.max_batch_prefill_tokens),
        }
        if copy.quantization != "none":
            env["OPTION_QUANTIZE"] = copy.quantization
    else:
        env = {
            "HF_MODEL_ID": copy.model.hf_id,
            "SM_NUM_GPUS": str(copy.tp),
            "MAX_INPUT_TOKENS": str(copy.max_input_tokens),
            "MAX_TOTAL_TOKENS": str(copy.max_total_tokens),
            "MAX_BATCH_PREFILL_TOKENS": str(copy.max_batch_prefill_tokens),
            "MAX_BATCH_TOTAL_TOKENS": str(copy.max_batch_total_tokens),
            "MAX_CONCURRENT_REQUESTS": str(copy.max_concurrent_requests),
        }
        if copy.quantization != "none":
            env["HF_MODEL_QUANTIZE"] = copy.quantization
        if neuron:  # optimum-neuron compiles for a fixed batch and NeuronCore count (2 per Inferentia2 chip)
            env |= {"HF_NUM_CORES": str(2 * copy.tp), "HF_AUTO_CAST_TYPE": "bf16",
                    "MAX_BATCH_SIZE": str(copy.max_concurrent_requests)}
    return env | dict(profile.serving.environment)


def _weights_gb(copy: Copy) -> float:
    return copy.model.weight_bytes(copy.quantization) / 1e9


def to_plan(d: Design) -> DeploymentPlan:
    """Turn a design into the DeploymentPlan, looking up container images."""
    from sagellm.profiles.images import image_uri

    p, inst = d.profile, d.instance
    neuron = inst.is_neuron
    image = image_uri("tgi-neuron" if neuron and p.container == "tgi" else p.container, d.region, p.container_version)
    ic = p.endpoint_kind == "inference-component"
    total_copies = sum(c.copies for c in d.copies)
    names: list[str] = []
    models = []
    for c in d.copies:
        name = _slug(c.model)
        name = name if name not in names else f"{name}-{len(names)}"
        names.append(name)
        compute = None
        if ic:
            cpu = p.components.cpu_cores_per_copy
            mem = p.components.memory_mib_per_copy
            compute = ComputeRequirements(
                accelerators=c.tp,
                cpu_cores=cpu if cpu != "auto" else max(1, math.floor(inst.vcpus * IC_CPU_SHARE / total_copies)),
                min_memory_mib=mem if mem != "auto" else
                max(1024, math.floor(inst.host_mem_gib * 1024 * IC_MEMORY_SHARE / total_copies / 1024) * 1024),
            )
        custom = c.model.hf_id not in catalog_models()
        arch = Architecture(**{f: getattr(c.model, f) for f in Architecture.model_fields}) if custom else None
        models.append(ModelDeployment(name=name, model_id=c.model.hf_id, image_uri=image,
                                      environment=environment(c, p.container, p, neuron), tp_degree=c.tp,
                                      quantization=c.quantization, compute=compute, copy_count=c.copies,
                                      architecture=arch))
    weights = max(_weights_gb(c) for c in d.copies)
    # Start-up: download + load + warm-up grow with the weights; large models need 10+ minutes.
    startup = p.startup_health_check_timeout_s
    startup = startup if startup != "auto" else int(min(3600, max(600, 60 * math.ceil((600 + 6 * weights) / 60))))
    download = p.model_data_download_timeout_s
    download = download if download != "auto" else startup
    volume: int | None
    if p.volume_size_gb != "auto":
        volume = p.volume_size_gb
    elif inst.instance_type.startswith(NVME_FAMILIES):
        volume = None
    else:
        volume = math.ceil(weights * 1.5 + 30)
    tags = {"sagellm:profile": p.name, "sagellm:model": d.copies[0].model.hf_id, "sagellm:version": __version__}
    return DeploymentPlan(
        profile=p.name, region=d.region, container=p.container, instance_type=inst.instance_type,
        initial_instance_count=d.instance_count, endpoint_kind=p.endpoint_kind, models=tuple(models),
        scaling=d.scaling, startup_health_check_timeout_s=startup, model_data_download_timeout_s=download,
        volume_size_gb=volume, hf_token_secret=p.hf_token_secret, input_tokens=d.payload.input_tokens,
        output_tokens=d.payload.output_tokens, tags=tags | dict(p.tags),
    )


def design_for(profile: str, model: str, instance: str | None = None, *, payload: Payload | None = None,
               region: str = "us-east-1", profiles_dir: Path | None = None, tensor_parallel: int | None = None,
               copies: int | None = None, instance_count: int | None = None) -> Design:
    """Load a profile by name and design it (no container images: fast, for the planner CLI)."""
    sources = all_sources(profiles_dir)
    prof = load_profile(profile, sources)
    return design(prof, model, sources, instance=instance, payload=payload, region=region,
                  tensor_parallel=tensor_parallel, copies=copies, instance_count=instance_count,
                  profiles_dir=profiles_dir)


def resolve(profile: str, model: str, instance: str | None = None, *, payload: Payload | None = None,
            region: str = "us-east-1", profiles_dir: Path | None = None, tensor_parallel: int | None = None,
            copies: int | None = None, instance_count: int | None = None) -> DeploymentPlan:
    """Profile name + model (+ instance, payload, region) → a validated DeploymentPlan."""
    return to_plan(design_for(profile, model, instance, payload=payload, region=region, profiles_dir=profiles_dir,
                              tensor_parallel=tensor_parallel, copies=copies, instance_count=instance_count))
