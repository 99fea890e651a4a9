"""The plan checks LlmEndpoint and LlmComponent share: everything CloudFormation accepts but SageMaker refuses or
ignores, found at synth (private to the constructs, as aws-sagemaker-alpha keeps its shared helpers)."""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk import Annotations, Stack, Token
from aws_cdk import aws_kms as kms
from constructs import Construct

from sagellm.catalog import has_local_nvme, instances
from sagellm.catalog.regions import endpoint_types, missing_types_errors, partition
from sagellm.catalog.s3_weights import S3_PREFIX, S3_PREFIX_FORM
from sagellm.constructs.role import ecr_repository_arn
from sagellm.engines import Engine, engine_for
from sagellm.errors import InputError
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment, instances_for, pascal
from sagellm.profiles.schema import TIMEOUT_RANGE_S, VOLUME_RANGE_GB  # SageMaker's accepted ranges
from sagellm.profiles.tokens import gated_without_secret, token_errors


def serving_engine(plan: DeploymentPlan) -> Engine:
    """The plan's serving engine (on Inferentia, its neuron build)."""
    instance = instances().get(plan.instance_type)
    return engine_for(plan.container, neuron=instance is not None and instance.is_neuron)


def reaches_hub(plan: DeploymentPlan) -> bool:
    """Whether a container reads the Hugging Face Hub as it starts: weights from the Hub, or an image that looks up a
    Hub cache even with its weights from S3 (Inferentia's compiled models)."""
    return any(m.model_data_s3_uri is None for m in plan.models) or serving_engine(plan).hub_at_start is not None


def plan_errors(scope: Construct, plan: DeploymentPlan, *, has_secret: bool, kms_key: kms.IKey | None = None
                ) -> list[str]:
    """Every problem of `plan` that CloudFormation accepts but SageMaker refuses or ignores, so a deploy cannot
    fail late (warnings go to `scope`'s Annotations): LlmEndpoint's and LlmComponent's one check."""
    def warn(warning_id: str, message: str) -> None:
        Annotations.of(scope).add_warning_v2(f"sagellm:{warning_id}", message)

    # The one token check of the project, on everything the plan would write into the template.
    written = {"hf_token_secret": plan.hf_token_secret, "models": [m.model_dump() for m in plan.models]}
    return [
        *_region_errors(scope, plan, warn),
        *_model_errors(plan, warn),
        *token_errors(written, _plan_path),
        *gated_without_secret(plan.gated_models, has_secret),
        *_capacity_errors(plan, kms_key),
        *_scaling_errors(plan),
        *_placement_errors(plan),
        *_weights_source_errors(plan),
    ]


def _model_errors(plan: DeploymentPlan, warn: Callable[[str, str], None]) -> list[str]:
    """One model on an instance endpoint, unique names, ECR images, and what inference components need."""
    errors: list[str] = []
    instance_based = plan.endpoint_kind == "instance"
    if instance_based and len(plan.models) != 1:
        errors.append(
            f"plan.models: an instance-based endpoint serves exactly one model, got {len(plan.models)}"
        )
    if not plan.models:
        errors.append("plan.models: at least one model is required")
    errors += _model_name_errors([m.name for m in plan.models])
    for i, m in enumerate(plan.models):
        errors += _one_model_errors(f"plan.models[{i}]", m, instance_based, warn)
    return errors


def _model_name_errors(names: list[str]) -> list[str]:
    """Model names unique, and unique still as the construct ids and stack outputs derived from them."""
    errors = [f"plan.models: name {duplicate!r} is used twice; model names must be unique"
              for duplicate in sorted({n for n in names if names.count(n) > 1})]
    ids = [pascal(n) for n in dict.fromkeys(names)]
    for same in sorted({i for i in ids if ids.count(i) > 1}):
        errors.append(f"plan.models: names {', '.join(repr(n) for n in dict.fromkeys(names) if pascal(n) == same)} "
                      f"give the same construct id ({same}); rename one")
    return errors


def _one_model_errors(where: str, m: ModelDeployment, instance_based: bool,
                      warn: Callable[[str, str], None]) -> list[str]:
    """A model's image is in ECR; its compute and copies are set on an inference component, ignored otherwise."""
    errors: list[str] = []
    if not Token.is_unresolved(m.image_uri) and ecr_repository_arn(m.image_uri) is None:
        errors.append(
            f"{where}.image_uri: {m.image_uri!r} is not an ECR image URI "
            "(<account>.dkr.ecr.<region>.<the region's DNS suffix, e.g. amazonaws.com>/<repository>:<tag>)"
        )
    if instance_based and (m.compute is not None or m.copy_count != 1):
        warn(
            "IgnoredComponentSettings",
            f"{where}: compute and copy_count apply to inference components only; ignored",
        )
    if not instance_based:
        if m.compute is None:
            errors.append(f"{where}.compute: required for an inference-component endpoint")
        if m.copy_count < 1:
            errors.append(f"{where}.copy_count: {m.copy_count} must be at least 1")
    return errors


def _capacity_errors(plan: DeploymentPlan, kms_key: kms.IKey | None) -> list[str]:
    """Storage, encryption, instance count and timeouts within what SageMaker accepts for the instance type."""
    errors: list[str] = []
    if kms_key is not None and has_local_nvme(plan.instance_type):
        errors.append(
            f"kms_key: {plan.instance_type} has NVMe instance storage, which SageMaker encrypts in hardware, "
            "and CreateEndpointConfig refuses a KmsKeyId for it; drop kms_key (the storage is encrypted "
            "already) or use an instance type without instance storage"
        )
    if plan.volume_size_gb is not None and has_local_nvme(plan.instance_type):
        errors.append(
            f"plan.volume_size_gb: {plan.instance_type} brings its own NVMe storage and SageMaker refuses "
            "VolumeSizeInGB for it; leave volume_size_gb unset"
        )
    if plan.initial_instance_count < 1:
        errors.append(f"plan.initial_instance_count: {plan.initial_instance_count} must be at least 1")
    low, high = TIMEOUT_RANGE_S
    for field in ("startup_health_check_timeout_s", "model_data_download_timeout_s"):
        value = getattr(plan, field)
        if not low <= value <= high:
            errors.append(f"plan.{field}: {value} must be within {low}..{high} seconds")
    if (
        plan.volume_size_gb is not None
        and not VOLUME_RANGE_GB[0] <= plan.volume_size_gb <= VOLUME_RANGE_GB[1]
    ):
        errors.append(
            f"plan.volume_size_gb: {plan.volume_size_gb} must be within {VOLUME_RANGE_GB[0]}..{VOLUME_RANGE_GB[1]}"
        )
    return errors

def _scaling_errors(plan: DeploymentPlan) -> list[str]:
    """Scaling bounds that hold the starting count and a positive target."""
    scaling = plan.scaling
    if scaling is None:
        return []
    errors: list[str] = []
    instance_based = plan.endpoint_kind == "instance"
    lowest = 1 if instance_based else 0
    if scaling.min_capacity < lowest:
        errors.append(f"plan.scaling.min_capacity: {scaling.min_capacity} must be at least {lowest}")
    if scaling.max_capacity < scaling.min_capacity:
        errors.append(
            f"plan.scaling.max_capacity: {scaling.max_capacity} must not be below min_capacity ({scaling.min_capacity})"
        )
    if scaling.target_value <= 0:
        errors.append(f"plan.scaling.target_value: {scaling.target_value} must be positive")
    if (
        instance_based
        and not scaling.min_capacity <= plan.initial_instance_count <= scaling.max_capacity
    ):
        errors.append(
            f"plan.initial_instance_count: {plan.initial_instance_count} lies outside the scaling bounds "
            f"{scaling.min_capacity}..{scaling.max_capacity}; start within them"
        )
    return errors


def _region_errors(scope: Construct, plan: DeploymentPlan, warn: Callable[[str, str], None]) -> list[str]:
    """The plan must have been resolved for the stack's region, and CloudFormation offer its resources there.

    The plan's image, prices and instance choice are those of `plan.region`; an image from another region
    would fail only at deploy time, after the role exists.
    """
    stack = Stack.of(scope)
    region = stack.region
    if Token.is_unresolved(region):
        warn(
            "RegionAgnosticStack",
            f"stack {stack.node.id} names no region: the plan's image and prices are those of {plan.region}; "
            f"deploy it there, or give the stack env=Environment(region={plan.region!r})",
        )
        region = plan.region
    elif region != plan.region:
        return [(
            f"plan.region: the plan was resolved for {plan.region} (its image, prices and instance choice) but "
            f"stack {stack.node.id} deploys to {region}; resolve it with region={region!r}"
        )]
    try:
        partition(region, "plan.region")
    except InputError as exc:
        return exc.messages
    types = endpoint_types(plan.endpoint_kind == "inference-component")
    return missing_types_errors(region, types, "plan.region")


def _weights_source_errors(plan: DeploymentPlan) -> list[str]:
    """Weights from S3 are an uncompressed prefix (`s3://bucket/prefix/`)."""
    return [f"plan.models[{i}].model_data_s3_uri: {m.model_data_s3_uri!r} is not an S3 prefix; give {S3_PREFIX_FORM}"
            for i, m in enumerate(plan.models)
            if m.model_data_s3_uri is not None and not Token.is_unresolved(m.model_data_s3_uri)
            and not S3_PREFIX.match(m.model_data_s3_uri)]


def _plan_path(loc: tuple[str, ...]) -> str:
    """("models", "0", "environment") → "plan.models[0].environment"."""
    return "plan" + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in loc)


def _placement_errors(plan: DeploymentPlan) -> list[str]:
    """Inference-component copies that SageMaker could never place, and instance bounds that contradict."""
    bounds = plan.instance_scaling
    if plan.endpoint_kind == "instance":
        return ["plan.instance_scaling: only inference-component endpoints scale instances for copies"] if bounds else []
    errors = []
    if bounds is not None and not bounds.min_instance_count <= plan.initial_instance_count <= bounds.max_instance_count:
        errors.append(
            f"plan.instance_scaling: {bounds.min_instance_count}..{bounds.max_instance_count} instances must include "
            f"initial_instance_count ({plan.initial_instance_count})"
        )
    instance = instances().get(plan.instance_type)
    placed = [(m.compute, m.copy_count) for m in plan.models if m.compute is not None]
    if instance is None or len(placed) != len(plan.models):
        return errors  # an instance type outside the catalog: its capacity is unknown here
    start = instances_for(placed, instance)
    if start == 0 or start > plan.initial_instance_count:
        errors.append(
            f"plan.models: the starting copies need {start or 'more than any'} × {plan.instance_type} "
            f"but the endpoint starts with {plan.initial_instance_count}; raise initial_instance_count or lower "
            "copy_count or the per-copy compute"
        )
    if plan.scaling is not None:
        most = instances_for([(c, max(n, plan.scaling.max_capacity)) for c, n in placed], instance)
        allowed = bounds.max_instance_count if bounds is not None else plan.initial_instance_count
        if most > allowed:
            errors.append(
                f"plan.scaling.max_capacity: {plan.scaling.max_capacity} copies per component need {most} × "
                f"{plan.instance_type}, but the endpoint may only have {allowed}: the extra copies could never "
                f"be placed; set instance_scaling (ManagedInstanceScaling) to at most {most} instances or lower "
                "max_capacity"
            )
    return errors
