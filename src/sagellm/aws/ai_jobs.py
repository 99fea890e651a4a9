"""SageMaker AI's own jobs (CreateAIWorkloadConfig, CreateAIRecommendationJob, CreateAIBenchmarkJob): each request
as botocore takes it, checked against botocore's service model, written as `<OperationName>.request.json`, and sent
only when asked.

The checks are botocore's own ParamValidator (required members, types, minimums, unknown members) plus what that
validator leaves to the service: maximum lengths and sizes, enums and patterns of the model's shapes. No request here
has been sent to a real account by this project's tests: they go through botocore's Stubber (docs/aws-ai-jobs.md).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import botocore
import botocore.session
from botocore.exceptions import BotoCoreError, ClientError
from botocore.model import OperationModel, Shape
from botocore.validate import ParamValidator

from sagellm.errors import InputError, TargetError

SERVICE = "sagemaker"
OPERATIONS = ("CreateAIWorkloadConfig", "CreateAIRecommendationJob", "CreateAIBenchmarkJob")
MAX_INSTANCE_TYPES = 3  # AIRecommendationInstanceTypeList: "You can specify up to 3 instance types"
FRAMEWORKS = {"lmi": "LMI", "vllm": "VLLM"}  # AIRecommendationInferenceFramework, by sagellm's container kind


@cache
def _model() -> Any:
    return botocore.session.get_session().get_service_model(SERVICE)


def operation(name: str) -> OperationModel:
    """The operation in the installed botocore's SageMaker model (InputError naming the botocore that has it)."""
    model = _model()
    if name not in model.operation_names:
        raise InputError(f"{name}: not in botocore {botocore.__version__}'s SageMaker model; sagellm's AI-job "
                         "requests need botocore 1.44.8 or newer (pip install -U boto3)")
    return model.operation_model(name)


def enum(operation_name: str, *path: str) -> tuple[str, ...]:
    """The values the model allows at a member path of an operation's input (a list's members: its member)."""
    shape: Shape = operation(operation_name).input_shape
    for part in path:
        shape = shape.member if shape.type_name == "list" else shape.members[part]  # type: ignore[attr-defined]
    if shape.type_name == "list":
        shape = shape.member  # type: ignore[attr-defined]
    return tuple(shape.enum)


def request_problems(operation_name: str, params: dict[str, Any]) -> list[str]:
    """Everything botocore's ParamValidator and the model's limits say is wrong with a request, one line each."""
    shape = operation(operation_name).input_shape
    report = ParamValidator().validate(params, shape)
    problems = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
    return problems + _limits(params, shape, operation_name)


def _limits(value: Any, shape: Shape, where: str) -> list[str]:
    """What ParamValidator leaves to the service: max lengths and sizes, enums, patterns (that Python can read)."""
    meta, kind = shape.metadata, shape.type_name
    if kind == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return [p for key, item in value.items() if key in members
                for p in _limits(item, members[key], f"{where}.{key}")]
    if kind == "list" and isinstance(value, list) or kind == "map" and isinstance(value, dict):
        return _collection_limits(value, shape, where)
    if kind == "string" and isinstance(value, str):
        return _string_limits(value, shape, where)
    if kind in ("integer", "long") and isinstance(value, int) and value > meta.get("max", value):
        return [f"{where}: {value} is above {meta['max']}"]
    return []


def _collection_limits(value: list[Any] | dict[str, Any], shape: Shape, where: str) -> list[str]:
    """A list's or a map's size, then each item's (a map's keys too) against its member shapes."""
    meta = shape.metadata
    what = "items" if isinstance(value, list) else "entries"
    out = [f"{where}: {len(value)} {what}; at most {meta['max']}"] if len(value) > meta.get("max", len(value)) \
        else []
    if isinstance(value, list):
        return out + [p for i, item in enumerate(value) for p in _limits(item, shape.member, f"{where}[{i}]")]  # type: ignore[attr-defined]
    return out + [p for k, v in value.items() for p in (*_limits(k, shape.key, f"{where} key {k!r}"),  # type: ignore[attr-defined]
                                                        *_limits(v, shape.value, f"{where}.{k}"))]  # type: ignore[attr-defined]


def _string_limits(value: str, shape: Shape, where: str) -> list[str]:
    """A string within the model's enum, length and pattern (the first it breaks)."""
    meta = shape.metadata
    if shape.enum and value not in shape.enum:
        known = ", ".join(shape.enum[:12]) + (f", … ({len(shape.enum)} in all)" if len(shape.enum) > 12 else "")
        return [f"{where}: {value!r} is not one the model allows ({known})"]
    if len(value) > meta.get("max", len(value)):
        return [f"{where}: {len(value)} characters; at most {meta['max']}"]
    pattern = _pattern(meta.get("pattern"))
    if pattern is not None and not pattern.fullmatch(value):
        return [f"{where}: {value!r} does not match the pattern {meta['pattern']}"]
    return []


@cache
def _pattern(text: str | None) -> re.Pattern[str] | None:
    """A shape's pattern as Python reads it; None where it uses what Python's re lacks (\\p{L} classes)."""
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error:
        return None


def check_request(operation_name: str, params: dict[str, Any]) -> None:
    """InputError listing every problem of a request before it is written or sent."""
    if problems := request_problems(operation_name, params):
        raise InputError([f"{operation_name} request: {p}" for p in problems])


def write_request(out: Path, operation_name: str, params: dict[str, Any]) -> Path:
    """Check a request and write it as `<out>/<OperationName>.request.json`: the parameters botocore takes."""
    check_request(operation_name, params)
    path = out / f"{operation_name}.request.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(params, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--out: cannot write {path}: {exc.strerror or exc}; choose a folder you can write to") \
            from None
    return path


def client(region: str | None) -> Any:
    """A SageMaker client in `region` (None: the AWS configuration's), with the caller's credentials."""
    import boto3

    return boto3.client(SERVICE, region_name=region)


def submit(operation_name: str, params: dict[str, Any], sagemaker: Any) -> dict[str, Any]:
    """Send a checked request through `sagemaker` (a boto3 client); a refusal is one TargetError line."""
    check_request(operation_name, params)
    method = getattr(sagemaker, botocore.xform_name(operation_name))
    try:
        reply: dict[str, Any] = method(**params)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise TargetError(f"{operation_name}: {error.get('Code', 'error')}: {error.get('Message', exc)}") from None
    except BotoCoreError as exc:
        raise TargetError(f"{operation_name}: {exc}") from None
    return reply


def check_output_readable(s3: Any, uri: str, flag: str) -> None:
    """InputError when the caller cannot list `uri` (an S3 prefix): sagellm reads a job's results there with the
    caller's own credentials, so it is checked before anything is deployed."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    try:
        s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise InputError(f"{flag}: cannot list {uri} with your credentials ({error.get('Code', 'error')}: "
                         f"{error.get('Message', exc)}); sagellm reads the jobs' results there: fix the URI or "
                         "the permission (s3:ListBucket, s3:GetObject); nothing was deployed") from None
    except BotoCoreError as exc:
        raise TargetError(f"{flag}: S3 could not be reached to check {uri}: {exc}; nothing was deployed") from None


# ------------------------------------------------------------------------------------------------ the requests

def tags(values: dict[str, str]) -> list[dict[str, str]]:
    """A TagList from a mapping."""
    return [{"Key": k, "Value": v} for k, v in values.items()]


def workload_config_request(name: str, spec: dict[str, Any], dataset_s3_uri: str | None = None,
                            tag_values: dict[str, str] | None = None) -> dict[str, Any]:
    """CreateAIWorkloadConfig: an AIPerf spec inline (as JSON text), and its dataset channel where one is given."""
    params: dict[str, Any] = {"AIWorkloadConfigName": name,
                              "AIWorkloadConfigs": {"WorkloadSpec": {"Inline": json.dumps(spec)}}}
    if dataset_s3_uri is not None:
        params["DatasetConfig"] = {"InputDataConfig": [
            {"ChannelName": "dataset", "DataSource": {"S3DataSource": {"S3Uri": dataset_s3_uri}}}]}
    if tag_values:
        params["Tags"] = tags(tag_values)
    return params


def recommendation_job_request(name: str, *, model_s3_uri: str, output_s3_uri: str, workload_config: str,
                               role_arn: str, framework: str, instance_types: list[str], metrics: list[str],
                               tag_values: dict[str, str] | None = None) -> dict[str, Any]:
    """CreateAIRecommendationJob: the model in S3, the workload config by name, up to 3 instance types."""
    params: dict[str, Any] = {
        "AIRecommendationJobName": name,
        "ModelSource": {"S3": {"S3Uri": model_s3_uri}},
        "OutputConfig": {"S3OutputLocation": output_s3_uri},
        "AIWorkloadConfigIdentifier": workload_config,
        "PerformanceTarget": {"Constraints": [{"Metric": m} for m in metrics]},
        "RoleArn": role_arn,
        "InferenceSpecification": {"Framework": framework},
        "ComputeSpec": {"InstanceTypes": instance_types},
    }
    if tag_values:
        params["Tags"] = tags(tag_values)
    return params


def benchmark_job_request(name: str, *, endpoint: str, workload_config: str, output_s3_uri: str, role_arn: str,
                          inference_components: tuple[str, ...] = (), mlflow_arn: str | None = None,
                          tag_values: dict[str, str] | None = None) -> dict[str, Any]:
    """CreateAIBenchmarkJob: AIPerf against an endpoint (or some of its components), results to S3."""
    target: dict[str, Any] = {"Identifier": endpoint}
    if inference_components:
        target["InferenceComponents"] = [{"Identifier": c} for c in inference_components]
    output: dict[str, Any] = {"S3OutputLocation": output_s3_uri}
    if mlflow_arn is not None:
        output["MlflowConfig"] = {"MlflowResourceArn": mlflow_arn}
    params: dict[str, Any] = {"AIBenchmarkJobName": name, "BenchmarkTarget": {"Endpoint": target},
                              "OutputConfig": output, "AIWorkloadConfigIdentifier": workload_config,
                              "RoleArn": role_arn}
    if tag_values:
        params["Tags"] = tags(tag_values)
    return params


def job_name(text: str) -> str:
    """A name the model's AIEntityName takes: letters and digits joined by hyphens, at most 63 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:63].rstrip("-")
    return cleaned or "sagellm"
