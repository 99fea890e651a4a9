"""The `sagemaker` target end to end, as in a real account: `sagellm local-aws` (started here, outliving every
bench) is the control plane, `sagellm emulate` the data plane (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME), the
credentials are dummies. The account also holds a stack deployed with `cdk deploy -c profile=…` and a team's own
stack using LlmEndpoint: no bench and no cleanup may touch them."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from bench_helpers import (
    INSTANCE,
    MODEL,
    REPO,
    finish,
    local_aws_server,
    request_lines,
    results_of,
    sagellm,
    spawn,
    synthesizing,
    wait_for,
)
from sagellm.aws import cdk_cli
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess
from sagellm.planner import Payload
from sagellm.profiles import resolve

# The module fixture (local-aws, its bootstrap, two `cdk deploy`s) counts toward the first test's time.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
TOKEN_SECRET = "prod/huggingface/token"  # Llama 2 is gated; moto does not resolve the secret's reference
PROD_STACK = "sagellm-max-throughput-llama-2-7b-hf"  # what the README's `cdk deploy -c profile=…` names it
TEAM_STACK = "team-prod-llama"
TEAM_APP = """
    from aws_cdk import App, Stack
    from sagellm import LlmEndpoint
    from sagellm.profiles import resolve

    app = App()
    stack = Stack(app, "{name}")
    LlmEndpoint(stack, "Chat", plan=resolve("max-throughput", "{model}", "{instance}",
                                            hf_token_secret="{secret}"))
    app.synth()
"""


@dataclass
class Account:
    """The local account: its environment for child processes, and a way to look inside."""

    env: dict[str, str]
    server: subprocess.Popen[str]

    def client(self, service: str) -> Any:
        return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                             region_name="us-east-1").client(service, endpoint_url=self.env["AWS_ENDPOINT_URL"])

    def stacks(self) -> set[str]:
        return {s["StackName"] for s in self.client("cloudformation").describe_stacks()["Stacks"]
                if s["StackStatus"] != "DELETE_COMPLETE"} - {"CDKToolkit"}

    def contents(self) -> dict[str, set[str]]:
        """Every stack and SageMaker resource in the account."""
        sm = self.client("sagemaker")
        return {"stacks": self.stacks(),
                "endpoints": {e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]},
                "configs": {c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]},
                "models": {m["ModelName"] for m in sm.list_models()["Models"]}}

    def endpoint_of(self, stack: str) -> str:
        outputs = self.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]
        return next(o["OutputValue"] for o in outputs if o["OutputKey"] == "EndpointName")


def cdk_deploy(env: dict[str, str], cwd: Path, out: Path, *args: str) -> None:
    """The pinned CDK CLI, as a person runs it (`cdk deploy …` in their app's folder)."""
    command = [*cdk_cli.find_cli(), "deploy", "--all", "--require-approval", "never", "--method=direct",
               "--output", str(out), "--ci", "--no-notices", *args]
    done = subprocess.run(command, cwd=cwd, env=cdk_cli.cli_env(env), capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Account]:
    """`sagellm local-aws` with a `cdk deploy -c profile=…` stack and a team stack, and `sagellm emulate`."""
    folder = tmp_path_factory.mktemp("account")
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=Payload(256, 32))
    emulator = EmulatorProcess(plan, clock=Clock(0.1))
    with local_aws_server(folder) as (server, env):
        try:
            cdk_deploy(env, REPO, folder / "prod.out", "-c", "profile=max-throughput", "-c", f"model={MODEL}",
                       "-c", f"instance={INSTANCE}", "-c", f"hf_token_secret={TOKEN_SECRET}")
            team = folder / "team"
            team.mkdir()
            (team / "app.py").write_text(textwrap.dedent(TEAM_APP.format(name=TEAM_STACK, model=MODEL,
                                                                         instance=INSTANCE, secret=TOKEN_SECRET)))
            cdk_deploy(env, team, team / "cdk.out", "--app", f"{sys.executable} app.py")
            emulator.start()
            env["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"] = emulator.url
            yield Account(env, server)
        finally:
            emulator.stop()


def bench(out: Path, *extra: str, requests: str = "4") -> list[str]:
    """`sagellm bench --target sagemaker` arguments: a quick sweep into `out`."""
    return ["bench", "--target", "sagemaker", "--output-tokens", "32", "--concurrency", "1,2", "--warmup", "0",
            "--requests-per-level", requests, "--out", str(out), *extra]


OWN = ("--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE, "--hf-token-secret", TOKEN_SECRET)


def test_deploys_its_own_stack_benches_it_and_deletes_exactly_that(account: Account, tmp_path: Path) -> None:
    before = account.contents()
    # Credentials but no region in the environment (an SSO profile without one, CI with keys only): the run's
    # region (the default, us-east-1) is used from deploy to teardown.
    env = {k: v for k, v in account.env.items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")}

    ran = sagellm(*bench(tmp_path / "out", *OWN), env=env, cwd=tmp_path, timeout=600)

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "region us-east-1: the default (no AWS_REGION, AWS_DEFAULT_REGION or profile region set)" in ran.stderr
    results = results_of(tmp_path / "out")
    run = results["run"]
    assert (run["target"], run["emulated"], run["instance_type"]) == ("sagemaker", True, INSTANCE)
    assert results["teardown"] == {"status": "destroyed", "leftovers": [],
                                   "detail": f"stack sagellm-bench-max-throughput-{run['bench_run']} deleted"}
    assert [lv["ok"] for lv in results["levels"]] == [4, 4]
    assert account.contents() == before  # its own stack came and went; nothing else changed
    assert " cdk │ " in ran.stderr and "CREATE_COMPLETE" in ran.stderr  # deploy progress, streamed


def test_without_credentials_nothing_is_made_and_no_stack_is_spoken_of(account: Account, tmp_path: Path) -> None:
    before = account.contents()
    env = {k: v for k, v in account.env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}

    ran = sagellm(*bench(tmp_path / "out", *OWN), env=env, cwd=tmp_path)

    assert ran.returncode == 2, ran.stderr[-3000:]
    [line] = ran.stderr.strip().splitlines()
    assert line.startswith("sagellm: error: AWS credentials: none found") and "nothing was deployed" in line
    assert account.contents() == before
    assert not (tmp_path / "out").exists()  # refused before the run began: no results, no error.log


def test_a_region_the_account_has_not_bootstrapped_is_refused_before_anything_is_made(
        account: Account, tmp_path: Path) -> None:
    before = account.contents()
    env = account.env | {"AWS_REGION": "us-east-1"}

    ran = sagellm(*bench(tmp_path / "out", *OWN, "--region", "eu-west-1"), env=env, cwd=tmp_path)

    assert ran.returncode == 2, ran.stderr[-3000:]
    assert ran.stderr.strip().splitlines()[-1] == (
        "sagellm: error: --region eu-west-1: account 123456789012 is not bootstrapped for the CDK there (no "
        "CDKToolkit stack); run `sagellm cdk bootstrap aws://123456789012/eu-west-1` once, then run again; nothing "
        "was deployed")
    assert account.contents() == before
    eu = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="eu-west-1")
    assert eu.client("cloudformation", endpoint_url=account.env["AWS_ENDPOINT_URL"]).describe_stacks()["Stacks"] == []


def test_benches_an_existing_endpoint_without_creating_or_deleting_anything(account: Account, tmp_path: Path) -> None:
    endpoint = account.endpoint_of(PROD_STACK)
    before = account.contents()

    ran = sagellm(*bench(tmp_path / "out", "--endpoint-name", endpoint), env=account.env, cwd=tmp_path,
                  timeout=300)

    assert ran.returncode == 0, ran.stderr[-3000:]
    results = results_of(tmp_path / "out")
    run = results["run"]
    assert (run["profile"], run["model"], run["instance_type"], run["instance_count"]) == \
        ("max-throughput", MODEL, INSTANCE, 1)  # read from the endpoint: its tags, config and model
    assert run["endpoint"] == endpoint
    assert run["environment"]["HF_MODEL_ID"] == MODEL
    assert results["teardown"]["status"] == "not-applicable"
    assert results["levels"][0]["predicted"] is not None and results["cost"]["usd_per_h"] > 0
    # The runtime is an emulator at time scale 0.1: the bench reads it and measures in simulated time (the
    # SDK's per-call overhead, ×10 in simulated time, is what the wider tolerance leaves room for).
    assert (run["emulated"], run["time_scale"]) == (True, 0.1)
    first = results["levels"][0]
    assert first["throughput_tokens_per_s"] == pytest.approx(first["predicted"]["throughput_tokens_per_s"], rel=0.2)
    assert account.contents() == before
    assert not (tmp_path / "out" / "cdk").exists()


def test_a_model_that_contradicts_the_existing_endpoint_is_bad_input(account: Account, tmp_path: Path) -> None:
    endpoint = account.endpoint_of(PROD_STACK)

    ran = sagellm(*bench(tmp_path / "out", "--endpoint-name", endpoint, "--model", "mistralai/Mistral-7B-v0.1"),
                  env=account.env, cwd=tmp_path)

    assert ran.returncode == 2
    [line] = ran.stderr.strip().splitlines()
    assert line == (f"sagellm: error: --model: 'mistralai/Mistral-7B-v0.1', but endpoint {endpoint} serves "
                    f"'{MODEL}'; leave --model out")


def test_after_a_killed_bench_cleanup_deletes_exactly_its_stack(account: Account, tmp_path: Path) -> None:
    before = account.stacks()
    out = tmp_path / "out"
    started = time.monotonic()
    proc = spawn(*bench(out, *OWN, requests="200"), env=account.env, cwd=tmp_path)
    try:
        wait_for(lambda: bool(request_lines(out)) or proc.poll() is not None, 600, "the first request")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        # While the bench runs, its stack is in use, whatever the age limit.
        running = sagellm("cleanup", "--older-than", "0s", "--yes", env=account.env, cwd=tmp_path)
        assert running.returncode == 0, running.stderr
        assert f"its bench is still running (process {proc.pid} on this machine)" in running.stdout
        assert proc.poll() is None
        proc.kill()  # SIGKILL: no teardown
    finally:
        finish(proc, started)
    [left] = account.stacks() - before
    assert left.startswith("sagellm-bench-max-throughput-")

    listed = sagellm("cleanup", "--older-than", "0s", env=account.env, cwd=tmp_path)  # no terminal: no asking

    assert listed.returncode == 2
    assert "pass --yes to delete them" in listed.stderr
    assert f"delete  stack {left}" in listed.stdout
    assert account.stacks() == before | {left}

    deleted = sagellm("cleanup", "--older-than", "0s", "--yes", env=account.env, cwd=tmp_path)

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines()[-1] == "deleted 1 stack(s)"
    assert account.stacks() == before
    assert {PROD_STACK, TEAM_STACK} <= account.stacks()


def test_a_kept_stack_survives_a_later_run_in_the_same_folder_interrupted_during_synth(
        account: Account, tmp_path: Path) -> None:
    out = tmp_path / "out"
    kept = sagellm(*bench(out, *OWN, "--keep"), env=account.env, cwd=tmp_path, timeout=600)
    assert kept.returncode == 0, kept.stderr[-3000:]
    kept_stack = f"sagellm-bench-max-throughput-{results_of(out)['run']['bench_run']}"
    assert kept_stack in account.stacks()

    started = time.monotonic()
    proc = spawn(*bench(out, *OWN), env=account.env, cwd=tmp_path)
    try:
        wait_for(lambda: synthesizing(out) or proc.poll() is not None, 300, "the second run to synthesize")
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
    finally:
        second = finish(proc, started)

    assert second.returncode == 130, second.stderr[-3000:]
    teardown = results_of(out)["teardown"]
    assert teardown["status"] == "not-applicable" and "does not exist" in teardown["detail"]
    assert kept_stack in account.stacks()  # the first run's stack and assembly were never touched
    assert sagellm("cleanup", "--older-than", "0s", "--yes", env=account.env, cwd=tmp_path).returncode == 0
    assert kept_stack not in account.stacks()


def test_a_ramp_on_an_existing_endpoint_records_the_scaling_its_control_plane_shows(account: Account,
                                                                                     tmp_path: Path) -> None:
    endpoint = account.endpoint_of(PROD_STACK)
    [variant] = account.client("sagemaker").describe_endpoint(EndpointName=endpoint)["ProductionVariants"]

    ran = sagellm("bench", "--target", "sagemaker", "--endpoint-name", endpoint, "--ramp", "--request-rate", "1,2",
                  "--duration-per-level", "20", "--output-tokens", "16", "--out", str(tmp_path / "out"),
                  env=account.env, cwd=tmp_path, timeout=300)

    assert ran.returncode == 0, ran.stderr[-3000:]
    ramp = results_of(tmp_path / "out")["ramp"]
    # Read from DescribeEndpoint while the ramp ran (an instance-based variant: its instances are the capacity).
    assert (ramp["scaling"], ramp["capacity"], ramp["policy"]) == ("observed", "instances", None)
    assert ramp["events"] and ramp["events"][0]["kind"] == "observed"
    assert ramp["events"][0]["in_service"] == variant["CurrentInstanceCount"]
    assert {iv["instances_in_service"] for iv in ramp["intervals"]} == {variant["CurrentInstanceCount"]}
    assert ramp["cold_start_s"] is None  # nothing was refused for want of a copy
    assert "Scaling: **observed** on the endpoint" in (tmp_path / "out" / "report.md").read_text()


def test_when_the_control_plane_is_gone_at_teardown_results_are_written_and_the_stack_named(
        account: Account, tmp_path: Path) -> None:
    """Last in the module: it stops the local account."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = spawn(*bench(out, *OWN, requests="12"), env=account.env, cwd=tmp_path)
    try:
        wait_for(lambda: bool(request_lines(out)) or proc.poll() is not None, 600, "the first request")
        account.server.kill()  # the control plane is unreachable from now on
        account.server.wait()
    finally:
        ran = finish(proc, started, timeout=300)

    assert ran.returncode == 3, ran.stderr[-3000:]
    results = results_of(out)
    stack = f"stack sagellm-bench-max-throughput-{results['run']['bench_run']}"
    assert results["teardown"]["status"] == "failed"
    assert results["teardown"]["leftovers"] == [stack]
    assert [lv["ok"] for lv in results["levels"]] == [12, 12]  # the sweep finished and counts
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sagellm: error: TEARDOWN FAILED: deleting {stack} in us-east-1 failed: Could not "
                           "connect to the endpoint URL")
    assert last.endswith("delete with `sagellm cleanup --region us-east-1 --older-than 0s --yes` or `aws "
                         f"cloudformation delete-stack --stack-name {stack.split()[1]} --region us-east-1`")
    assert (out / "report.md").is_file()
