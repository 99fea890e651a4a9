"""Close the gaps between moto 5.2 and what sagellm's stacks need, so moto can be the local control plane.

`install()` patches moto in this interpreter (idempotent). Each patch names the gap it closes; nothing here
is used against real AWS. Defining the CloudFormation models below registers them as
`CloudFormationModel` subclasses, which is how moto's template parser finds resource types.
"""

from __future__ import annotations

import ipaddress
import math
import re
from datetime import UTC, datetime
from enum import Enum
from typing import Any
from urllib.parse import urlparse

from moto.applicationautoscaling import models as aas_models
from moto.applicationautoscaling import responses as aas_responses
from moto.applicationautoscaling.models import applicationautoscaling_backends
from moto.cloudformation import parsing
from moto.cloudformation import responses as cfn_responses
from moto.cloudformation.models import CloudFormationBackend, Event, Stack
from moto.cloudwatch.models import cloudwatch_backends
from moto.core.common_models import CloudFormationModel
from moto.core.responses import ActionResult, EmptyResult
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import FakeEndpointConfig, SageMakerModelBackend, sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse
from moto.sagemaker.utils import arn_formatter

_installed = False


class _Declared:
    """The declarative half of moto's CloudFormationModel, from class attributes.

    A mixin, not a base class: moto finds resource models through CloudFormationModel.__subclasses__(),
    so every model must subclass CloudFormationModel directly.
    """

    CFN_TYPE = ""
    NAME_PROPERTY = ""  # the property that names the resource ("" when CloudFormation names it)
    ATTRIBUTES: tuple[str, ...] = ()  # what Fn::GetAtt may ask for

    def cfn_attributes(self) -> dict[str, str]:
        """Fn::GetAtt values by attribute name."""
        return {}

    @classmethod
    def cloudformation_type(cls) -> str:
        return cls.CFN_TYPE

    @classmethod
    def cloudformation_name_type(cls) -> str:
        return cls.NAME_PROPERTY

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr in cls.ATTRIBUTES

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.cfn_attributes()[attribute_name]

    def is_created(self) -> bool:
        return True  # moto's resources are ready at once


# --- Inference components: moto has neither the SageMaker API nor the CloudFormation resource.


class InferenceComponent(_Declared, CloudFormationModel):
    """A SageMaker inference component; InService as soon as it is created (as moto's endpoints are)."""

    CFN_TYPE = "AWS::SageMaker::InferenceComponent"
    NAME_PROPERTY = "InferenceComponentName"
    ATTRIBUTES = ("InferenceComponentArn", "InferenceComponentName", "InferenceComponentStatus")

    def __init__(
        self,
        backend: SageMakerModelBackend,
        name: str,
        endpoint_name: str,
        variant_name: str,
        specification: dict[str, Any],
        runtime_config: dict[str, Any],
        tags: list[dict[str, str]],
    ):
        if endpoint_name not in backend.endpoints:
            arn = arn_formatter("endpoint", endpoint_name, backend.account_id, backend.region_name)
            raise ValidationError(message=f"Could not find endpoint '{arn}'.")
        model_name = specification.get("ModelName")
        if model_name and model_name not in backend._models:
            arn = arn_formatter("model", model_name, backend.account_id, backend.region_name)
            raise ValidationError(message=f"Could not find model '{arn}'.")
        self.name = name
        self.arn = arn_formatter("inference-component", name, backend.account_id, backend.region_name)
        self.endpoint_name = endpoint_name
        self.endpoint_arn = backend.endpoints[endpoint_name].arn
        self.variant_name = variant_name
        self.specification = specification
        copies = int(runtime_config.get("CopyCount", 1))
        self.runtime_config = {"DesiredCopyCount": copies, "CurrentCopyCount": copies}
        self.tags = tags or []
        self.status = "InService"
        self.creation_time = self.last_modified_time = datetime.now(UTC)

    def summary(self) -> dict[str, Any]:
        return {
            "InferenceComponentName": self.name,
            "InferenceComponentArn": self.arn,
            "EndpointName": self.endpoint_name,
            "EndpointArn": self.endpoint_arn,
            "VariantName": self.variant_name,
            "InferenceComponentStatus": self.status,
            "CreationTime": self.creation_time,
            "LastModifiedTime": self.last_modified_time,
        }

    def describe(self) -> dict[str, Any]:
        return {**self.summary(), "Specification": self.specification, "RuntimeConfig": self.runtime_config}

    def set_copies(self, copies: int) -> None:
        """Desired = current = `copies` (moto's components reach their copy count at once)."""
        self.runtime_config = {"DesiredCopyCount": copies, "CurrentCopyCount": copies}
        self.last_modified_time = datetime.now(UTC)

    @property
    def physical_resource_id(self) -> str:
        return self.arn  # Ref returns the ARN, as in CloudFormation

    def cfn_attributes(self) -> dict[str, str]:
        return {"InferenceComponentArn": self.arn, "InferenceComponentName": self.name,
                "InferenceComponentStatus": self.status}

    @classmethod
    def create_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],  # type: ignore[override]
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> InferenceComponent:
        props = cloudformation_json["Properties"]
        return create_inference_component(
            sagemaker_backends[account_id][region_name],
            resource_name,
            props["EndpointName"],
            props.get("VariantName", "AllTraffic"),
            props.get("Specification", {}),
            props.get("RuntimeConfig", {}),
            props.get("Tags", []),
        )

    @classmethod
    def delete_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],  # type: ignore[override]
        account_id: str,
        region_name: str,
    ) -> None:
        _components(sagemaker_backends[account_id][region_name]).pop(resource_name.split("/")[-1], None)

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[override]
        cls,
        original_resource: InferenceComponent,
        new_resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
    ) -> InferenceComponent:
        """A stack update of a component whose properties changed (moto, as CloudFormation, skips the others).

        CloudFormation's handler for this type is not public; its schema makes RuntimeConfig.CopyCount
        write-only and grants the update UpdateInferenceComponent and UpdateInferenceComponentRuntimeConfig.
        The local AWS assumes the worst: every property is applied again, the template's copy count included.
        """
        props = cloudformation_json["Properties"]
        original_resource.specification = props.get("Specification", original_resource.specification)
        original_resource.tags = props.get("Tags", original_resource.tags)
        original_resource.set_copies(int(props.get("RuntimeConfig", {}).get("CopyCount", 1)))
        return original_resource


def _components(backend: SageMakerModelBackend) -> dict[str, InferenceComponent]:
    # Kept in the backend's __dict__ so moto's reset (which rebuilds __dict__) clears it too.
    return backend.__dict__.setdefault("sagellm_inference_components", {})


def create_inference_component(
    backend: SageMakerModelBackend,
    name: str,
    endpoint_name: str,
    variant_name: str,
    specification: dict[str, Any],
    runtime_config: dict[str, Any],
    tags: list[dict[str, str]],
) -> InferenceComponent:
    """Create an inference component on an existing endpoint (the CreateInferenceComponent action)."""
    if name in _components(backend):
        raise ValidationError(message=f'Cannot create already existing inference component "{name}".')
    component = InferenceComponent(
        backend, name, endpoint_name, variant_name, specification, runtime_config, tags
    )
    _components(backend)[name] = component
    return component


def _get_component(backend: SageMakerModelBackend, name: str) -> InferenceComponent:
    try:
        return _components(backend)[name]
    except KeyError:
        arn = arn_formatter("inference-component", name, backend.account_id, backend.region_name)
        raise ValidationError(message=f"Could not find inference component '{arn}'.") from None


class _InferenceComponentActions:
    """SageMaker API actions for inference components, grafted onto moto's SageMakerResponse."""

    def create_inference_component(self: Any) -> ActionResult:
        component = create_inference_component(
            self.sagemaker_backend,
            self._get_param("InferenceComponentName"),
            self._get_param("EndpointName"),
            self._get_param("VariantName") or "AllTraffic",
            self._get_param("Specification") or {},
            self._get_param("RuntimeConfig") or {},
            self._get_param("Tags") or [],
        )
        return ActionResult({"InferenceComponentArn": component.arn})

    def describe_inference_component(self: Any) -> ActionResult:
        return ActionResult(
            _get_component(self.sagemaker_backend, self._get_param("InferenceComponentName")).describe()
        )

    def delete_inference_component(self: Any) -> EmptyResult:
        name = self._get_param("InferenceComponentName")
        _get_component(self.sagemaker_backend, name)
        del _components(self.sagemaker_backend)[name]
        return EmptyResult()

    def update_inference_component_runtime_config(self: Any) -> ActionResult:
        # What Application Auto Scaling calls to set DesiredCopyCount (its SageMaker service-linked policy,
        # AWSApplicationAutoscalingSageMakerEndpointPolicy, grants exactly this action).
        component = _get_component(self.sagemaker_backend, self._get_param("InferenceComponentName"))
        component.set_copies(int(self._get_param("DesiredRuntimeConfig")["CopyCount"]))
        return ActionResult({"InferenceComponentArn": component.arn})

    def list_inference_components(self: Any) -> ActionResult:
        filters = {
            "EndpointNameEquals": "endpoint_name",
            "VariantNameEquals": "variant_name",
            "StatusEquals": "status",
        }
        found = list(_components(self.sagemaker_backend).values())
        for param, attr in filters.items():
            if (value := self._get_param(param)) is not None:
                found = [c for c in found if getattr(c, attr) == value]
        if (contains := self._get_param("NameContains")) is not None:
            found = [c for c in found if contains in c.name]
        return ActionResult({"InferenceComponents": [c.summary() for c in found]})


def _add_inference_components() -> None:
    for name in ("create_inference_component", "describe_inference_component", "delete_inference_component",
                 "list_inference_components", "update_inference_component_runtime_config"):
        setattr(SageMakerResponse, name, getattr(_InferenceComponentActions, name))

    # ListTags/AddTags look a resource up by the type in its ARN; teach them inference components.
    original = SageMakerModelBackend._get_resource_from_arn

    def _get_resource_from_arn(self: SageMakerModelBackend, arn: str) -> Any:
        kind, _, name = arn.split(":")[-1].partition("/")
        return _get_component(self, name) if kind == "inference-component" else original(self, arn)

    SageMakerModelBackend._get_resource_from_arn = _get_resource_from_arn  # type: ignore[method-assign]


# --- Endpoint configs: moto rejects newer GPU/Inferentia instance types and variants without a model.

_NEWER_INSTANCE_TYPE = re.compile(r"^ml\.(g5|g6|g6e|g7|g7e|p4d|p4de|p5|p5e|p5en|p6-b200|p6-b300|inf2|trn1|trn2)\.\d*x?large$")


def _relax_endpoint_configs() -> None:
    validate_instance_type = FakeEndpointConfig.validate_instance_type

    def _validate_instance_type(self: FakeEndpointConfig, instance_type: str) -> None:
        # moto's list stops at ml.g4dn/p3; unknown families (e.g. ml.bogus.xlarge) are still rejected.
        if not _NEWER_INSTANCE_TYPE.match(instance_type):
            validate_instance_type(self, instance_type)

    FakeEndpointConfig.validate_instance_type = _validate_instance_type  # type: ignore[method-assign]

    validate_variants = SageMakerModelBackend.validate_production_variants

    def _validate_production_variants(
        self: SageMakerModelBackend, production_variants: list[dict[str, Any]]
    ) -> None:
        # An inference-component endpoint config has no ModelName on its variant; moto indexes it blindly.
        validate_variants(self, [v for v in production_variants if "ModelName" in v])

    SageMakerModelBackend.validate_production_variants = (  # type: ignore[method-assign]
        _validate_production_variants
    )


# --- Application Auto Scaling: moto has the API but no CloudFormation resources, and no IC dimension.


class ScalableTarget(_Declared, CloudFormationModel):
    """AWS::ApplicationAutoScaling::ScalableTarget, registered through moto's own backend."""

    CFN_TYPE = "AWS::ApplicationAutoScaling::ScalableTarget"
    ATTRIBUTES = ("Id",)

    def __init__(self, namespace: str, resource_id: str, dimension: str):
        self.namespace, self.resource_id, self.dimension = namespace, resource_id, dimension

    @property
    def physical_resource_id(self) -> str:
        return f"{self.resource_id}|{self.dimension}|{self.namespace}"  # CloudFormation's Ref format

    def cfn_attributes(self) -> dict[str, str]:
        return {"Id": self.physical_resource_id}

    @classmethod
    def create_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],  # type: ignore[override]
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> ScalableTarget:
        props = cloudformation_json["Properties"]
        applicationautoscaling_backends[account_id][region_name].register_scalable_target(
            props["ServiceNamespace"],
            props["ResourceId"],
            props["ScalableDimension"],
            min_capacity=int(props["MinCapacity"]),
            max_capacity=int(props["MaxCapacity"]),
            role_arn=props.get("RoleARN", ""),
            suspended_state=props.get("SuspendedState"),
        )
        target = (props["ServiceNamespace"], props["ResourceId"], props["ScalableDimension"])
        return cls(*target)  # type: ignore[abstract]

    @classmethod
    def delete_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],  # type: ignore[override]
        account_id: str,
        region_name: str,
    ) -> None:
        resource_id, dimension, namespace = resource_name.split("|")
        backend = applicationautoscaling_backends[account_id][region_name]
        # Deregistering a target deletes its policies in AWS; moto leaves them behind.
        for key, policy in list(backend.policies.items()):
            if (policy.resource_id, policy.scalable_dimension) == (resource_id, dimension):
                del backend.policies[key]
        if backend._scalable_target_exists(resource_id, dimension):
            backend.deregister_scalable_target(namespace, resource_id, dimension)

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[override]
        cls,
        original_resource: ScalableTarget,
        new_resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
    ) -> ScalableTarget:
        # ResourceId, ScalableDimension and ServiceNamespace are create-only (the resource schema's
        # createOnlyProperties): CloudFormation replaces the target; other changes re-register it in place.
        props = cloudformation_json["Properties"]
        new = (props["ServiceNamespace"], props["ResourceId"], props["ScalableDimension"])
        if new != (original_resource.namespace, original_resource.resource_id, original_resource.dimension):
            cls.delete_from_cloudformation_json(
                original_resource.physical_resource_id, {}, account_id, region_name
            )
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)


class ScalingPolicy(_Declared, CloudFormationModel):
    """AWS::ApplicationAutoScaling::ScalingPolicy, put through moto's applicationautoscaling backend."""

    CFN_TYPE = "AWS::ApplicationAutoScaling::ScalingPolicy"
    NAME_PROPERTY = "PolicyName"
    ATTRIBUTES = ("Arn",)

    def __init__(self, arn: str, key: tuple[str, str, str, str]):
        self.arn, self.key = arn, key

    @property
    def physical_resource_id(self) -> str:
        return self.arn

    def cfn_attributes(self) -> dict[str, str]:
        return {"Arn": self.arn}

    @classmethod
    def create_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],  # type: ignore[override]
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> ScalingPolicy:
        props = cloudformation_json["Properties"]
        if "ScalingTargetId" in props:
            resource_id, dimension, namespace = props["ScalingTargetId"].split("|")
        else:
            resource_id, dimension, namespace = (
                props["ResourceId"],
                props["ScalableDimension"],
                props["ServiceNamespace"],
            )
        body = props.get("TargetTrackingScalingPolicyConfiguration") or props.get(
            "StepScalingPolicyConfiguration"
        )
        policy = applicationautoscaling_backends[account_id][region_name].put_scaling_policy(
            resource_name, namespace, resource_id, dimension, body, props["PolicyType"]
        )
        key = (resource_name, namespace, resource_id, dimension)
        return cls(policy.policy_arn, key)  # type: ignore[abstract]

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[override]
        cls,
        original_resource: ScalingPolicy,
        new_resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
    ) -> ScalingPolicy:
        # A policy on another target is a new policy (ScalingTargetId is create-only); PutScalingPolicy on the
        # same target and name updates it in place.
        original_resource.delete(account_id, region_name)
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

    def delete(self, account_id: str, region_name: str) -> None:
        name, namespace, resource_id, dimension = self.key
        backend = applicationautoscaling_backends[account_id][region_name]
        try:
            backend.delete_scaling_policy(name, namespace, resource_id, dimension)
        except aas_models.AWSValidationException:
            pass  # already deleted along with its scalable target


# --- CloudWatch alarms: moto's CloudFormation has no AWS::CloudWatch::Alarm (the scale-from-zero alarm, a
# component's rollback alarms).


class MetricAlarm(_Declared, CloudFormationModel):
    """AWS::CloudWatch::Alarm on one metric, put through moto's CloudWatch backend (stored, never evaluated:
    the emulator simulates what it does)."""

    CFN_TYPE = "AWS::CloudWatch::Alarm"
    NAME_PROPERTY = "AlarmName"
    ATTRIBUTES = ("Arn",)

    def __init__(self, name: str, arn: str):
        self.name, self.arn = name, arn

    @property
    def physical_resource_id(self) -> str:
        return self.name

    def cfn_attributes(self) -> dict[str, str]:
        return {"Arn": self.arn}

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[override]
        cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str,
        **kwargs: Any,
    ) -> MetricAlarm:
        props = cloudformation_json["Properties"]
        alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
            name=props.get("AlarmName", resource_name), namespace=props["Namespace"],
            metric_name=props["MetricName"], comparison_operator=props["ComparisonOperator"],
            evaluation_periods=int(props["EvaluationPeriods"]), period=int(props["Period"]),
            threshold=float(props["Threshold"]), statistic=props.get("Statistic"),  # type: ignore[arg-type]
            extended_statistic=props.get("ExtendedStatistic"),  # a percentile (p90) in place of Statistic
            description=props.get("AlarmDescription", ""), dimensions=props.get("Dimensions", []),
            alarm_actions=props.get("AlarmActions", []),
            datapoints_to_alarm=int(props["DatapointsToAlarm"]) if "DatapointsToAlarm" in props else None,
            treat_missing_data=props.get("TreatMissingData"),
        )
        return cls(alarm.name, alarm.alarm_arn)

    def delete(self, account_id: str, region_name: str) -> None:
        cloudwatch_backends[account_id][region_name].delete_alarms([self.name])


def _add_inference_component_dimension() -> None:
    # moto validates dimensions against a closed enum that predates inference components.
    extra = {
        "SAGEMAKER_INFERENCE_COMPONENT_DESIRED_COPY_COUNT": "sagemaker:inference-component:DesiredCopyCount"
    }
    members = {m.name: m.value for m in aas_models.ScalableDimensionValueSet} | extra
    extended = Enum("ScalableDimensionValueSet", members)  # type: ignore[misc]
    aas_models.ScalableDimensionValueSet = extended  # type: ignore[misc,assignment]
    aas_responses.ScalableDimensionValueSet = extended  # type: ignore[misc,assignment]


# --- CloudFormation: a TemplateURL on 127.0.0.1 names a bucket "127".


def _read_templates_on_loopback_addresses() -> None:
    # With AWS_ENDPOINT_URL=http://127.0.0.1:PORT the CDK CLI uploads the template path-style (its host is an IP
    # address) and passes CreateStack/UpdateStack/CreateChangeSet `TemplateURL=http://127.0.0.1:PORT/<bucket>/<key>`.
    # moto 5.2 (cloudformation/utils.py `get_stack_from_s3_url`) reads the bucket from the path only when the URL
    # contains "localhost", and otherwise takes the host's first dot-separated label as the bucket: "127", hence
    # NoSuchBucket. Any loopback spelling (localhost, 127.0.0.1, [::1]) is read path-style here, a missing key as
    # NoSuchKey (moto's own path answers 500); every other URL as moto reads it.
    original = cfn_responses.get_stack_from_s3_url

    def get_stack_from_s3_url(template_url: str, account_id: str, partition: str) -> str:
        url = urlparse(template_url)
        try:
            loopback = url.hostname == "localhost" or ipaddress.ip_address(url.hostname or "").is_loopback
        except ValueError:  # another host name, not an address
            loopback = False
        if not loopback:
            return original(template_url, account_id, partition)
        from moto.s3.exceptions import MissingKey
        from moto.s3.models import s3_backends

        bucket, _, key = url.path.lstrip("/").partition("/")
        found = s3_backends[account_id][partition].get_object(bucket, key)  # MissingBucket when there is none
        if found is None:
            raise MissingKey(key)
        body: bytes = found.value
        return body.decode("utf-8")

    cfn_responses.get_stack_from_s3_url = get_stack_from_s3_url


# --- CloudFormation: UpdateStack fails on a parameter kept at its default (the CDK's BootstrapVersion).


def _keep_previous_defaults() -> None:
    # `cdk deploy` of a stack that exists passes BootstrapVersion with UsePreviousValue; moto looks the previous
    # value up among the parameters CreateStack was given, and a parameter left at its default is not there
    # (KeyError). CloudFormation keeps its previous value: the template's default again, as moto resolves it.
    def _resolve_update_parameters(
        self: CloudFormationBackend, instance: Any, incoming_params: list[dict[str, str]]
    ) -> dict[str, str]:
        given = {p["ParameterKey"]: p["ParameterValue"] for p in incoming_params if "ParameterValue" in p}
        previous = {p["ParameterKey"]: instance.parameters[p["ParameterKey"]] for p in incoming_params
                    if p.get("UsePreviousValue", False) and p["ParameterKey"] in instance.parameters}
        return given | previous

    CloudFormationBackend._resolve_update_parameters = _resolve_update_parameters  # type: ignore[method-assign]


# --- CloudFormation: a failed resource raises out of CreateStack and leaves the rest behind in moto.


def _roll_back_failed_creates() -> None:
    create_resource = parsing.parse_and_create_resource

    def _parse_and_create_resource(
        logical_id: str, resource_json: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        try:
            return create_resource(logical_id, resource_json, *args, **kwargs)
        except Exception as exc:
            # Remember the innermost resource that failed (dependencies are created recursively).
            if not hasattr(exc, "sagellm_failed"):
                exc.sagellm_failed = (logical_id, resource_json["Type"])  # type: ignore[attr-defined]
            raise

    parsing.parse_and_create_resource = _parse_and_create_resource

    create_resources = Stack.create_resources

    def _create_resources(self: Stack) -> None:
        # CloudFormation records CREATE_FAILED on the resource, deletes what it created and ends in
        # ROLLBACK_COMPLETE; CreateStack itself succeeds and the failure shows in the stack events.
        try:
            create_resources(self)
        except Exception as exc:  # noqa: BLE001  # any resource failure, as CloudFormation would
            logical_id, resource_type = getattr(
                exc, "sagellm_failed", (self.name, "AWS::CloudFormation::Stack")
            )
            reason = getattr(exc, "message", None) or str(exc)
            self.events.append(
                Event(self.stack_id, self.name, logical_id, "", resource_type, "CREATE_FAILED", reason, None)
            )
            self.status = "ROLLBACK_IN_PROGRESS"
            self._add_stack_event(
                "ROLLBACK_IN_PROGRESS",
                f"The following resource(s) failed to create: [{logical_id}]. Rollback requested by user.",
            )
            try:
                self.resource_map.delete()
            except Exception as delete_exc:  # noqa: BLE001
                self.status = "ROLLBACK_FAILED"
                self._add_stack_event(
                    "ROLLBACK_FAILED", getattr(delete_exc, "message", None) or str(delete_exc)
                )
                return
            _forget_resources(self)
            self.status = "ROLLBACK_COMPLETE"
            self._add_stack_event("ROLLBACK_COMPLETE")

    Stack.create_resources = _create_resources  # type: ignore[method-assign]

    delete = Stack.delete

    def _delete(self: Stack) -> None:
        delete(self)
        _forget_resources(self)

    Stack.delete = _delete  # type: ignore[method-assign]


def _forget_resources(stack: Stack) -> None:
    # moto resolves resources and outputs lazily: describing a deleted or rolled-back stack (by id) would
    # otherwise re-create every resource its outputs or resource list refer to.
    stack.resource_map._resource_json_map = {}
    stack.output_map._output_json_map = {}


class CdkMetadata(_Declared, CloudFormationModel):
    """AWS::CDK::Metadata (in every CDK template): moto warns on it and lists it as an empty resource."""

    CFN_TYPE = "AWS::CDK::Metadata"

    @classmethod
    def create_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],  # type: ignore[override]
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> CdkMetadata:
        resource = cls()  # type: ignore[abstract]
        resource.physical_resource_id = resource_name  # type: ignore[attr-defined]
        return resource

    def delete(self, account_id: str, region_name: str) -> None:
        pass


# --- CloudWatch percentiles: moto's GetMetricData knows Sum/Average/Minimum/Maximum/SampleCount only, and a
# `pNN` statistic crashes it (TypeError on None). CloudWatch computes percentiles from the raw values, which
# moto keeps (a `Values`+`Counts` datum is stored once per count), so the same nearest-rank figure is added.

_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile of `values` (non-empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _add_percentiles() -> None:
    from moto.cloudwatch.models import Statistics

    plain = Statistics.get_statistics_for_type

    def get_statistics_for_type(self: Statistics, stat: str) -> Any:
        m = _PERCENTILE.match(stat)
        values = self.metric_single_values_list
        if m is None or not values:
            return plain(self, stat)
        return percentile(values, float(m[1]))

    Statistics.get_statistics_for_type = get_statistics_for_type  # type: ignore[method-assign]


def install() -> None:
    """Apply every patch above to moto in this interpreter (idempotent)."""
    global _installed
    if _installed:
        return
    _add_inference_components()
    _relax_endpoint_configs()
    _add_inference_component_dimension()
    _roll_back_failed_creates()
    _keep_previous_defaults()
    _read_templates_on_loopback_addresses()
    _add_percentiles()
    # moto caches the CloudFormation type map on first use; rebuild it to include the models above.
    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()
    _installed = True
