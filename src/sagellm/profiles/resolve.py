"""resolve(): profile + model + instance + payload → a validated DeploymentPlan, `auto` filled by the planner."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sagellm import __version__
from sagellm.catalog import (
    Instance,
    Model,
    check_offered,
    find_instance,
    find_model,
    instances,
    local_folder,
    pricing,
)
from sagellm.catalog import models as catalog_models
from sagellm.catalog.model import BYTES_PER_PARAM
from sagellm.catalog.s3_weights import CONTAINER_MODEL_DIR, s3_model, upload_first
from sagellm.engines import (
    ENGINES,
    CompiledShape,
    Engine,
    Settings,
    compiling_engine,
    engine_for,
    engine_option,
)
from sagellm.errors import InputError
from sagellm.planner import (
    Calibration,
    Payload,
    Shape,
    fits,
    fitting_tps,
    max_concurrency_in_timeout,
    predict,
    usd_per_1m_tokens,
    valid_tp,
)
from sagellm.profiles.calibration import load_calibration
from sagellm.profiles.loader import Read, Source, Where, all_sources, load_profile, local_models, read_profile
from sagellm.profiles.plan import (
    CONCURRENT_REQUESTS_PER_COPY,
    CONCURRENT_REQUESTS_PER_MODEL,
    VERSION_TAG,
    ComputeRequirements,
    DeploymentPlan,
    InstanceScaling,
    ModelDeployment,
    ScalingPlan,
    instances_for,
)
from sagellm.profiles.schema import Architecture, Container, ExtraModel, Profile, Serving
from sagellm.profiles.validate import (
    cap_errors,
    profile_errors,
    quantization_errors,
    region_errors,
    with_values,
)

# Share of the instance's vCPUs and host memory handed to inference-component copies; the rest is
# left to the SageMaker agent and the OS (write-up example: 13B on p4d → 10 vCPUs, 100 GiB per copy).
IC_CPU_SHARE = 0.9
IC_MEMORY_SHARE = 0.7
# max_total_tokens: auto keeps the model's whole context unless the KV cache could not hold this many
# full-length sequences at once (one long request must not shut every other caller out).
FULL_LENGTH_SEQUENCES = 2


@dataclass(frozen=True)
class Copy:
    """One model as it will be served: architecture, TP, copies and resolved server limits (per copy)."""

    model: Model
    tensor_parallel: int
    copies: int
    quantization: str
    max_input_tokens: int
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_concurrent_requests: int
    max_batch_size: int | None  # running sequences (TGI MAX_BATCH_SIZE, LMI's rolling batch); None: KV decides


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
    container: str  # tgi | lmi
    container_version: str  # the pinned image version
    notes: tuple[str, ...] = field(default=())
    generation: str = "tgi-3"  # the engine's generation at the pinned version (sagellm.engines)
    calibration: Calibration | None = None  # the main model's measured correction, if one is stored
    model_s3_uri: str | None = None  # the main model's weights staged in S3 (else the Hub)

    @property
    def engine(self) -> Engine:
        """The serving engine: what the pinned server reads, how it batches, its image (sagellm.engines)."""
        return engine_for(self.container, neuron=self.instance.is_neuron)

    def shape(self, instance_count: int | None = None) -> Shape:
        """The planner shape of the main model (copies × instances, admission and batch limits applied)."""
        return _shape(self.copies[0], self.instance, self.engine, copies=self.copies[0].copies,
                      instance_count=instance_count or self.instance_count, generation=self.generation,
                      calibration=self.calibration)

    @property
    def usd_per_instance_h(self) -> float | None:
        """The on-demand price of one instance in the design's region, $/h."""
        return self.instance.price_per_h(self.region)

    @property
    def environment(self) -> dict[str, str]:
        """The main model's container environment."""
        return environment(self.copies[0], self)

    def plan(self, hf_token_secret: str | None = None) -> DeploymentPlan:
        """The DeploymentPlan to deploy (container images looked up; `hf_token_secret` overrides the profile's)."""
        return to_plan(self, hf_token_secret)

    def folder_errors(self, model: str = "model", s3_option: str = "model_s3_uri=") -> list[str]:
        """One line per model read from a local folder that SageMaker could not load (it reads weights from the Hub
        or S3, never from this machine): the main model without weights in S3 (how to stage them, `s3_option`
        spelled as the caller's users pass it), an extra model (always from the Hub)."""
        main = self.copies[0].model.folder
        errors = [f"{model}: {upload_first(main, s3_option)}"] if main and self.model_s3_uri is None else []
        return errors + [f"components.extra_models[{i}].model: {c.model.folder} is a local folder, which SageMaker "
                         "cannot read, and extra models are served from the Hugging Face Hub: give its Hub id"
                         for i, c in enumerate(self.copies[1:]) if c.model.folder]


def _shape(copy: Copy, inst: Instance, engine: Engine, *, copies: int, instance_count: int, generation: str,
           calibration: Calibration | None) -> Shape:
    """The planner shape of a copy as its server runs it: the KV budget is what memory allows (no server
    generation sagellm pins honours MAX_BATCH_TOTAL_TOKENS for flash-attention models); TGI refuses above its
    admission limit, LMI queues and runs at most its rolling batch."""
    return Shape(
        model=copy.model, instance=inst, tensor_parallel=copy.tensor_parallel, copies=copies, instance_count=instance_count,
        quantization=copy.quantization,
        max_concurrent_requests=None if engine.queues else copy.max_concurrent_requests,
        max_batch_size=copy.max_batch_size, max_batch_prefill_tokens=copy.max_batch_prefill_tokens,
        max_batch_total_tokens=engine.compiled_kv_tokens(copy.max_batch_size, copy.max_total_tokens),
        generation=generation, calibration=calibration,
    )


def _slug(model: Model) -> str:
    return model.alias or model.hf_id.split("/")[-1].lower()


def _model(model_id: str, arch: Architecture | None, local: dict[str, Architecture], where: str,
           s3_uri: str | None = None) -> Model:
    arch = arch or local.get(model_id)
    if arch is None and s3_uri is not None and model_id not in catalog_models() and local_folder(model_id) is None:
        return s3_model(model_id, s3_uri)  # its facts from the config.json staged beside the weights
    if arch is None:
        return find_model(model_id, where)
    return Model(hf_id=model_id, **arch.model_dump())


def _per_copy_limit(shape: Shape, payload: Payload) -> int:
    single = replace(shape, copies=1, instance_count=1, max_concurrent_requests=None)
    return max_concurrency_in_timeout(single, payload)


def _choose_instance(profile: Profile, model: Model, payload: Payload, region: str, gen: str) -> Instance:
    """instance_type: auto — the cheapest type (per hour or per predicted token) the region offers where the model
    fits, by the region's own prices (pricing.price), never another region's."""
    quant = profile.serving.quantization
    best: tuple[float, Instance] | None = None
    priced = False
    for inst in instances().values():
        price = inst.price_per_h(region)
        if inst.is_neuron or price is None or inst.offered_in(region) is False:
            continue  # Neuron needs compiled artefacts; unpriced types can't be ranked; the region lacks it
        priced = True
        tps = fitting_tps(model, inst, quant, payload, gen)
        if not tps:
            continue
        tp = max(tps)
        if profile.instance_selection == "cheapest-per-hour":
            score = price
        else:
            shape = Shape(model, inst, tp, quantization=quant, generation=gen)
            limit = _per_copy_limit(shape, payload)
            curve = predict(replace(shape, max_concurrent_requests=limit or 1), payload, (max(1, limit),), region)
            cost = usd_per_1m_tokens(curve.points[0].throughput_tokens_per_s, price)
            if cost is None or not curve.points[0].within_timeout:
                continue
            score = cost
        if best is None or score < best[0]:
            best = (score, inst)
    if not priced:
        raise InputError(f"instance_type: auto: no {region} price to choose an instance type by: "
                         f"{pricing.unknown_why(region)}; name one (--instance, -c instance=…), give prices "
                         f"({pricing.PRICES_ENV}) or allow the AWS Price List (pricing:GetProducts; docs/regions.md)")
    if best is None:
        raise InputError(f"instance_type: auto: {model.hf_id} fits no priced instance type {region} offers at "
                         f"quantization {quant!r} (try serving.quantization: gptq, or a bigger payload-free profile)")
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
    model_s3_uri: str | None = None,
    engine: str | None = None,
    read: Read | None = None,
) -> Design:
    """Fill every `auto` value and validate; all errors of the profile are raised together. `model_s3_uri` (else
    the profile's `model_source`) stages the main model's weights in S3; `engine` serves the profile on another
    container kind, at that engine's pinned version; `read`: how the profile was read, with its files' errors."""
    if engine_option(engine) not in (None, profile.container.kind):
        # The profile's version and image pin are its own kind's: the other engine runs its pinned image.
        profile = profile.model_copy(update={"container": Container(kind=engine)})
    # Values given on the command line (or as CDK context) are named by their option, not a profile line.
    given = {"instance_type": ("instance", instance), "serving.tensor_parallel": ("tensor_parallel", tensor_parallel),
             "components.copies": ("replicas", copies), "initial_instance_count": ("instance_count", instance_count),
             "container.kind": ("engine", engine), "payload": ("input_tokens/output_tokens", payload)}
    where = _validated(profile, sources, region, given, read)
    errors: list[str] = []
    payload = payload or Payload(profile.payload.input_tokens, profile.payload.output_tokens)
    local = local_models(profiles_dir)
    source = model_s3_uri or (profile.model_source.s3_uri if profile.model_source is not None else None)
    model = _model(model_id, profile.architecture, local, "model", source)
    profile, stored = _stored_quantization(profile, model, where)
    s = profile.serving
    quant = s.quantization
    kind = profile.container.kind
    # The planner's physics and constants are the kind's GPU server's, an Inferentia plan's too (its environment
    # and image are the Inferentia engine's: Design.engine).
    gpu_engine = ENGINES[kind]
    version = profile.container.version or gpu_engine.pinned
    gen = gpu_engine.generation(version).name

    inst = _instance(profile, instance, model, payload, region, gen, where)
    # The engine whose limits size the copies, and the one whose compiled shapes they run (None: dynamic batching).
    sizing, compiled_by = _sizing_engine(profile, inst, version, where, errors)
    gpus = inst.n_accelerators
    count = instance_count if instance_count is not None else profile.initial_instance_count
    ic = profile.endpoint_kind == "inference-component"

    # Extra models on an inference-component endpoint take their GPUs first.
    extras = [_extra_copy(i, extra, inst, local, payload, profile, where, errors, sizing, compiled_by, version)
              for i, extra in enumerate(profile.components.extra_models)]
    used = sum(extra.tensor_parallel * extra.copies for extra in profile.components.extra_models)

    tp_pin = _given_or_pinned(tensor_parallel, s.tensor_parallel)
    tp, valid = _tp(tp_pin, compiled_by, model, inst, ic, s, payload, gpus - used, gen, where, errors)
    shapes = _compiled(compiled_by, model, tp)
    if compiled_by is not None and shapes == ():  # nothing to check the rest against: this line says what would run
        raise InputError([*errors, _uncompiled(compiled_by, model, inst, tp_pin, where)])

    n_copies = _copy_count(_given_or_pinned(copies, profile.components.copies), ic, tp, used, inst, where, errors)

    calibration = load_calibration(profiles_dir, model.hf_id, inst.instance_type, kind, version)
    shape = Shape(model, inst, tp, copies=n_copies, instance_count=count, quantization=quant, generation=gen,
                  calibration=calibration)
    if shape.memory_shortfall_gb > 0:
        errors.append(_misfit(model, inst, tp, quant, shape, payload, where("instance_type"), valid, gen))
    main = _caps(model, tp, n_copies, quant, shape, payload, profile, where, errors, prefix="serving",
                 engine=sizing, version=version, shapes=shapes)
    copies_all = (main, *extras)

    scaling = _scaling(profile, main, inst, payload, region, ic, sizing, gen, calibration, where, errors)
    if errors:
        raise InputError(errors)
    # `plan` and `profiles show` plan a local folder's architecture and say how it would be deployed.
    staged = (upload_first(model.folder, "-c model_s3_uri="),) if model.folder and source is None else ()
    return Design(profile, inst, count, payload, copies_all, scaling, region, kind, version,
                  notes=stored + _core_notes(compiled_by, inst, copies_all) + staged, generation=gen,
                  calibration=calibration, model_s3_uri=source)


def _core_notes(engine: Engine | None, inst: Instance, copies: tuple[Copy, ...]) -> tuple[str, ...]:
    """How the copies use the compiled cores of the instance, as the engine says (`plan`, `profiles show`)."""
    if engine is None:
        return ()
    return engine.core_notes(inst.instance_type, inst.n_accelerators, copies[0].model.hf_id,
                             [(c.tensor_parallel, c.copies) for c in copies])


def _validated(profile: Profile, sources: dict[str, Source], region: str,
               given: dict[str, tuple[str, Any]], read: Read | None) -> Where:
    """Where each value comes from, once the one validation path (what `profiles validate` runs) passes on the
    profile as overridden by the values given; with the errors of its files (`read`), all together."""
    where = Where(profile.name, sources, {path: label for path, (label, value) in given.items() if value is not None})
    overrides = {path: value for path, (_, value) in given.items() if value is not None and path != "payload"}
    refused = read.refused - set(overrides) if read is not None else frozenset()
    problems = ((read.errors if read is not None else []) + region_errors(region, profile.endpoint_kind)
                + profile_errors(with_values(profile, overrides), where, refused))
    if problems:
        raise InputError(problems)
    return where


def _instance(profile: Profile, instance: str | None, model: Model, payload: Payload, region: str, gen: str,
              where: Where) -> Instance:
    """The instance type given or pinned, else the cheapest where the model fits (instance_type: auto)."""
    name = _given_or_pinned(instance, profile.instance_type)
    if name is None:
        return _choose_instance(profile, model, payload, region, gen)
    inst = find_instance(name, where("instance_type"))
    check_offered(inst.instance_type, region, where("instance_type"))
    return inst


def _copy_count(pinned: int | None, ic: bool, tp: int, used: int, inst: Instance, where: Where,
                errors: list[str]) -> int:
    """Copies of the main model: pinned, else as many as the GPUs the extra models leave (one without components)."""
    gpus = inst.n_accelerators
    n_copies = pinned or (max(1, (gpus - used) // tp) if ic else 1)
    if ic and n_copies * tp + used > gpus:
        errors.append(f"{where('components.copies')}: {n_copies} copies × {tp} GPUs"
                      f"{f' + {used} GPUs of extra models' if used else ''} exceed the {gpus} accelerators of "
                      f"{inst.instance_type} (at most {max(0, (gpus - used) // tp)} copies at TP {tp})")
    return n_copies


def _extra_copy(i: int, extra: ExtraModel, inst: Instance, local: dict[str, Architecture], payload: Payload,
                profile: Profile, where: Where, errors: list[str], engine: Engine, compiled_by: Engine | None,
                version: str) -> Copy:
    """An extra model of an inference-component endpoint, sized like the main one on the GPUs it pins."""
    xm = _model(extra.model, None, local, f"components.extra_models[{i}].model")
    # An extra model names its stored method itself (the engine check of profile_errors then covers it).
    errors.extend(_checkpoint_errors(xm, extra.quantization, f"components.extra_models.{i}.quantization", where,
                                     adopts_none=False))
    xshape = Shape(xm, inst, extra.tensor_parallel, quantization=extra.quantization)
    xshapes = _extra_shapes(compiled_by, xm, extra.tensor_parallel,
                            f"{where('components.extra_models')}: [{i}]", errors)
    return _caps(xm, extra.tensor_parallel, extra.copies, extra.quantization, xshape, payload, profile, where,
                 errors, prefix=f"components.extra_models[{i}]", engine=engine, version=version, shapes=xshapes)


def _stored_quantization(profile: Profile, model: Model, where: Where) -> tuple[Profile, tuple[str, ...]]:
    """A pre-quantized checkpoint served as it is stored: `none` becomes its method (checked against the engine),
    with a note saying so; another method, or one sagellm cannot size, is refused (every size depends on it)."""
    quant = profile.serving.quantization
    if errors := _checkpoint_errors(model, quant, "serving.quantization", where, adopts_none=True):
        raise InputError(errors)
    if model.quantization is None or quant != "none":
        return profile, ()
    serving = profile.serving.model_copy(update={"quantization": model.quantization})
    profile = profile.model_copy(update={"serving": serving})
    stored_at = f"{model.hf_id}: its config.json quantization_config.quant_method"
    if errors := quantization_errors(profile, lambda path: stored_at if path == "serving.quantization" else where(path)):
        raise InputError(errors)
    return profile, (f"serving.quantization: {model.quantization}, as {model.hf_id}'s config.json stores its weights",)


def _checkpoint_errors(model: Model, quant: str, field: str, where: Where, *, adopts_none: bool) -> list[str]:
    """A quantization other than the one a pre-quantized checkpoint is stored in (its config.json; `none` too unless
    the caller `adopts_none`), or a stored one sagellm cannot size: the server reads the weights as they are, and
    the plan must size them so."""
    stored = model.quantization
    if stored is None or stored == quant or (adopts_none and quant == "none" and stored in BYTES_PER_PARAM):
        return []
    if stored not in BYTES_PER_PARAM:
        sized = ", ".join(q for q in BYTES_PER_PARAM if q != "none")
        return [(f"{where(field)}: {model.hf_id}'s weights are stored quantized with {stored!r} (its config.json "
                f"quantization_config), which sagellm does not size (it sizes {sized}); pick a checkpoint of one "
                "of those, or the unquantized model")]
    return [(f"{where(field)}: {quant!r}, but {model.hf_id}'s weights are stored quantized with {stored} (its "
            f"config.json quantization_config.quant_method); set {field}: {stored} (the server loads that format, "
            "and memory is sized by it)")]


def _auto_tp(ic: bool, model: Model, inst: Instance, quant: str, payload: Payload, free_gpus: int,
             valid: list[int], candidates: list[int], gen: str) -> int:
    """The planner's TP degree: an inference component's best per-copy split, else the widest that fits."""
    if ic:
        return _best_ic_tp(model, inst, quant, payload, free_gpus, candidates, gen) or (max(valid) if valid else 1)
    return max(candidates or valid or [1])


def _tp_errors(tp: int, valid: Sequence[int], model: Model, inst: Instance, where: str) -> list[str]:
    """A pinned TP degree must be one of `valid`: on GPUs one that divides the accelerators and shards the heads."""
    gpus = inst.n_accelerators
    if tp > gpus or (gpus % tp and tp not in valid):
        return [(f"{where}: {tp} must divide the {gpus} accelerators of {inst.instance_type} "
                f"(valid: {', '.join(map(str, valid)) or 'none'})")]
    if tp not in valid:
        return [(f"{where}: {tp} cannot shard {model.hf_id} (attention heads: {model.n_heads}, KV heads: "
                f"{model.n_kv_heads}; valid: {', '.join(map(str, valid)) or 'none'})")]
    return []


def _sizing_engine(profile: Profile, inst: Instance, version: str, where: Where,
                   errors: list[str]) -> tuple[Engine, Engine | None]:
    """The engine whose limits size the copies, and the one whose compiled shapes they run (on Inferentia, the
    kind's build there; None: the server batches dynamically), with the image pin checked against the image this
    instance type runs."""
    kind = profile.container.kind
    compiling = compiling_engine(kind, inst.instance_type, neuron=inst.is_neuron, where_kind=where("container.kind"),
                                 errors=errors)
    if (pin := profile.container.image_pin) is not None and (compiling is not None or not inst.is_neuron):
        errors.extend((compiling or ENGINES[kind]).pin_errors(version, pin, where("container.image_pin")))
    return compiling or ENGINES[kind], compiling


def _tp(tp_pin: int | None, engine: Engine | None, model: Model, inst: Instance, ic: bool, serving: Serving,
        payload: Payload, free_gpus: int, gen: str, where: Where, errors: list[str]) -> tuple[int, list[int]]:
    """The TP degree, pinned (and checked) or the planner's choice, and the degrees valid here."""
    pins = (serving.max_batch_size, _pinned(serving.max_total_tokens))  # what a compiled shape must match
    valid, candidates = _tp_choices(engine, model, inst.n_accelerators, pins, gen)
    quant = serving.quantization
    if tp_pin is None:
        return _auto_tp(ic, model, inst, quant, payload, free_gpus, valid, candidates, gen), valid
    errors.extend(_tp_errors(tp_pin, valid, model, inst, where("serving.tensor_parallel")))
    return tp_pin, valid


def _compiled(engine: Engine | None, model: Model, tp: int) -> tuple[CompiledShape, ...] | None:
    """The shapes `model` is compiled for on `tp` accelerators (None: no engine compiles for it here)."""
    return engine.compiled_for(model.hf_id, tp) if engine is not None else None


def _tp_choices(engine: Engine | None, model: Model, gpus: int, pins: tuple[int | None, int | None],
                gen: str) -> tuple[list[int], list[int]]:
    """The TP degrees that shard `model` on `gpus` accelerators (as the server of generation `gen` shards, or as
    the engine compiled it), and those auto TP picks from."""
    if engine is not None and (compiled := engine.tp_choices(model.hf_id, gpus, *pins)) is not None:
        return compiled
    valid = valid_tp(model, gpus, gen)
    return valid, valid


def _extra_shapes(engine: Engine | None, model: Model, tp: int, where: str,
                  errors: list[str]) -> tuple[CompiledShape, ...] | None:
    """The compiled shapes of an extra model where the engine compiles ahead; none is an error."""
    shapes = _compiled(engine, model, tp)
    if engine is not None and shapes == ():  # only an engine with compiled shapes has none
        errors.append(f"{where} {model.hf_id} has no compiled model for {engine.accelerator_units(tp)} in the "
                      "neuron cache; see docs/containers.md for the models and shapes compiled for Inferentia")
    return shapes


def _uncompiled(engine: Engine, model: Model, inst: Instance, tp: int | None, where: Where) -> str:
    """Say that nothing is compiled for this model at the pinned TP (None: at any TP the instance allows), and
    what is (the engine's words)."""
    return engine.uncompiled(model.hf_id, inst.instance_type, inst.n_accelerators, tp, where("instance_type"),
                             where("serving.tensor_parallel"))


def _pinned(value: Any) -> Any:
    """A profile value, or None where it is `auto`."""
    return None if value == "auto" else value


def _given_or_pinned(given: Any, value: Any) -> Any:
    """The value given on the command line, else the profile's unless it is `auto` (None then)."""
    return given if given is not None else _pinned(value)


def _best_ic_tp(model: Model, inst: Instance, quant: str, payload: Payload, gpus: int, valid: list[int],
                gen: str) -> int | None:
    """TP per copy with the best predicted instance throughput inside the timeout (copies = GPUs ÷ TP)."""
    best: tuple[float, int] | None = None
    for tp in valid:
        if tp > gpus or not fits(model, inst, tp, quant, payload, gen):
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
            valid: list[int], gen: str) -> str:
    """Say how much memory is missing and what would fit."""
    fixes = [f"tensor_parallel {t}" for t in valid if t > tp and fits(model, inst, t, quant, payload, gen)]
    if quant == "none" and fits(model, inst, tp, "gptq", payload, gen):
        fixes.append("serving.quantization: gptq (or awq)")
    bigger = sorted(
        (i for i in instances().values() if not i.is_neuron and any(
            fits(model, i, t, quant, payload, gen) for t in valid_tp(model, i.n_accelerators, gen))),
        key=lambda i: i.price_per_h("us-east-1") or 1e9,
    )[:3]
    fixes += [i.instance_type for i in bigger]
    return (f"{where}: {model.hf_id} needs {shape.weight_gb_per_gpu:.1f} GB of weights per accelerator at TP {tp} "
            f"({quant}) but {inst.instance_type} has {shape.usable_gb_per_gpu:.1f} GB usable: "
            f"{shape.memory_shortfall_gb:.1f} GB missing; would fit: {', '.join(fixes) or 'nothing in the catalog'}")


def _caps(model: Model, tp: int, n_copies: int, quant: str, shape: Shape, payload: Payload, profile: Profile,
          where: Where, errors: list[str], prefix: str, engine: Engine, version: str,
          shapes: tuple[CompiledShape, ...] | None = None) -> Copy:
    """Resolve one model's token caps, prefill budget and admission limit; validate them and the payload.

    The caps are the application's limits (what the model's context and the KV cache allow); the payload
    is the workload: it sizes the admission limit and must fit under the caps. On Inferentia (`shapes`: what
    the model is compiled for at this core count) the sequence length and batch are a compiled shape's.
    """
    s = profile.serving
    main = prefix == "serving"

    def pinned(name: str, auto_value: int) -> int:
        value = getattr(s, name) if main else "auto"
        return auto_value if value == "auto" else int(value)

    fits = shape.memory_shortfall_gb == 0
    kv = shape.kv_capacity_tokens
    context = model.max_context
    # A multiple of 256 when the KV cache is what limits it (TGI 3's largest KV block size).
    roomy = kv // FULL_LENGTH_SEQUENCES // 256 * 256
    max_total = pinned("max_total_tokens", max(c.sequence_length for c in shapes) if shapes else
                       min(context, max(roomy, payload.total_tokens)))
    max_input = pinned("max_input_tokens", max(1, max_total - payload.output_tokens))
    batch_size = s.max_batch_size if main else None
    chunked = engine.chunks_prefill(version, batch_size)
    prefill_auto = engine.auto_prefill_tokens(max_input, max_total, chunked)
    prefill = pinned("max_batch_prefill_tokens", min(prefill_auto, max(kv, max_input)))
    limit = _per_copy_limit(replace(shape, max_batch_size=batch_size), payload) if fits else 1
    concurrent = pinned("max_concurrent_requests", max(1, limit))
    if engine.queues and batch_size is None and not shapes:
        batch_size = concurrent  # a server that queues instead of refusing runs at most its batch (else compiled)
    w = (lambda f: where(f"serving.{f}")) if main else (lambda f: f"{where('components.extra_models')}: {prefix}")
    # A queuing server compiles the batch the plan names (vllm-neuronx): as many whole sequences as memory holds.
    held = min(concurrent, max(1, kv // max_total)) if engine.queues and fits else concurrent
    if (compiled := engine.compiled_batch(shapes, max_total, max_input, batch_size, held, w, errors)) is not None:
        batch_size, compiled_prefill = compiled
        prefill = pinned("max_batch_prefill_tokens", compiled_prefill)
        static = replace(shape, max_batch_size=batch_size, max_batch_total_tokens=batch_size * max_total)
        static_limit = _per_copy_limit(static, payload) if fits else 1
        concurrent = pinned("max_concurrent_requests", max(batch_size, static_limit))

    errors.extend(cap_errors(max_input, max_total, prefill, w, chunked))
    errors.extend(_fit_errors(model, tp, max_total, kv if fits else None, w))
    if main:
        errors.extend(_payload_errors(model, payload, max_input, max_total, where))
        if fits and limit == 0 and s.max_concurrent_requests == "auto":
            errors.append(f"{w('max_concurrent_requests')}: auto: even one request of {payload.input_tokens}+"
                          f"{payload.output_tokens} tokens is predicted to exceed the 60 s invocation timeout; "
                          "shorten the payload or use a faster instance")
    return Copy(model, tp, n_copies, quant, max_input, max_total, prefill, concurrent, batch_size)


def _fit_errors(model: Model, tp: int, max_total: int, kv: int | None, w: Callable[[str], str]) -> list[str]:
    """One request of `max_total` tokens must fit the model's context and the KV cache (`kv`: None where the
    weights do not fit, said elsewhere)."""
    if max_total > model.max_context:
        return [(f"{w('max_total_tokens')}: {max_total} exceeds the {model.max_context}-token context of "
                f"{model.hf_id}; lower max_total_tokens or use auto")]
    if kv is not None and max_total > kv:
        return [(f"{w('max_total_tokens')}: one request of {max_total} tokens exceeds the {kv} KV-cache tokens "
                f"free at TP {tp} (the server would refuse to start); use auto or at most {kv}")]
    return []


def _payload_errors(model: Model, payload: Payload, max_input: int, max_total: int, where: Where) -> list[str]:
    """The profile's payload must fit under the main model's caps."""
    if payload.input_tokens <= max_input and payload.total_tokens <= max_total:
        return []
    context = model.max_context
    beyond = f" (the context of {model.hf_id} is {context} tokens)" if payload.total_tokens > context else ""
    return [(f"{where('payload')}: {payload.input_tokens} input + {payload.output_tokens} output tokens "
            f"do not fit under max_input_tokens {max_input} / max_total_tokens {max_total}{beyond}; "
            "shorten the payload or raise the caps")]


def _scaling(profile: Profile, main: Copy, inst: Instance, payload: Payload, region: str, ic: bool,
             engine: Engine, gen: str, calibration: Calibration | None, where: Where,
             errors: list[str]) -> ScalingPlan | None:
    """The scaling policy of a profile with autoscaling (None without)."""
    a = profile.autoscaling
    if a is None:
        return None
    # The bounds themselves and an instance endpoint's initial count are profile checks (validate.py); the
    # copies of an inference component are known only now.
    if ic and not a.min_capacity <= main.copies <= a.max_capacity:
        errors.append(f"{where('components.copies')}: {main.copies} must lie within autoscaling "
                      f"min_capacity..max_capacity ({a.min_capacity}..{a.max_capacity})")
    target = a.target_value
    if target == "auto":
        # Concurrent requests per model container (one instance, or one copy): the knee of one container.
        shape = _shape(main, inst, engine, copies=1 if ic else main.copies, instance_count=1, generation=gen,
                       calibration=calibration)
        sweep = tuple(2**i for i in range(13) if 2**i <= max(1, main.max_concurrent_requests * shape.copies))
        knee = predict(shape, payload, sweep, region).knee
        target = float(knee.concurrency) if knee is not None else 1.0
    return ScalingPlan(min_capacity=a.min_capacity, max_capacity=a.max_capacity, target_value=target,
                       scale_in_cooldown_s=a.scale_in_cooldown_s, scale_out_cooldown_s=a.scale_out_cooldown_s,
                       metric=CONCURRENT_REQUESTS_PER_COPY if ic else CONCURRENT_REQUESTS_PER_MODEL)


def environment(copy: Copy, d: Design) -> dict[str, str]:
    """The container environment of one model: what the plan sets, then the profile's own variables."""
    settings = Settings(
        model_id=copy.model.hf_id, version=d.container_version, tensor_parallel=copy.tensor_parallel,
        quantization=copy.quantization, max_input_tokens=copy.max_input_tokens,
        max_total_tokens=copy.max_total_tokens, max_batch_prefill_tokens=copy.max_batch_prefill_tokens,
        max_concurrent_requests=copy.max_concurrent_requests, max_batch_size=copy.max_batch_size,
    )
    return d.engine.environment(settings) | dict(d.profile.serving.environment)


def _weights_gb(copy: Copy) -> float:
    return copy.model.weight_bytes(copy.quantization) / 1e9


def to_plan(d: Design, hf_token_secret: str | None = None) -> DeploymentPlan:
    """Turn a design into the DeploymentPlan: the pinned image, environments, guards, instance bounds."""
    p, inst = d.profile, d.instance
    image = d.engine.image_uri(d.container_version, d.region, p.container.image_pin)
    ic = p.endpoint_kind == "inference-component"
    names: list[str] = []
    models: list[ModelDeployment] = []
    for c in d.copies:
        name = _slug(c.model)
        name = name if name not in names else f"{name}-{len(names)}"
        names.append(name)
        compute = None
        if ic:
            cpu = p.components.cpu_cores_per_copy
            mem = p.components.memory_mib_per_copy
            # CPU and memory in proportion to the copy's accelerators, so copies pack by GPU on any instance
            # (scaled-out copies included): 13B at TP 1 on a p4d gets 10 vCPUs and 100 GiB, as in the write-ups.
            share = c.tensor_parallel / inst.n_accelerators
            compute = ComputeRequirements(
                accelerators=c.tensor_parallel,
                cpu_cores=cpu if cpu != "auto" else max(1, math.floor(inst.vcpus * IC_CPU_SHARE * share)),
                min_memory_mib=mem if mem != "auto" else
                max(1024, math.floor(inst.host_mem_gib * IC_MEMORY_SHARE * share) * 1024),
            )
        custom = c.model.hf_id not in catalog_models()
        arch = Architecture(**{f: getattr(c.model, f) for f in Architecture.model_fields}) if custom else None
        env = environment(c, d)
        s3_uri = d.model_s3_uri if not models else None  # the main model's source; extra models: the Hub
        if s3_uri is not None:
            # SageMaker copies the prefix to /opt/ml/model; TGI and LMI load a local folder named by their model
            # id (TGI's sagemaker-entrypoint.sh passes HF_MODEL_ID to the launcher; djl-serving
            # docs/lmi/deployment_guide/model-artifacts.md: HF_MODEL_ID/option.model_id may be a local path).
            env |= {v: CONTAINER_MODEL_DIR for v in d.engine.model_id_variables if v in env}
        models.append(ModelDeployment(name=name, model_id=c.model.hf_id, image_uri=image,
                                      environment=env, tensor_parallel=c.tensor_parallel,
                                      quantization=c.quantization, compute=compute, copy_count=c.copies,
                                      architecture=arch, model_data_s3_uri=s3_uri))
    weights = max(_weights_gb(c) for c in d.copies)
    # Start-up: download + load + warm-up grow with the weights; large models need 10+ minutes.
    startup = p.startup_health_check_timeout_s
    # An image may need more (Inferentia: the maintainers' own timeout, sagellm.engines.tgi_neuron).
    startup = startup if startup != "auto" else int(min(3600, max(600, d.engine.min_startup_timeout_s,
                                                                  60 * math.ceil((600 + 6 * weights) / 60))))
    download = p.model_data_download_timeout_s
    download = download if download != "auto" else startup
    volume: int | None
    if p.volume_size_gb != "auto":
        volume = p.volume_size_gb
    elif inst.local_nvme:
        volume = None  # SageMaker refuses VolumeSizeInGB where the instance brings its own NVMe storage
    else:
        volume = math.ceil(weights * 1.5 + 30)
    tags = {"sagellm:profile": p.name, "sagellm:model": d.copies[0].model.hf_id, VERSION_TAG: __version__}
    return DeploymentPlan(
        profile=p.name, region=d.region, container=d.container,
        container_version=d.engine.image_version(d.container_version), instance_type=inst.instance_type,
        initial_instance_count=d.instance_count, endpoint_kind=p.endpoint_kind, models=tuple(models),
        scaling=d.scaling, instance_scaling=_instance_scaling(models, d) if ic else None,
        startup_health_check_timeout_s=startup, model_data_download_timeout_s=download, volume_size_gb=volume,
        inference_ami_version=d.engine.inference_ami(d.container_version),
        hf_token_secret=hf_token_secret or p.hf_token_secret, routing=p.routing, metrics=p.metrics,
        input_tokens=d.payload.input_tokens,
        output_tokens=d.payload.output_tokens, tags=tags | dict(p.tags),
    )


def _instance_scaling(models: list[ModelDeployment], d: Design) -> InstanceScaling | None:
    """ManagedInstanceScaling bounds when autoscaled copies may need more instances than the endpoint starts
    with: without them SageMaker can never place the extra copies."""
    if d.scaling is None:
        return None
    most = [(m.compute, max(m.copy_count, d.scaling.max_capacity)) for m in models if m.compute is not None]
    needed = instances_for(most, d.instance)
    if d.scaling.from_zero:
        # Zero copies leave the instances idle: MinInstanceCount 0 lets SageMaker stop them too.
        return InstanceScaling(min_instance_count=0, max_instance_count=max(needed, d.instance_count))
    if needed <= d.instance_count:
        return None
    return InstanceScaling(min_instance_count=d.instance_count, max_instance_count=needed)


def design_for(profile: str, model: str, instance: str | None = None, *, payload: Payload | None = None,
               region: str = "us-east-1", profiles_dir: Path | None = None, tensor_parallel: int | None = None,
               copies: int | None = None, instance_count: int | None = None,
               model_s3_uri: str | None = None, engine: str | None = None) -> Design:
    """Load a profile by name and design it (no container images: fast, for the planner CLI)."""
    sources = all_sources(profiles_dir)
    read = read_profile(profile, sources)
    if read.profile is None:
        raise InputError(read.errors)
    return design(read.profile, model, sources, instance=instance, payload=payload, region=region,
                  tensor_parallel=tensor_parallel, copies=copies, instance_count=instance_count,
                  profiles_dir=profiles_dir, model_s3_uri=model_s3_uri, engine=engine, read=read)


def resolve(profile: str, model: str, instance: str | None = None, *, payload: Payload | None = None,
            region: str = "us-east-1", profiles_dir: Path | None = None, tensor_parallel: int | None = None,
            copies: int | None = None, instance_count: int | None = None,
            hf_token_secret: str | None = None, model_s3_uri: str | None = None,
            engine: str | None = None) -> DeploymentPlan:
    """Profile name + model (+ instance, payload, region, a token secret overriding the profile's, weights in S3,
    another engine) → a plan to deploy (a local model folder needs `model_s3_uri`; `design_for(…).plan()` also
    plans one for the emulator)."""
    design = design_for(profile, model, instance, payload=payload, region=region, profiles_dir=profiles_dir,
                        tensor_parallel=tensor_parallel, copies=copies, instance_count=instance_count,
                        model_s3_uri=model_s3_uri, engine=engine)
    if errors := design.folder_errors():  # a plan to deploy: a folder on this machine never reaches SageMaker
        raise InputError(errors)
    return to_plan(design, hf_token_secret)


def profile_payload(profile: str, profiles_dir: Path | None = None) -> Payload:
    """The payload a profile is sized for by default (what a run without its own lengths sends)."""
    prof = load_profile(profile, all_sources(profiles_dir))
    return Payload(prof.payload.input_tokens, prof.payload.output_tokens)
