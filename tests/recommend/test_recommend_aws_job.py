"""`recommend` hands its shortlist to SageMaker AI's recommendation job: the requests pass botocore's model and go
out only through a client (here a Stubber)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import boto3
from botocore.stub import Stubber

from sagellm.aws import ai_jobs
from sagellm.catalog import find_model
from sagellm.planner import Payload
from sagellm.recommend import Load, Recommendation, Space, choose, instance_types, search
from sagellm.recommend.aws_job import AwsJob, shortlist, write_and_submit
from sagellm.results.gate import Rule

JOB = AwsJob("arn:aws:iam::111122223333:role/AIJobs", "s3://team-models/llama-2-7b-hf/", "s3://team-results/rec/")
ARN = "arn:aws:sagemaker:us-east-1:111122223333:"


@cache
def recommendation() -> Recommendation:
    load, payload = Load(concurrency=4), Payload(512, 128)
    rules = (Rule(metric="ttft_ms.p90", where="4", max=2000),)
    types = instance_types(("ml.g5.xlarge", "ml.g5.2xlarge", "ml.g6e.xlarge", "ml.g6.xlarge"))
    space = Space(find_model("llama2-7b"), payload, types, engines=("vllm",))
    return choose(search(space, load, rules), load, rules, payload)


def test_the_shortlist_is_the_picks_type_then_the_cheapest_others_meeting_the_slo_at_most_three() -> None:
    rec = recommendation()
    assert rec.pick is not None
    types = shortlist(rec)
    assert types[0] == rec.pick.config.instance_type and len(types) == 3 == len(set(types))
    cheapest = {}
    for c in rec.candidates:
        if c.meets:
            cheapest[c.config.instance_type] = min(cheapest.get(c.config.instance_type, c.usd_per_h), c.usd_per_h)
    assert set(types) <= set(cheapest)
    assert set(types) <= set(ai_jobs.enum("CreateAIRecommendationJob", "ComputeSpec", "InstanceTypes"))


def test_both_requests_are_written_valid_and_sent_in_order_through_the_client(tmp_path: Path) -> None:
    rec = recommendation()
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")  # never sent: the Stubber answers
    workload = ai_jobs.workload_config_request("recommended-llama-2-7b-hf", {"placeholder": 1})
    with Stubber(client) as stub:
        stub.add_response("create_ai_workload_config", {"AIWorkloadConfigArn": f"{ARN}ai-workload-config/w"})
        stub.add_response("create_ai_recommendation_job", {"AIRecommendationJobArn":
                                                           f"{ARN}ai-recommendation-job/recommended-llama-2-7b-hf"})
        said = write_and_submit(rec, "meta-llama/Llama-2-7b-hf", JOB, tmp_path, client)
        stub.assert_no_pending_responses()
    assert said[-1] == f"CreateAIRecommendationJob: {ARN}ai-recommendation-job/recommended-llama-2-7b-hf"
    written = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.request.json")}
    assert set(written) == {"CreateAIWorkloadConfig.request.json", "CreateAIRecommendationJob.request.json"}
    job = written["CreateAIRecommendationJob.request.json"]
    assert ai_jobs.request_problems("CreateAIRecommendationJob", job) == []
    assert job["AIWorkloadConfigIdentifier"] == workload["AIWorkloadConfigName"]
    assert job["InferenceSpecification"] == {"Framework": "VLLM"}
    assert job["ComputeSpec"] == {"InstanceTypes": shortlist(rec)}
    assert job["PerformanceTarget"] == {"Constraints": [{"Metric": "ttft-ms"}, {"Metric": "cost"}]}
    spec = json.loads(written["CreateAIWorkloadConfig.request.json"]["AIWorkloadConfigs"]["WorkloadSpec"]["Inline"])
    assert spec["parameters"]["concurrency"] == 4 and spec["parameters"]["prompt_input_tokens_mean"] == 512
