"""`--target sagemaker --endpoint-name NAME`: bench an endpoint someone else deployed, as it is.

Nothing is created or deleted. What is deployed (instance type and count, the container environment, the
`sagellm:profile`/`sagellm:model` tags) labels the run, sizes the prediction and prices it; profile, model and
instance given on the command line must agree with it.
"""

from __future__ import annotations

from sagellm.aws.account import Account
from sagellm.aws.endpoints import DeployedEndpoint, describe_endpoint
from sagellm.bench.client.transports import TGI, Api, SageMakerTransport, Transport
from sagellm.bench.targets.http import runtime_is_emulated
from sagellm.bench.targets.scaling_watch import Watched
from sagellm.catalog import find_model
from sagellm.errors import InputError
from sagellm.results.schema import Teardown


def read_endpoint(name: str, component: str | None, account: Account) -> DeployedEndpoint:
    """Describe the endpoint in the run's account and region."""
    return describe_endpoint(account.client("sagemaker"), name, component)


def reconcile(deployed: DeployedEndpoint, profile: str | None, model: str | None,
              instance: str | None) -> tuple[str, str]:
    """The run's profile and model: what is deployed, unless given; given values must agree with it."""
    name, errors = deployed.name, []
    tagged = deployed.tags.get("sagellm:profile")
    if profile and tagged and profile != tagged:
        errors.append(f"ServingSpec.profile: {profile!r}, but endpoint {name} was deployed with {tagged!r} (its "
                      "sagellm:profile tag); leave ServingSpec.profile out")
    if not (profile or tagged):
        errors.append(f"ServingSpec.profile: endpoint {name} carries no sagellm:profile tag; name the profile it "
                      "was deployed with (it sizes the prediction)")
    served = deployed.model_id
    if model and served and _hf_id(model) != served:
        errors.append(f"ServingSpec.model: {model!r}, but endpoint {name} serves {served!r}; leave "
                      "ServingSpec.model out")
    if not (model or served):
        errors.append(f"ServingSpec.model: endpoint {name} names no model (no sagellm:model tag or HF_MODEL_ID); "
                      "give the Hugging Face id it serves")
    if instance and instance != deployed.instance_type:
        errors.append(f"ServingSpec.instance: {instance!r}, but endpoint {name} runs on "
                      f"{deployed.instance_type!r}; leave ServingSpec.instance out")
    if errors:
        raise InputError(errors)
    return str(profile or tagged), str(model or served)


def _hf_id(model: str) -> str:
    """A catalog alias as its Hugging Face id; other ids as given."""
    try:
        return find_model(model, "--model").hf_id
    except InputError:
        return model


class ExistingEndpoint(Watched):
    """An in-service SageMaker endpoint: invoked as deployed, its scaling read from its control plane
    (`scaling_watch`); nothing deployed, nothing deleted."""

    kind = "sagemaker"
    emulated = False
    deploys = False

    def __init__(self, deployed: DeployedEndpoint, account: Account, *, api: Api = TGI):
        self.deployed, self.account, self.api = deployed, account, api
        self.endpoint: str | None = deployed.name

    def deploy(self) -> Transport:
        self.emulated = runtime_is_emulated()
        self.watch_scaling(self.deployed.name, self.deployed.inference_component, self.account)
        return SageMakerTransport(self.deployed.name, self.account.region, api=self.api,
                                  inference_component=self.deployed.inference_component,
                                  boto_session=self.account.session())

    def teardown(self) -> Teardown:
        self.stop_watching()
        return Teardown(status="not-applicable",
                        detail=f"existing endpoint {self.deployed.name}: nothing deployed, nothing deleted")

    def may_be_left(self) -> list[str]:
        return []
