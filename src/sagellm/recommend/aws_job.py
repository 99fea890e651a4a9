"""The other half of a recommendation: SageMaker AI's recommendation job, measuring the instance types sagellm
shortlisted (its pick first, then the cheapest others predicted to meet the SLO, at most 3) at the same load.

Writes CreateAIWorkloadConfig (the target load and payload as an AIPerf spec) and CreateAIRecommendationJob into the
recommendation's folder; sends them only when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagellm.aws import ai_jobs
from sagellm.bench.aiperf import spec_of
from sagellm.bench.specs import Closed, Open, WorkloadOptions
from sagellm.errors import InputError
from sagellm.recommend.choose import Recommendation
from sagellm.recommend.write import profile_name

JOB = "CreateAIRecommendationJob"
WORKLOAD = "CreateAIWorkloadConfig"


@dataclass(frozen=True)
class AwsJob:
    """Where SageMaker AI reads the model, writes its results, and which role it runs as."""

    role_arn: str
    model_s3_uri: str
    output_s3_uri: str
    name: str | None = None  # the job's and its workload config's name (default: from the model)


def shortlist(rec: Recommendation) -> list[str]:
    """The pick's instance type, then those of the cheapest other candidates predicted to meet the SLO: at most 3,
    each one SageMaker AI's recommendation job takes."""
    allowed = ai_jobs.enum(JOB, "ComputeSpec", "InstanceTypes")
    ranked = ([rec.pick] if rec.pick is not None else []) + sorted(
        (c for c in rec.candidates if c.meets and c is not rec.pick), key=lambda c: c.usd_per_h)
    types = [c.config.instance_type for c in ranked if c.config.instance_type in allowed]
    return list(dict.fromkeys(types))[:ai_jobs.MAX_INSTANCE_TYPES]


def requests(rec: Recommendation, model_id: str, job: AwsJob) -> list[tuple[str, dict[str, Any]]]:
    """The workload config and the recommendation job, in the order they are sent."""
    types = shortlist(rec)
    if not types:
        raise InputError("--aws-role-arn: no candidate meets the SLO on an instance type SageMaker AI's "
                         "recommendation job takes; nothing to hand over")
    name = ai_jobs.job_name(job.name or profile_name(model_id))
    p = rec.payload
    workload = WorkloadOptions(input_tokens=str(p.input_tokens), output_tokens=str(p.output_tokens))
    load: Closed | Open = Closed((rec.load.concurrency,)) if rec.load.concurrency is not None \
        else Open((rec.load.request_rate or 0.0,), "poisson")  # recommend's rate is Poisson arrivals
    engine = rec.pick.config.engine if rec.pick is not None else ""
    params = ai_jobs.recommendation_job_request(
        name, model_s3_uri=job.model_s3_uri, output_s3_uri=job.output_s3_uri, workload_config=name,
        role_arn=job.role_arn, framework=ai_jobs.FRAMEWORKS.get(engine, "VLLM"), instance_types=types,
        metrics=metrics(rec))
    return [(WORKLOAD, ai_jobs.workload_config_request(name, spec_of(workload, load))), (JOB, params)]


def metrics(rec: Recommendation) -> list[str]:
    """The job's objectives from the SLO: TTFT where a rule bounds it, throughput where one does, and cost (what
    `recommend` minimises) always."""
    out = ["ttft-ms"] if any(r.metric.startswith("ttft") for r in rec.rules) else []
    out += ["throughput"] if any(r.metric.startswith("throughput") for r in rec.rules) else []
    return [*out, "cost"]


def write_and_submit(rec: Recommendation, model_id: str, job: AwsJob, out: Path, sagemaker: Any = None) -> list[str]:
    """Write both requests into `out`; with a client (`sagemaker`), send them in order. → what to tell the user."""
    said = []
    sent = requests(rec, model_id, job)
    for operation, params in sent:  # all written before any is sent
        said.append(f"wrote {ai_jobs.write_request(out, operation, params)}")
    if sagemaker is not None:
        for operation, params in sent:
            reply = ai_jobs.submit(operation, params, sagemaker)
            said.append(f"{operation}: {next((v for k, v in reply.items() if k.endswith('Arn')), '')}")
    return said
