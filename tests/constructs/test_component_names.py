"""Inference-component names are sagellm's job: any model id of the catalog, on any standard profile, deploys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Template
from construct_plans import HF_SECRET, cdk_app, synth, two_model_plan

from sagellm.catalog import models
from sagellm.constructs import LlmEndpoint
from sagellm.constructs.inference_component import name_part
from sagellm.errors import InputError
from sagellm.profiles import resolve
from sagellm.profiles.plan import pascal

# CreateInferenceComponent's InferenceComponentName (botocore sagemaker service-2.json).
SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?$")
PROFILES = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale")
COMPONENT = "AWS::SageMaker::InferenceComponent"


def test_a_valid_name_is_kept_and_any_other_becomes_one_that_never_meets_another() -> None:
    assert name_part("llama2-13b") == "llama2-13b"
    dotted = name_part("mistral-7b-instruct-v0.3")
    assert re.fullmatch(r"mistral-7b-instruct-v0-3-[0-9a-f]{6}", dotted)
    # Names that differ only where SageMaker takes no character stay apart, and from the valid spelling.
    parts = [name_part(n) for n in ("qwen2.5-7b", "qwen2_5-7b", "qwen2-5-7b", "Qwen/Qwen2.5-7B", "..", "-a-")]
    assert len(set(parts)) == len(parts) and all(SAGEMAKER_NAME.match(p) for p in parts)
    assert name_part("qwen2.5-7b") == name_part("qwen2.5-7b")  # deterministic: a redeploy keeps the name


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("no-team-profiles")


@pytest.mark.slow
def test_every_catalog_model_on_every_standard_profile_builds_an_endpoint_with_valid_names(empty_dir: Path) -> None:
    # The construct's own validation and naming, for all 35 × 5 plans (built, not synthesized: ~50 ms each).
    app = cdk_app()
    built = 0
    for profile in PROFILES:
        for index, model_id in enumerate(models()):
            plan = resolve(profile, model_id, profiles_dir=empty_dir, hf_token_secret=HF_SECRET)
            stack = Stack(app, f"S{profile}{index}", stack_name=f"sagellm-{profile}-{index}")
            endpoint = LlmEndpoint(stack, "Llm", plan=plan)
            names = endpoint.inference_component_names
            if plan.endpoint_kind == "inference-component":
                assert set(names) == {m.name for m in plan.models}
                assert all(SAGEMAKER_NAME.match(n) and len(n) <= 63 for n in names.values()), names
            else:
                assert names == {}
            built += 1
    assert built == 5 * len(models()) and any("." in m for m in models())


@pytest.mark.slow
def test_a_dotted_model_deploys_on_replicas_as_a_named_component(empty_dir: Path) -> None:
    plan = resolve("replicas", "mistralai/Mistral-7B-Instruct-v0.3", profiles_dir=empty_dir,
                   hf_token_secret=HF_SECRET)
    [model] = plan.models
    assert model.name == "mistral-7b-instruct-v0.3"  # the plan keeps the logical name; the construct derives
    template = synth(plan)
    [component] = template.find_resources(COMPONENT).values()
    name = component["Properties"]["InferenceComponentName"]
    assert re.fullmatch(r"sagellm-test-mistral-7b-instruct-v0-3-[0-9a-f]{6}-[0-9a-f]{6}", name)
    template.has_output(f"ComponentName{pascal(model.name)}", {"Value": name})


@pytest.mark.slow
def test_two_copies_of_one_dotted_model_on_one_endpoint_get_two_names(empty_dir: Path) -> None:
    team = empty_dir.parent / "team-two-copies"
    team.mkdir(exist_ok=True)
    (team / "twice.yaml").write_text(
        "name: twice\nextends: replicas\ninstance_type: ml.g5.12xlarge\nserving: {tensor_parallel: 1}\n"
        "components:\n  copies: 2\n  extra_models:\n    - {model: Qwen/Qwen2.5-7B, tensor_parallel: 1, copies: 2}\n")
    plan = resolve("twice", "Qwen/Qwen2.5-7B", profiles_dir=team)
    assert [m.name for m in plan.models] == ["qwen2.5-7b", "qwen2.5-7b-1"]
    names = list(LlmEndpoint(Stack(cdk_app(), "Stack", stack_name="sagellm-test"), "Llm",
                             plan=plan).inference_component_names.values())
    assert len(set(names)) == 2 and all(SAGEMAKER_NAME.match(n) for n in names)


@pytest.mark.slow
def test_a_long_dotted_name_stays_within_63_characters_and_unique() -> None:
    long_name = "a.very.long.model.name.from.some.hub.organisation_with_underscores-v0.3"
    plan = two_model_plan(models=tuple(m.model_copy(update={"name": f"{long_name}-{i}"})
                                       for i, m in enumerate(two_model_plan().models)))
    endpoint = LlmEndpoint(Stack(cdk_app(), "Stack", stack_name="sagellm-a-long-team-stack-name"), "Llm", plan=plan)
    names = list(endpoint.inference_component_names.values())
    assert len(set(names)) == 2 and all(SAGEMAKER_NAME.match(n) and len(n) <= 63 for n in names)
    Template.from_stack(Stack.of(endpoint)).resource_count_is(COMPONENT, 2)


def test_names_that_would_share_a_construct_id_are_refused_in_one_line() -> None:
    models_ = two_model_plan().models
    plan = two_model_plan(models=(models_[0].model_copy(update={"name": "qwen2.5-7b"}),
                                  models_[1].model_copy(update={"name": "qwen2-5-7b"})))
    with pytest.raises(InputError) as exc:
        LlmEndpoint(Stack(cdk_app(), "Stack", stack_name="sagellm-test"), "Llm", plan=plan)
    assert exc.value.messages == [("Stack/Llm: plan.models: names 'qwen2.5-7b', 'qwen2-5-7b' give the same "
                                   "construct id (Qwen257b); rename one")]
