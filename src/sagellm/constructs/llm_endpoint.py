"""LlmEndpoint: a SageMaker LLM endpoint built from a DeploymentPlan."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aws_cdk import Annotations, SecretValue, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from sagellm.constructs._checks import plan_errors, reaches_hub, serving_engine
from sagellm.constructs._placement import Copies, copies_of
from sagellm.constructs.endpoint import VARIANT_NAME, endpoint_config
from sagellm.constructs.inference_component import component_name, scaled_component
from sagellm.constructs.metrics import EndpointMetrics
from sagellm.constructs.model import container_model
from sagellm.constructs.role import INVOKE_ACTIONS, VpcNetwork, execution_role
from sagellm.constructs.scaling import VARIANT_INSTANCES, Scaling
from sagellm.errors import InputError
from sagellm.profiles.plan import VERSION_TAG, DeploymentPlan, pascal, with_min_copies


class LlmEndpoint(Construct, EndpointMetrics):
    """A SageMaker endpoint serving the plan's model(s): instance-based or with inference components.

    Children: `Role` (unless `role` is given), `Model` or `Model<Name>` + `Component<Name>` (with its rollback
    alarms `Component<Name>Errors`, `Component<Name>Latency`) per model,
    `Config`, `Endpoint`, `Scaling`/`Scaling<Name>` when the plan scales. No physical names except the
    inference components' (see `component_name`). A given `role` is used as is: it must be able to pull
    the images and, with `kms_key`, use the key. Several models share one endpoint when the plan is of
    kind `inference-component` and lists several `models` (one component each). `min_copies` sets the scaled
    components' fewest copies (the plan's `scaling.min_capacity`); 0 scales them to zero (docs/deploy.md).

    The Hugging Face token comes from `hf_token_secret` (or the plan's `hf_token_secret` name/ARN) as a
    CloudFormation dynamic reference; CloudFormation resolves it at deploy time into the container's
    `HF_TOKEN`, so the execution role needs no Secrets Manager access. `network_isolation` blocks the
    container's network: TGI then cannot download weights from the Hub. A model whose plan stages its weights in
    S3 (`model_data_s3_uri`) needs neither token nor Hub: the role reads that prefix only, and `network_isolation`
    defaults to on when every model's weights come from S3 and the image reads nothing else from the Hub as it
    starts (Inferentia's does: its compiled models, so it stays off there).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        plan: DeploymentPlan,
        min_copies: int | None = None,
        role: iam.IRole | None = None,
        vpc: ec2.IVpc | None = None,
        subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        kms_key: kms.IKey | None = None,
        hf_token_secret: secretsmanager.ISecret | None = None,
        network_isolation: bool | None = None,
    ) -> None:
        super().__init__(scope, id)
        if min_copies is not None:
            plan = with_min_copies(plan, min_copies, self.node.path)
        self.plan = plan
        if network_isolation is None:
            network_isolation = not reaches_hub(plan)
        self._validate(
            vpc=vpc,
            subnets=subnets,
            security_groups=security_groups,
            network_isolation=network_isolation,
            kms_key=kms_key,
            hf_token_secret=hf_token_secret,
        )
        tag_with_plan(self, plan)

        own_role = role is None
        vpc_config = self._vpc_config(vpc, subnets, security_groups)
        self.role: iam.IRole = role or self._execution_role(kms_key, vpc_config)
        hf_token = token_reference(hf_token_secret, plan.hf_token_secret)

        def model(id: str, index: int) -> sagemaker.CfnModel:
            return container_model(
                self,
                id,
                model=plan.models[index],
                role=self.role,
                hf_token=hf_token,
                vpc_config=vpc_config,
                network_isolation=network_isolation,
                own_role=own_role,
            )

        instance_based = plan.endpoint_kind == "instance"
        primary = model("Model", 0) if instance_based else None
        config = endpoint_config(
            self,
            "Config",
            plan=plan,
            model_name=primary.attr_model_name if primary is not None else None,
            role=self.role,
            kms_key=kms_key,
            vpc_config=vpc_config,
            network_isolation=network_isolation,
        )
        if own_role and not instance_based:
            config.node.add_dependency(self.role.node.find_child("DefaultPolicy"))
        # An instance-based variant registered as a scalable target: SageMaker refuses UpdateEndpoint to change
        # its instance type ("must be deregistered as scalable targets ... before they can ... have their instance
        # type updated"), so a new instance type makes a new endpoint (a new logical id: CloudFormation creates it,
        # moves the scaling to it, then deletes the old one). Other updates keep the instance count the scaler set.
        scaled_variant = instance_based and plan.scaling is not None
        endpoint = sagemaker.CfnEndpoint(
            self,
            f"Endpoint{pascal(plan.instance_type)}" if scaled_variant else "Endpoint",
            endpoint_config_name=config.attr_endpoint_config_name,
            retain_all_variant_properties=True if scaled_variant else None,
        )
        self.endpoint: sagemaker.CfnEndpoint = endpoint
        self.endpoint_name: str = endpoint.attr_endpoint_name
        # Ref of AWS::SageMaker::Endpoint is its ARN.
        self.endpoint_arn: str = endpoint.ref
        # Model name in the plan → inference component name (empty for instance-based endpoints).
        self.inference_component_names: dict[str, str] = {}
        # The copies on this endpoint's instances: its own models', then each LlmComponent's as it joins.
        self.placed: list[Copies] = [] if instance_based else copies_of(plan)

        if instance_based:
            if plan.scaling is not None:
                Scaling(
                    self,
                    "Scaling",
                    resource_id=f"endpoint/{self.endpoint_name}/variant/{VARIANT_NAME}",
                    dimension=VARIANT_INSTANCES,
                    scaling=plan.scaling,
                )
            return

        for index, deployment in enumerate(plan.models):
            suffix = pascal(deployment.name)
            name = component_name(self, deployment.name)
            scaled_component(
                self,
                suffix,
                name=name,
                plan=plan,
                model=deployment,
                model_name=model(f"Model{suffix}", index).attr_model_name,
                endpoint_name=self.endpoint_name,
            )
            self.inference_component_names[deployment.name] = name

    def _execution_role(self, kms_key: kms.IKey | None,
                        vpc_config: sagemaker.CfnModel.VpcConfigProperty | None) -> iam.IRole:
        """The role the endpoint's models run as, allowed what the plan needs and nothing more."""
        plan = self.plan
        return execution_role(
            self,
            "Role",
            image_uris=[m.image_uri for m in plan.models],
            kms_key=kms_key,
            # Each component's container logs to its own group (instance-based endpoints have none).
            components=[component_name(self, m.name) for m in plan.models]
            if plan.endpoint_kind == "inference-component" else (),
            network=VpcNetwork(list(vpc_config.subnets), list(vpc_config.security_group_ids))
            if vpc_config is not None else None,
            weights_s3_uris=[m.model_data_s3_uri for m in plan.models if m.model_data_s3_uri is not None],
        )

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow `grantee` to invoke this endpoint (plain and streaming), and nothing else."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=INVOKE_ACTIONS, resource_arns=[self.endpoint_arn]
        )

    def _vpc_config(
        self,
        vpc: ec2.IVpc | None,
        subnets: ec2.SubnetSelection | None,
        security_groups: Sequence[ec2.ISecurityGroup] | None,
    ) -> sagemaker.CfnModel.VpcConfigProperty | None:
        if vpc is None:
            return None
        if not security_groups:
            security_groups = [
                ec2.SecurityGroup(
                    self, "SecurityGroup", vpc=vpc, description="sagellm endpoint containers (egress only)"
                )
            ]
        # jsii structs keep their fields in `_values`; select_subnets takes them as keywords (default:
        # the VPC's private subnets).
        selected = vpc.select_subnets(**(subnets._values if subnets is not None else {}))
        return sagemaker.CfnModel.VpcConfigProperty(
            subnets=selected.subnet_ids,
            security_group_ids=[group.security_group_id for group in security_groups],
        )

    def _validate(
        self,
        *,
        vpc: ec2.IVpc | None,
        subnets: ec2.SubnetSelection | None,
        security_groups: Sequence[ec2.ISecurityGroup] | None,
        network_isolation: bool,
        kms_key: kms.IKey | None,
        hf_token_secret: secretsmanager.ISecret | None,
    ) -> None:
        """Raise InputError with every problem of the plan and arguments; warn through Annotations.

        Checks what CloudFormation accepts but SageMaker refuses or ignores, so a deploy cannot fail late.
        """
        def warn(warning_id: str, message: str) -> None:
            Annotations.of(self).add_warning_v2(f"sagellm:{warning_id}", message)

        plan = self.plan
        # The endpoint's instances, not a component's (an LlmComponent's plan may scale to zero on any endpoint).
        if plan.endpoint_kind == "inference-component" and plan.scaling is not None and plan.scaling.from_zero and (
            plan.instance_scaling is None or plan.instance_scaling.min_instance_count != 0
        ):
            warn(
                "ScaleToZeroInstances",
                "plan.scaling.min_capacity 0: copies scale to zero but the instances stay (and are billed); "
                "set instance_scaling.min_instance_count 0 (ManagedInstanceScaling) to stop them too",
            )
        if plan.routing is not None and plan.routing.strategy == "kv-aware":
            # cfn-lint 1.58.0's schema (2026-10-20) of AWS::SageMaker::EndpointConfig RoutingConfig.RoutingStrategy
            # lists LEAST_OUTSTANDING_REQUESTS, PREFIX_AWARE and RANDOM; botocore 1.44.8 has KV_AWARE too.
            warn("KvAwareRouting", "routing.strategy kv-aware: CloudFormation's AWS::SageMaker::EndpointConfig "
                 "schema does not list KV_AWARE yet, so the deploy may be refused; prefix-aware is listed")
        has_secret = hf_token_secret is not None or bool(plan.hf_token_secret)
        errors = [
            *plan_errors(self, plan, has_secret=has_secret, kms_key=kms_key),
            *self._network_errors(vpc, subnets, security_groups, network_isolation, warn),
        ]
        if errors:
            raise InputError([f"{self.node.path}: {message}" for message in errors])

    def _network_errors(self, vpc: ec2.IVpc | None, subnets: ec2.SubnetSelection | None,
                        security_groups: Sequence[ec2.ISecurityGroup] | None, network_isolation: bool,
                        warn: Callable[[str, str], None]) -> list[str]:
        """Subnets only with a VPC; say what a VPC or network isolation asks of the container's way out."""
        errors: list[str] = []
        if vpc is None and (subnets is not None or security_groups):
            errors.append("subnets/security_groups: given without a vpc")
        from_hub = any(m.model_data_s3_uri is None for m in self.plan.models)
        if vpc is not None and not network_isolation and from_hub:
            warn(
                "VpcEgress",
                "vpc: the container's traffic leaves through these subnets: TGI and LMI download the weights from "
                "the Hugging Face Hub, so give the subnets a route out (a NAT gateway), or serve the model data "
                "from S3 through an S3 gateway endpoint",
            )
        if vpc is not None and any(m.model_data_s3_uri is not None for m in self.plan.models):
            warn(
                "VpcS3Weights",
                "vpc: SageMaker copies the weights from S3 through these subnets (host-vpc.html): give the VPC an S3 "
                "gateway endpoint (or a route out) that reaches the weights' bucket",
            )
        if network_isolation and from_hub:
            warn(
                "NetworkIsolation",
                "network_isolation: the container cannot reach the Hugging Face Hub; "
                "the image must find the model data elsewhere (S3)",
            )
        elif network_isolation and (hub := serving_engine(self.plan).hub_at_start) is not None:
            warn(
                "NetworkIsolation",
                f"network_isolation: the image looks up its compiled model in the Hub's {hub} as it starts, unless "
                "the weights in S3 are a neuron export; stage an export there, or leave network_isolation off",
            )
        return errors


def tag_with_plan(scope: Construct, plan: DeploymentPlan) -> None:
    """Tag everything under `scope` with the plan's tags, but no inference component with the version."""
    for key, value in plan.tags.items():
        # The version tag changes with every sagellm upgrade; on an inference component that change alone would
        # be a stack update of the component, which may set its copies back to the plan's count and drop the
        # ones the scaler added (docs/deploy.md). The endpoint and the stack still carry it.
        skip = ["AWS::SageMaker::InferenceComponent"] if key == VERSION_TAG else []
        Tags.of(scope).add(key, value, exclude_resource_types=skip)


def token_reference(secret: secretsmanager.ISecret | None, name_or_arn: str | None) -> SecretValue | None:
    """The token as a dynamic reference: from the given secret, else the plan's secret name or ARN."""
    if secret is not None:
        return secret.secret_value
    if name_or_arn:
        return SecretValue.secrets_manager(name_or_arn)
    return None
