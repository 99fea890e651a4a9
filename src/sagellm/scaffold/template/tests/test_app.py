"""The endpoint this app deploys, checked without an AWS account: `pytest` in the app's folder (conftest.py
runs aws_cdk on the Node that sagellm installs: none needs to be on PATH)."""

from pathlib import Path

from aws_cdk import App
from aws_cdk.assertions import Match, Template

from sagellm.cdk_app import endpoint_stack

APP = Path(__file__).resolve().parents[1]
MODEL = "tiiuae/falcon-7b"


def team_template() -> Template:
    """The template `cdk synth -c profile=team -c model=…` makes from this app's profiles/ folder."""
    app = App(context={"profile": "team", "model": MODEL, "profiles_dir": str(APP / "profiles")})
    return Template.from_stack(endpoint_stack(app))


def test_the_team_profile_deploys_one_endpoint_tagged_with_its_profile_and_owner() -> None:
    template = team_template()

    template.resource_count_is("AWS::SageMaker::Endpoint", 1)
    template.has_resource_properties("AWS::SageMaker::Endpoint", {
        # Tags are in key order; array_with matches them as a subsequence.
        "Tags": Match.array_with([{"Key": "owner", "Value": "my-team"}, {"Key": "sagellm:profile", "Value": "team"}]),
    })
