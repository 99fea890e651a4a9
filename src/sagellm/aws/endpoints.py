"""What an existing SageMaker endpoint runs, read from its control plane (describe calls only, nothing changed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sagellm.engines import ENGINES
from sagellm.errors import InputError, TargetError

# Where the serving containers sagellm deploys read the model id (each engine's names, without repeats).
MODEL_ID_VARIABLES = tuple(dict.fromkeys(v for e in ENGINES.values() for v in e.model_id_variables))


@dataclass(frozen=True)
class DeployedEndpoint:
    """An in-service endpoint as deployed: what the bench labels, predicts and prices a run with."""

    name: str
    instance_type: str
    instance_count: int
    environment: dict[str, str]  # the invoked model's container environment
    tags: dict[str, str]
    inference_component: str | None = None  # the component the bench invokes (component-based endpoints)

    @property
    def model_id(self) -> str | None:
        """The Hugging Face model id: the `sagellm:model` tag, else the container's model variable."""
        return self.tags.get("sagellm:model") or next(
            (self.environment[v] for v in MODEL_ID_VARIABLES if self.environment.get(v)), None)


def describe_endpoint(sm: Any, name: str, component: str | None = None) -> DeployedEndpoint:
    """Read endpoint `name` (DescribeEndpoint/EndpointConfig/Model/InferenceComponent, ListTags).

    `component` picks the inference component to invoke; it may be left out when the endpoint has exactly
    one. InputError for a name that does not exist or a component that does not fit; TargetError when the
    endpoint is not in service or the control plane cannot be read."""
    try:
        return _describe(sm, name, component)
    except ClientError as error:
        if "Could not find" in str(error):
            raise InputError(f"--endpoint-name/--inference-component: {error.response['Error']['Message']} "
                             f"(region {sm.meta.region_name})") from None
        raise TargetError(f"could not read endpoint {name}: {error}") from None
    except BotoCoreError as error:
        raise TargetError(f"could not read endpoint {name}: {error}") from None


def _describe(sm: Any, name: str, component: str | None) -> DeployedEndpoint:
    endpoint = sm.describe_endpoint(EndpointName=name)
    if endpoint["EndpointStatus"] != "InService":
        raise TargetError(f"endpoint {name} is {endpoint['EndpointStatus']}, not InService: nothing to bench")
    config = sm.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    variant = config["ProductionVariants"][0]
    live: dict[str, Any] = next((v for v in endpoint.get("ProductionVariants", []) if v["VariantName"] == variant["VariantName"]), {})
    count = int(live.get("CurrentInstanceCount") or variant.get("InitialInstanceCount") or 1)
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=endpoint["EndpointArn"]).get("Tags", [])}
    if variant.get("ModelName"):
        if component:
            raise InputError(f"--inference-component: endpoint {name} serves model {variant['ModelName']} "
                             "directly, without inference components; leave the option out")
        model_name = variant["ModelName"]
    else:
        component = component or _only_component(sm, name)
        spec = sm.describe_inference_component(InferenceComponentName=component)
        if spec["EndpointName"] != name:
            raise InputError(f"--inference-component: {component} runs on endpoint {spec['EndpointName']}, "
                             f"not {name}")
        model_name = spec["Specification"]["ModelName"]
    model = sm.describe_model(ModelName=model_name)
    container = model.get("PrimaryContainer") or (model.get("Containers") or [{}])[0]
    return DeployedEndpoint(name=name, instance_type=variant["InstanceType"], instance_count=count,
                            environment=dict(container.get("Environment", {})), tags=tags,
                            inference_component=component)


def _only_component(sm: Any, endpoint: str) -> str:
    pages = sm.get_paginator("list_inference_components").paginate(EndpointNameEquals=endpoint)
    names = sorted(c["InferenceComponentName"] for page in pages for c in page["InferenceComponents"])
    if len(names) != 1:
        raise InputError(f"--inference-component: endpoint {endpoint} has "
                         f"{', '.join(names) if names else 'no inference components'}; name the one to bench")
    return names[0]
