"""The profile's `routing` in the template: the production variant's RoutingConfig as CloudFormation names it
(PREFIX_AWARE with its PrefixAwareRoutingConfig), and what cfn-lint's schema says of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Annotations, Match, Template
from cfnlint.api import lint
from construct_plans import HF_SECRET, cdk_app

from sagellm.profiles import resolve
from sagellm.stacks import EndpointStack

CONFIG = "AWS::SageMaker::EndpointConfig"


def routed(tmp_path: Path, routing: str, container: str = "tgi") -> tuple[Template, EndpointStack]:
    """The replicas profile (four copies of a 13B model on a p4d) with `routing` (YAML) and `container`."""
    (tmp_path / "routed.yaml").write_text(f"name: routed\nextends: replicas\ncontainer: {{kind: {container}}}\n"
                                          f"routing: {routing}\n")
    plan = resolve("routed", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", profiles_dir=tmp_path,
                   hf_token_secret=HF_SECRET)
    stack = EndpointStack(cdk_app(), "Stack", plan=plan, stack_name="sagellm-routed")
    return Template.from_stack(stack), stack


def variant(template: Template) -> dict[str, object]:
    config = next(iter(template.find_resources(CONFIG).values()))
    return config["Properties"]["ProductionVariants"][0]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_prefix_aware_routing_is_written_as_cloudformation_names_it_and_lints_clean(tmp_path: Path) -> None:
    template, _ = routed(tmp_path, "{strategy: prefix-aware, prefix_length: 2048, concurrency_threshold: 8}")
    assert variant(template)["RoutingConfig"] == {
        "RoutingStrategy": "PREFIX_AWARE",
        "PrefixAwareRoutingConfig": {"PrefixLength": 2048, "ConcurrencyThreshold": 8},
    }
    findings = [f"{m.rule.id} {m.message}" for m in lint(json.dumps(template.to_json()), regions=["us-east-1"])]
    assert findings == []


@pytest.mark.slow
def test_random_routing_has_no_prefix_settings(tmp_path: Path) -> None:
    template, _ = routed(tmp_path, "{strategy: random}")
    assert variant(template)["RoutingConfig"] == {"RoutingStrategy": "RANDOM"}


@pytest.mark.slow
def test_kv_aware_routing_is_written_and_warned_of_cloudformation_does_not_list_it_yet(tmp_path: Path) -> None:
    template, stack = routed(tmp_path, "{strategy: kv-aware}", container="vllm")
    assert variant(template)["RoutingConfig"] == {"RoutingStrategy": "KV_AWARE"}
    assert Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("does not list KV_AWARE"))
    # What the warning says: cfn-lint's schema refuses the value (E3030: not one of its enum).
    rules = {m.rule.id for m in lint(json.dumps(template.to_json()), regions=["us-east-1"])}
    assert "E3030" in rules


@pytest.mark.slow
def test_detailed_metrics_are_the_endpoint_configs_metrics_config_and_lint_clean(tmp_path: Path) -> None:
    # Detailed observability scrapes each container's Prometheus endpoint (AWS's images: its path found by SageMaker).
    (tmp_path / "observed.yaml").write_text("name: observed\nextends: replicas\ncontainer: {kind: vllm}\n"
                                            "metrics: {detailed: true, publish_every_s: 30}\n")
    plan = resolve("observed", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", profiles_dir=tmp_path,
                   hf_token_secret=HF_SECRET)
    template = Template.from_stack(EndpointStack(cdk_app(), "Stack", plan=plan, stack_name="sagellm-observed"))
    config = next(iter(template.find_resources(CONFIG).values()))["Properties"]
    assert config["MetricsConfig"] == {"EnableDetailedObservability": True, "MetricPublishFrequencyInSeconds": 30}
    assert [f"{m.rule.id} {m.message}" for m in lint(json.dumps(template.to_json()), regions=["us-east-1"])] == []
    # Without the field, the config carries no MetricsConfig (SageMaker's defaults).
    default = Template.from_stack(EndpointStack(cdk_app(), "Stack", plan=resolve(
        "replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", hf_token_secret=HF_SECRET),
        stack_name="sagellm-default"))
    assert "MetricsConfig" not in next(iter(default.find_resources(CONFIG).values()))["Properties"]


def test_a_publish_interval_cloudwatch_does_not_take_is_one_line(tmp_path: Path) -> None:
    from sagellm.errors import InputError

    (tmp_path / "odd.yaml").write_text("name: odd\nextends: replicas\nmetrics: {detailed: true, publish_every_s: 45}\n")
    with pytest.raises(InputError, match="metrics.publish_every_s"):
        resolve("odd", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", profiles_dir=tmp_path,
                hf_token_secret=HF_SECRET)
