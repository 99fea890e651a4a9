"""cfn-lint over the synthesized matrix: every standard profile × TGI and LMI × regions (GovCloud, a region
without inference components), plus an Inferentia plan; each template checked against the CloudFormation
resource specification of its own region."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Template
from cfnlint.api import lint
from construct_plans import HF_SECRET, LLAMA2_7B, STANDARD, cdk_app

from sagellm.catalog.pricing import PRICES_ENV
from sagellm.errors import InputError
from sagellm.profiles import DeploymentPlan, resolve
from sagellm.stacks import EndpointStack

pytestmark = pytest.mark.integration

REGIONS = ("us-east-1", "us-gov-west-1", "eu-west-3")
# Warnings cfn-lint may give that are acknowledged, by rule id, with the reason. None today: W3005 (DependsOn
# the role beside its GetAtt) is gone since the model depends on the role's policy only.
ACKNOWLEDGED: dict[str, str] = {}


def lmi_profiles(folder: Path) -> Path:
    """Team profiles: each standard profile served by LMI instead of TGI."""
    for name in STANDARD:
        (folder / f"{name}-lmi.yaml").write_text(f"name: {name}-lmi\nextends: {name}\ncontainer: {{kind: lmi}}\n")
    return folder


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DeploymentPlan]:
    """Every plan of the matrix that sagellm accepts (inference components are refused, in one line, where
    CloudFormation lacks them: tested in test_regions_and_vpc.py)."""
    team = lmi_profiles(tmp_path_factory.mktemp("lmi-profiles"))
    # instance_type: auto ranks by the region's own prices only, and the tests ask no Price List: a team's file
    # prices one type in the other regions (a test figure: the matrix lints templates, any price picks a type).
    prices = tmp_path_factory.mktemp("prices") / "prices.csv"
    prices.write_text("instance_type,region,per_h,currency,date,source\n" + "".join(
        f"ml.g6.2xlarge,{region},1.0,USD,test,a test figure\n" for region in REGIONS[1:]))
    plans: dict[str, DeploymentPlan] = {}
    refused = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PRICES_ENV, str(prices))
        for region in REGIONS:
            for name, (model, instance) in STANDARD.items():
                for profile in (name, f"{name}-lmi"):
                    try:
                        plans[f"{profile}@{region}"] = resolve(profile, model, instance, region=region,
                                                               profiles_dir=team, hf_token_secret=HF_SECRET)
                    except InputError:
                        refused.append(f"{profile}@{region}")
    components = ("replicas", "replicas-lmi", "scale-to-zero", "scale-to-zero-lmi")
    assert sorted(refused) == sorted(f"{p}@{r}" for p in components
                                     for r in ("us-gov-west-1", "eu-west-3"))
    plans["inferentia@us-east-1"] = resolve("max-throughput", LLAMA2_7B, "ml.inf2.24xlarge",
                                            hf_token_secret=HF_SECRET)
    plans["inferentia-vllm-neuronx@us-east-1"] = resolve("max-throughput", LLAMA2_7B, "ml.inf2.24xlarge",
                                                         hf_token_secret=HF_SECRET, engine="vllm-neuronx")
    return plans


def test_the_matrix_synthesizes_with_no_cfn_lint_error_and_only_acknowledged_warnings(matrix) -> None:
    app = cdk_app()
    stacks = {case: EndpointStack(app, f"Stack{index}", plan=plan, stack_name=f"sagellm-matrix-{index}")
              for index, (case, plan) in enumerate(matrix.items())}
    findings = []
    for case, stack in stacks.items():
        template = json.dumps(Template.from_stack(stack).to_json())
        findings += [f"{case}: {m.rule.id} {m.message}" for m in lint(template, regions=[matrix[case].region])
                     if m.rule.id not in ACKNOWLEDGED]
    assert len(matrix) == 30 and findings == []


def test_cfn_lint_finds_what_the_matrix_would_get_wrong() -> None:
    """The check can fail: a routing strategy SageMaker does not have, and an inference component in eu-west-3."""
    plan = resolve("autoscale", LLAMA2_7B, hf_token_secret=HF_SECRET)
    template = Template.from_stack(EndpointStack(cdk_app(), "Stack", plan=plan)).to_json()
    config = next(r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::EndpointConfig")
    config["Properties"]["ProductionVariants"][0]["RoutingConfig"]["RoutingStrategy"] = "FASTEST"
    template["Resources"]["Component"] = {"Type": "AWS::SageMaker::InferenceComponent",
                                          "Properties": {"EndpointName": "x"}}
    rules = {m.rule.id for m in lint(json.dumps(template), regions=["eu-west-3"])}
    assert {"E3030", "E3006"} <= rules, rules
