"""The real CDK CLI deploys sagellm's own app into moto, streaming its output; the stack is deleted by name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import SageMakerModelBackend

from bench_helpers import processes_mentioning
from sagellm.aws import cdk_cli, cloudformation
from sagellm.aws.local import LocalAws
from sagellm.errors import TargetError

REPO = Path(__file__).resolve().parents[2]
# `cdk bootstrap` templates an S3 bucket policy, which moto skips (harmless for sagellm's stacks).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS.+S3.+BucketPolicy")


def test_the_version_sagellm_fetches_is_the_one_package_json_pins() -> None:
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["aws-cdk"]

    assert cdk_cli.CDK_CLI_VERSION == pinned


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAws]:
    with LocalAws() as local:
        cdk_cli.bootstrap(local.env(), tmp_path_factory.mktemp("bootstrap"))
        yield local


@pytest.mark.integration
@pytest.mark.parametrize(
    ("profile", "model", "instance", "extra"),
    [
        ("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", {"inference_components", "alarms"}),  # rollback alarms
        ("autoscale", "meta-llama/Llama-2-7b-hf", None, {"scalable_targets", "scaling_policies"}),
    ],
)
def test_deploys_into_moto_tagged_with_the_run_and_deleting_it_leaves_nothing(
    aws: LocalAws, tmp_path: Path, profile: str, model: str, instance: str | None, extra: set[str]
) -> None:
    # The Llama models are gated: synth needs the token's secret (moto does not resolve the reference).
    context = {"profile": profile, "model": model, "instance": instance, "hf_token_secret": "prod/huggingface/token",
               "bench_run": "r1", "bench_process": "h:1"}
    name = f"sagellm-it-{profile}"

    outputs = cdk_cli.deploy(name, context, aws.env(), tmp_path)

    sm, cfn = aws.client("sagemaker"), aws.client("cloudformation")
    assert sm.describe_endpoint(EndpointName=outputs["EndpointName"])["EndpointStatus"] == "InService"
    for key, component in outputs.items():
        if key.startswith("ComponentName"):
            assert sm.describe_inference_component(InferenceComponentName=component)["EndpointName"] == \
                outputs["EndpointName"]
    tags = cloudformation.tags(cfn.describe_stacks(StackName=name)["Stacks"][0])
    assert tags["sagellm:bench-run"] == "r1" and tags["sagellm:bench-process"] == "h:1"
    assert tags["sagellm:profile"] == profile
    assert set(aws.leftovers()) == {"stacks", "endpoints", "endpoint_configs", "models"} | extra
    assert (tmp_path / "cdk.out" / f"{name}.template.json").is_file()  # the assembly went where it was told

    assert cloudformation.delete_run_stack(cfn, name, "r1") is True

    assert aws.leftovers() == {}
    assert cloudformation.delete_run_stack(cfn, name, "r1") is False  # gone: nothing to delete


@pytest.mark.integration
def test_deploy_output_streams_line_by_line_while_the_cli_runs_and_into_the_log(
    aws: LocalAws, tmp_path: Path
) -> None:
    seen: list[tuple[str, bool]] = []  # each line, and whether the CLI was still running when it arrived

    def on_line(line: str) -> None:
        seen.append((line, bool(processes_mentioning(str(tmp_path / "cdk.out")))))

    context = {"profile": "max-throughput", "model": "meta-llama/Llama-2-7b-hf", "instance": "ml.g5.2xlarge",
               "bench_run": "r2", "hf_token_secret": "prod/huggingface/token"}
    cdk_cli.deploy("sagellm-it-stream", context, aws.env(), tmp_path, on_line=on_line)

    lines = [line for line, _ in seen]
    assert any("Synthesis time" in line for line in lines)
    assert any("sagellm-it-stream" in line and "CREATE_COMPLETE" in line for line in lines), lines
    assert seen[0][1], "the first line arrived after the CLI had ended: output was not streamed"
    log = (tmp_path / "cdk-deploy.log").read_text().splitlines()
    assert log[0].startswith("$ ") and f"--app {cdk_cli.app_command()}" in log[0].replace("'", "")
    assert [line for line in log[1:] if line.strip()] == lines
    cloudformation.delete_run_stack(aws.client("cloudformation"), "sagellm-it-stream", "r2")


@pytest.mark.integration
def test_failed_deploy_names_the_resource_and_leaves_nothing(
    aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_capacity(self: SageMakerModelBackend, **kwargs: object) -> None:
        raise ValidationError(message="Injected: insufficient capacity for ml.g5.2xlarge")

    monkeypatch.setattr(SageMakerModelBackend, "create_endpoint", no_capacity)
    context = {"profile": "max-throughput", "model": "meta-llama/Llama-2-7b-hf", "instance": "ml.g5.2xlarge",
               "hf_token_secret": "prod/huggingface/token"}

    with pytest.raises(TargetError) as failure:
        cdk_cli.deploy("sagellm-it-broken", context, aws.env(), tmp_path)

    message = str(failure.value)
    assert "\n" not in message
    assert "(AWS::SageMaker::Endpoint) CREATE_FAILED: Injected: insufficient capacity" in message
    assert "nothing left" in message
    assert aws.leftovers() == {}


@pytest.mark.integration
def test_a_redeploy_that_changes_only_the_scaling_keeps_the_copies_the_scaler_added(
    aws: LocalAws, tmp_path: Path
) -> None:
    """`cdk deploy` of `replicas` with scaled copies; Application Auto Scaling's call adds copies; a second
    `cdk deploy` with another target value updates the policy and leaves the component, and its copies, alone."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()

    def deploy(target: int) -> dict[str, str]:
        (profiles / "scaled-replicas.yaml").write_text(
            "name: scaled-replicas\nextends: replicas\ncomponents: {copies: 2}\n"
            f"autoscaling: {{min_capacity: 1, max_capacity: 4, target_value: {target}}}\n")
        context = {"profile": "scaled-replicas", "model": "meta-llama/Llama-2-13b-hf", "instance": "ml.p4d.24xlarge",
                   "hf_token_secret": "prod/huggingface/token", "profiles_dir": str(profiles), "bench_run": "r2"}
        return cdk_cli.deploy("sagellm-it-scaled", context, aws.env(), tmp_path / f"deploy-{target}")

    sm, aas, cfn = aws.client("sagemaker"), aws.client("application-autoscaling"), aws.client("cloudformation")
    [component] = [v for k, v in deploy(8).items() if k.startswith("ComponentName")]

    def copies() -> int:
        return int(sm.describe_inference_component(InferenceComponentName=component)["RuntimeConfig"]
                   ["DesiredCopyCount"])

    assert copies() == 2
    sm.update_inference_component_runtime_config(InferenceComponentName=component,
                                                 DesiredRuntimeConfig={"CopyCount": 4})
    deploy(4)
    assert copies() == 4
    [policy] = aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 4

    assert cloudformation.delete_run_stack(cfn, "sagellm-it-scaled", "r2") is True
    assert aws.leftovers() == {}


@pytest.mark.integration
def test_a_redeploy_on_another_instance_type_moves_an_autoscaled_endpoint(aws: LocalAws, tmp_path: Path) -> None:
    """`cdk deploy -c instance=…` again on `autoscale`: a new endpoint, the scalable target on it, the old one gone
    (SageMaker refuses to change a scaled variant's instance type in place; what moto cannot show is in
    tests/constructs/test_deploy_into_moto.py)."""
    def deploy(instance: str) -> str:
        context = {"profile": "autoscale", "model": "meta-llama/Llama-2-7b-hf", "instance": instance,
                   "hf_token_secret": "prod/huggingface/token", "bench_run": "r3"}
        return cdk_cli.deploy("sagellm-it-moved", context, aws.env(), tmp_path / instance)["EndpointName"]

    sm, aas, cfn = aws.client("sagemaker"), aws.client("application-autoscaling"), aws.client("cloudformation")
    before = deploy("ml.g6.xlarge")
    after = deploy("ml.g6.2xlarge")

    assert after != before
    assert [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]] == [after]
    [target] = aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert target["ResourceId"] == f"endpoint/{after}/variant/AllTraffic"
    assert cloudformation.delete_run_stack(cfn, "sagellm-it-moved", "r3") is True
    assert aws.leftovers() == {}


@pytest.mark.slow
def test_stopping_the_cli_waits_for_every_process_of_its_group(tmp_path: Path) -> None:
    # The CLI (a shell here, which SIGTERM ends at once) started a child that takes 0.5 s to exit (node
    # finishing up). Stopping must not return while the child still runs: the bench would exit, or tear
    # down, beside a CLI process still at work.
    child = tmp_path / "child.py"
    child.write_text("import signal, sys, time\n"
                     "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0)))\n"
                     "print('ready', flush=True)\n"
                     "time.sleep(60)\n")
    proc = subprocess.Popen(["sh", "-c", f'"{sys.executable}" "{child}" & wait'], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    cdk_cli._kill(proc)
    assert proc.returncode is not None
    assert not cdk_cli._group_running(proc.pid)
    assert processes_mentioning(str(child)) == []


class _Interrupted(BaseException):
    """What the bench's signal handler raises (sagellm.bench.interrupts.Interrupted is a KeyboardInterrupt)."""


@pytest.mark.slow
def test_an_interrupt_that_lands_while_the_cli_starts_stops_it_too(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The signal arrives once the CLI runs but before Popen has returned it to the caller (a loaded machine
    # widens that moment): the handler raises in the main thread, and the CLI must still be stopped, not left
    # deploying after the bench said it tore down.
    started: list[subprocess.Popen[str]] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.5)  # the main thread's handler runs meanwhile; Popen has not returned yet
        return proc

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    monkeypatch.setattr(cdk_cli.subprocess, "Popen", popen_then_signal)
    monkeypatch.setattr(cdk_cli, "find_cli", lambda: [sys.executable, "-c", "import time; time.sleep(60)"])
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(_Interrupted):
            cdk_cli._run(["deploy"], dict(os.environ), tmp_path, 60, "cdk-deploy.log", None)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(started) == 1 and started[0].returncode is not None  # stopped and reaped
    assert not cdk_cli._group_running(started[0].pid)


# A stand-in CLI: writes, as the deployed stack's one output, the CDK_VALIDATION its app would inherit.
_ECHO_VALIDATION_CLI = (
    "import json, os, sys\n"
    "out = sys.argv[sys.argv.index('--outputs-file') + 1]\n"
    "json.dump({sys.argv[2]: {'Validation': os.environ.get('CDK_VALIDATION', 'unset')}}, open(out, 'w'))\n"
)


@pytest.mark.slow
@pytest.mark.parametrize(("users", "app_gets"), [(None, "false"), ("true", "true")])
def test_the_bench_app_skips_cdks_builtin_template_validation_unless_the_user_asks_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, users: str | None, app_gets: str) -> None:
    monkeypatch.setattr(cdk_cli, "find_cli", lambda: [sys.executable, "-c", _ECHO_VALIDATION_CLI])
    env = {k: v for k, v in os.environ.items() if k != "CDK_VALIDATION"} | ({"CDK_VALIDATION": users} if users else {})

    outputs = cdk_cli.deploy("sagellm-echo", {}, env, tmp_path)

    assert outputs == {"Validation": app_gets}
