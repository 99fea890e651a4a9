"""LlmComponent: one model as an inference component of its own, added to an endpoint that hosts components."""

from __future__ import annotations

from aws_cdk import Annotations, Duration, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from sagellm.constructs._checks import plan_errors, reaches_hub
from sagellm.constructs._placement import copies_of, crowding_warning, joining_errors
from sagellm.constructs.inference_component import component_name, scaled_component
from sagellm.constructs.llm_endpoint import LlmEndpoint, tag_with_plan, token_reference
from sagellm.constructs.metrics import PERIOD, EndpointMetrics, ILlmEndpoint
from sagellm.constructs.model import container_model
from sagellm.constructs.role import INVOKE_ACTIONS, execution_role
from sagellm.errors import InputError
from sagellm.profiles.plan import DeploymentPlan


class LlmComponent(Construct, EndpointMetrics):
    """The one model of an inference-component `plan` (e.g. `resolve("replicas", …)`) on `endpoint`, with its own
    copies, scaling, `grant_invoke` and metrics: several of them put several models on one endpoint.

    Children: `Role` (unless `role` is given), `Model`, `Component` (with its rollback alarms `ComponentErrors`,
    `ComponentLatency`, as LlmEndpoint's components have) and `Scaling` when the plan scales its copies. The
    endpoint must host inference components: an LlmEndpoint of kind `inference-component`, or one deployed
    elsewhere (`LlmEndpoint.from_endpoint_name`) on instances of the plan's `instance_type`, whose variant is
    `AllTraffic` (sagellm's and the SageMaker SDK's). The token and network isolation work as in LlmEndpoint.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        endpoint: ILlmEndpoint,
        plan: DeploymentPlan,
        role: iam.IRole | None = None,
        hf_token_secret: secretsmanager.ISecret | None = None,
        network_isolation: bool | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.plan = plan
        self.endpoint = endpoint
        has_secret = hf_token_secret is not None or bool(plan.hf_token_secret)
        errors = [*_endpoint_errors(endpoint, plan), *plan_errors(self, plan, has_secret=has_secret)]
        if errors:
            raise InputError([f"{self.node.path}: {message}" for message in errors])
        if isinstance(endpoint, LlmEndpoint):
            _join(self, endpoint, plan)
        tag_with_plan(self, plan)

        (model,) = plan.models
        weights = [model.model_data_s3_uri] if model.model_data_s3_uri is not None else []
        if network_isolation is None:
            network_isolation = not reaches_hub(plan)
        self.component_name: str = component_name(self, model.name)
        self.role: iam.IRole = role or execution_role(
            self, "Role", image_uris=[model.image_uri], kms_key=None, components=[self.component_name],
            weights_s3_uris=weights,
        )
        cfn_model = container_model(
            self,
            "Model",
            model=model,
            role=self.role,
            hf_token=token_reference(hf_token_secret, plan.hf_token_secret),
            vpc_config=None,  # an inference-component endpoint's VPC is its endpoint config's
            network_isolation=network_isolation,
            own_role=role is None,
        )
        self.model_name: str = model.name  # the plan's name for it
        self.component = scaled_component(
            self,
            "",
            name=self.component_name,
            plan=plan,
            model=model,
            model_name=cfn_model.attr_model_name,
            endpoint_name=endpoint.endpoint_name,
        )
        # EndpointMetrics reads these: this component's metrics, by InferenceComponentName.
        self.endpoint_name: str = endpoint.endpoint_name
        self.endpoint_arn: str = endpoint.endpoint_arn
        self.inference_component_names = {model.name: self.component_name}

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow `grantee` to invoke the endpoint (plain and streaming), and nothing else.

        IAM cannot narrow this to the component: InvokeEndpoint's resource is the endpoint, and we found no
        condition key that names the inference component a call targets (SageMaker's keys for choosing inside an
        endpoint, sagemaker:TargetModel and sagemaker:TargetContainerHostname, are for multi-model and
        multi-container endpoints: https://docs.aws.amazon.com/sagemaker/latest/dg/multi-container-security.html).
        So the grantee may invoke every component on the endpoint.
        """
        return iam.Grant.add_to_principal(grantee=grantee, actions=INVOKE_ACTIONS,
                                          resource_arns=[self.endpoint_arn])

    def metric_gpu_utilization(self, *, statistic: str = "Average", model: str | None = None,
                               period: Duration = PERIOD) -> cloudwatch.Metric:
        """GPUUtilizationNormalized of this component's copies (0–100 % of the GPUs they reserve)."""
        return super().metric_gpu_utilization(statistic=statistic, model=model or self.model_name,
                                              period=period)


def _join(component: LlmComponent, endpoint: LlmEndpoint, plan: DeploymentPlan) -> None:
    """Put the plan's copies on the endpoint's instances: refused where the starting copies do not fit them; a
    warning where the components' most copies together do not (they share the room; see docs/deploy.md)."""
    joining = copies_of(plan)
    host = endpoint.node.path
    errors = joining_errors(endpoint.plan, host, endpoint.placed, joining)
    if errors:
        raise InputError([f"{component.node.path}: {message}" for message in errors])
    endpoint.placed.extend(joining)
    if (warning := crowding_warning(endpoint.plan, host, endpoint.placed)) is not None:
        Annotations.of(component).add_warning_v2("sagellm:CrowdedEndpoint", warning)


def _endpoint_errors(endpoint: ILlmEndpoint, plan: DeploymentPlan) -> list[str]:
    """A plan of one inference component, for an endpoint that hosts components on the plan's instances."""
    errors = []
    if plan.endpoint_kind != "inference-component":
        errors.append(f"plan.endpoint_kind: {plan.endpoint_kind!r}; a component needs an inference-component plan "
                      "(e.g. resolve('replicas', …))")
    if len(plan.models) != 1:
        errors.append(f"plan.models: a component serves exactly one model, got {len(plan.models)}; "
                      "give each model an LlmComponent of its own")
    if isinstance(endpoint, LlmEndpoint):
        hosted = endpoint.plan
        if hosted.endpoint_kind == "instance":
            errors.append(f"endpoint: {endpoint.node.path} is instance-based and cannot host inference components; "
                          "deploy it from an inference-component plan (e.g. the replicas profile)")
        elif hosted.instance_type != plan.instance_type and not Token.is_unresolved(plan.instance_type):
            errors.append(f"plan.instance_type: {plan.instance_type} but endpoint {endpoint.node.path} runs "
                          f"{hosted.instance_type}; resolve the plan for {hosted.instance_type} (its per-copy "
                          "compute is sized for the instance)")
    return errors
