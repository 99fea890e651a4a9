"""BenchStep: a CDK Pipelines step that benches the endpoint a stage just deployed, before promotion.

`pipeline.add_stage(stage, post=[BenchStep(pipeline_stack, "Bench", endpoint=stage.endpoint, thresholds=…)])`
runs `sagellm bench --target sagemaker --endpoint-name <the endpoint>` in CodeBuild after the stage deploys:
nothing is deployed or deleted, `junit.xml` goes to a CodeBuild report group, and a non-zero exit (gate failed,
endpoint failing) fails the step, which blocks the stages after it. It installs the sagellm version that
synthesized the pipeline, from pip's cache when CodeBuild kept it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from importlib.metadata import version

from aws_cdk import ArnFormat, CfnOutput, Stack, Tags, Token, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from constructs import Construct

from sagellm.constructs.llm_endpoint import LlmEndpoint
from sagellm.constructs.role import INVOKE_ACTIONS
from sagellm.errors import InputError

# What `sagellm bench --endpoint-name` reads to label, predict and price the run (aws/endpoints.py), and
# invokes. ListInferenceComponents (no resource-level permission) is not needed: the component is passed.
DESCRIBE_ACTIONS = ["sagemaker:DescribeEndpoint", "sagemaker:DescribeEndpointConfig", "sagemaker:DescribeModel",
                    "sagemaker:DescribeInferenceComponent", "sagemaker:ListTags"]
REPORT_ACTIONS = ["codebuild:CreateReport", "codebuild:UpdateReport", "codebuild:BatchPutTestCases",
                  "codebuild:BatchPutCodeCoverages"]
# The endpoint's resources carry `<BENCH_TAG>=<this step>`; the role may only touch resources tagged so.
BENCH_TAG = "sagellm:bench-step"
ENDPOINT_VARIABLE = "SAGELLM_ENDPOINT_NAME"
COMPONENT_VARIABLE = "SAGELLM_INFERENCE_COMPONENT"
# pip's cache in CodeBuild's standard images (they build as root), as the CodeArtifact guide lists it:
# https://docs.aws.amazon.com/codeartifact/latest/ug/dependency-caching.html
PIP_CACHE_PATHS = ["/root/.cache/pip/**/*"]


class BenchStep(pipelines.CodeBuildStep):
    """Bench a stage's LlmEndpoint in CodeBuild, gate on `thresholds`, publish JUnit; fail the step on a non-zero exit.

    `scope` (the pipeline's stack) holds the report group (`report_group`). The role may describe and invoke
    only resources tagged with this step (the endpoint, its config, models and components: the endpoint's
    names are chosen by CloudFormation, so tag-based access is how a policy in the pipeline's stack names
    them) and write its report group. `thresholds` is a path in `input` (the source), `install` what pip
    installs (default: the sagellm version synthesizing the pipeline, so the step cannot drift from it),
    `bench_args` any further `sagellm bench` options. pip's cache persists between runs in `cache` (default: a
    local cache on the build host, best effort; `codebuild.Cache.bucket(...)` shares it across hosts).
    """

    def __init__(self, scope: Construct, id: str, *, endpoint: LlmEndpoint, thresholds: str,
                 input: pipelines.IFileSetProducer | None = None, install: str = f"sagellm=={version('sagellm')}",
                 bench_args: Sequence[str] = (), out: str = "sagellm-results",
                 cache: codebuild.Cache | None = None) -> None:
        pipeline_stack, endpoint_stack = Stack.of(scope), Stack.of(endpoint)
        tag = f"{pipeline_stack.stack_name}.{id}"
        if Token.is_unresolved(tag):
            raise InputError(f"BenchStep {id}: the pipeline stack needs a literal stack name (got {tag})")
        Tags.of(endpoint).add(BENCH_TAG, tag)
        outputs = {ENDPOINT_VARIABLE: CfnOutput(endpoint, f"{id}EndpointName", value=endpoint.endpoint_name)}
        command = ["sagellm", "bench", "--target", "sagemaker", "--endpoint-name", _variable(ENDPOINT_VARIABLE)]
        names = list(endpoint.inference_component_names.values())
        if names:  # the first model's component: the one the bench's own stacks invoke too
            outputs[COMPONENT_VARIABLE] = CfnOutput(endpoint, f"{id}InferenceComponent", value=names[0])
            command += ["--inference-component", _variable(COMPONENT_VARIABLE)]
        region = endpoint_stack.region if not Token.is_unresolved(endpoint_stack.region) else _variable("AWS_REGION")
        command += ["--region", region, "--thresholds", thresholds, "--out", out, *bench_args]

        self.report_group = codebuild.ReportGroup(scope, f"{id}Reports", type=codebuild.ReportGroupType.TEST)
        self.tag = tag
        super().__init__(
            id,
            input=input,
            install_commands=[f"pip install {shlex.quote(install)}"],
            commands=[" ".join(a if a.startswith('"$') else shlex.quote(a) for a in command)],
            env_from_cfn_outputs=outputs,
            partial_build_spec=codebuild.BuildSpec.from_object({
                "reports": {self.report_group.report_group_arn: {
                    "files": ["junit.xml"], "base-directory": out, "file-format": "JUNITXML"}},
                "cache": {"paths": PIP_CACHE_PATHS},
            }),
            cache=cache or codebuild.Cache.local(codebuild.LocalCacheMode.CUSTOM),
            role_policy_statements=[
                iam.PolicyStatement(
                    sid="DescribeAndInvokeTheBenchedEndpoint",
                    actions=[*DESCRIBE_ACTIONS, *INVOKE_ACTIONS],
                    resources=[endpoint_stack.format_arn(service="sagemaker", resource=kind, resource_name="*",
                                                         arn_format=ArnFormat.SLASH_RESOURCE_NAME)
                               for kind in ("endpoint", "endpoint-config", "model", "inference-component")],
                    conditions={"StringEquals": {f"aws:ResourceTag/{BENCH_TAG}": tag}},
                ),
                iam.PolicyStatement(sid="WriteBenchReports", actions=REPORT_ACTIONS,
                                    resources=[self.report_group.report_group_arn]),
            ],
        )


def _variable(name: str) -> str:
    """A shell reference to an environment variable, quoted so the shell expands it as one word."""
    return f'"${name}"'
