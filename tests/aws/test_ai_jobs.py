"""SageMaker AI job requests: checked by botocore's own model, written as botocore takes them, sent through a
Stubber (no real account is called)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from sagellm.aws import ai_jobs
from sagellm.errors import InputError, TargetError

ROLE = "arn:aws:iam::111122223333:role/AIJobs"
ARN = "arn:aws:sagemaker:us-east-1:111122223333:"


def recommendation(**changes: object) -> dict:
    params = ai_jobs.recommendation_job_request(
        "llama-job", model_s3_uri="s3://team-models/llama/", output_s3_uri="s3://team-results/rec/",
        workload_config="llama-workload", role_arn=ROLE, framework="VLLM",
        instance_types=["ml.g5.xlarge", "ml.g6e.xlarge"], metrics=["ttft-ms", "cost"])
    return params | changes


def stubbed() -> tuple[object, Stubber]:
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")  # never sent: the Stubber answers
    return client, Stubber(client)


def test_each_request_sagellm_builds_passes_botocores_validation() -> None:
    spec = {"benchmark": {"type": "aiperf"}, "parameters": {"concurrency": 4}}
    assert ai_jobs.request_problems("CreateAIWorkloadConfig", ai_jobs.workload_config_request(
        "w", spec, "s3://team-data/chat.jsonl")) == []
    assert ai_jobs.request_problems("CreateAIRecommendationJob", recommendation()) == []
    assert ai_jobs.request_problems("CreateAIBenchmarkJob", ai_jobs.benchmark_job_request(
        "bench-1", endpoint="prod-chat", workload_config="w", output_s3_uri="s3://team-results/b/", role_arn=ROLE,
        inference_components=("chat-ic",), mlflow_arn=f"{ARN}mlflow-tracking-server/team")) == []


def test_a_missing_member_an_unknown_one_and_the_models_limits_are_each_a_line() -> None:
    params = recommendation(AIRecommendationJobName="-bad-", Extra=1,
                            ComputeSpec={"InstanceTypes": ["ml.g5.xlarge", "ml.g5.2xlarge", "ml.g6.xlarge",
                                                           "ml.m5.large"]})
    del params["RoleArn"]
    problems = ai_jobs.request_problems("CreateAIRecommendationJob", params)
    assert 'Missing required parameter in input: "RoleArn"' in problems
    assert any(p.startswith('Unknown parameter in input: "Extra"') for p in problems)
    assert "CreateAIRecommendationJob.ComputeSpec.InstanceTypes: 4 items; at most 3" in problems
    assert any(p.startswith("CreateAIRecommendationJob.ComputeSpec.InstanceTypes[3]: 'ml.m5.large' is not one")
               for p in problems)
    assert any(p.startswith("CreateAIRecommendationJob.AIRecommendationJobName: '-bad-' does not match")
               for p in problems)
    with pytest.raises(InputError):
        ai_jobs.write_request(Path("unused"), "CreateAIRecommendationJob", params)


def test_a_written_request_is_exactly_the_parameters_botocore_takes(tmp_path: Path) -> None:
    path = ai_jobs.write_request(tmp_path, "CreateAIRecommendationJob", recommendation())
    assert path == tmp_path / "CreateAIRecommendationJob.request.json"
    written = json.loads(path.read_text())
    assert written == recommendation()
    client, stub = stubbed()
    stub.add_response("create_ai_recommendation_job", {"AIRecommendationJobArn": f"{ARN}ai-recommendation-job/x"},
                      written)
    with stub:
        assert client.create_ai_recommendation_job(**written)["AIRecommendationJobArn"].endswith("/x")  # type: ignore[attr-defined]
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(("operation", "params", "reply"), [
    ("CreateAIWorkloadConfig", ai_jobs.workload_config_request("w", {"benchmark": {"type": "aiperf"}}),
     {"AIWorkloadConfigArn": f"{ARN}ai-workload-config/w"}),
    ("CreateAIRecommendationJob", recommendation(), {"AIRecommendationJobArn": f"{ARN}ai-recommendation-job/r"}),
    ("CreateAIBenchmarkJob", ai_jobs.benchmark_job_request("b", endpoint="e", workload_config="w",
                                                           output_s3_uri="s3://bucket/out/", role_arn=ROLE),
     {"AIBenchmarkJobArn": f"{ARN}ai-benchmark-job/b"}),
])
def test_submit_sends_the_request_and_returns_the_services_reply(operation: str, params: dict, reply: dict) -> None:
    client, stub = stubbed()
    import botocore

    stub.add_response(botocore.xform_name(operation), reply, params)
    with stub:
        assert ai_jobs.submit(operation, params, client) == reply
    stub.assert_no_pending_responses()


def test_a_refusal_by_the_service_is_one_target_error_line() -> None:
    client, stub = stubbed()
    stub.add_client_error("create_ai_recommendation_job", "ResourceLimitExceeded", "no quota for ml.g6e.xlarge")
    with stub, pytest.raises(TargetError) as caught:
        ai_jobs.submit("CreateAIRecommendationJob", recommendation(), client)
    assert str(caught.value) == ("CreateAIRecommendationJob: ResourceLimitExceeded: no quota for ml.g6e.xlarge")


def test_job_names_become_what_the_model_takes() -> None:
    assert ai_jobs.job_name("prod_chat/endpoint--benchmark") == "prod-chat-endpoint-benchmark"
    assert len(ai_jobs.job_name("x" * 100)) == 63
