"""Deploy and destroy the EndpointStack through the real, pinned CDK CLI (`npx --no-install cdk`).

The same calls serve a real account and the local AWS: only `env` (the CLI's environment) differs.
Nothing here knows about moto.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from sagellm.aws.node import use_bundled_node
from sagellm.errors import TargetError

# Stack states a failed create leaves; the stack holds nothing useful and blocks the next deploy.
_DELETABLE_AFTER_FAILURE = {"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED"}
_MAX_REASON_CHARS = 300


def find_app_dir(start: Path | None = None) -> Path:
    """The directory holding `cdk.json` + `app.py`: searched upwards from `start` (default: cwd), then
    from this package's location (an editable install sits inside the repository)."""
    for origin in (start or Path.cwd(), Path(__file__)):
        for folder in (origin.resolve(), *origin.resolve().parents):
            if (folder / "cdk.json").is_file() and (folder / "app.py").is_file():
                return folder
    raise TargetError(
        f"no CDK app found (cdk.json + app.py) above {start or Path.cwd()} or {Path(__file__).parent}; "
        "run from the sagellm repository"
    )


def cli_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CLI's environment: `env` (default: os.environ) plus offline defaults it does not set itself."""
    full = dict(os.environ if env is None else env)
    # `python3 app.py` (cdk.json) must run in this interpreter's virtualenv, where sagellm is installed.
    full["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full.get("PATH", os.defpath)])
    full.setdefault("CDK_DISABLE_CLI_TELEMETRY", "1")
    full.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    full.setdefault("CDK_HOME", str(Path(tempfile.gettempdir()) / "sagellm-cdk-home"))
    use_bundled_node(full)  # jsii synthesizes faster on it, and prints no end-of-life banner
    return full


def bootstrap(
    env: Mapping[str, str] | None = None,
    *,
    app_dir: Path | None = None,
    timeout_s: float = 600,
    log: Path | None = None,
) -> None:
    """`cdk bootstrap` the account and region of `env` (for a fresh local AWS; real accounts usually are)."""
    full, app_dir = cli_env(env), app_dir or find_app_dir()
    account = (
        _session(full).client("sts", endpoint_url=_endpoint(full, "sts")).get_caller_identity()["Account"]
    )
    region = full.get("AWS_REGION") or full.get("AWS_DEFAULT_REGION") or "us-east-1"
    # `--app ""`: bootstrap an explicit environment without synthesizing cdk.json's app (it needs context).
    with tempfile.TemporaryDirectory() as scratch:  # it would otherwise leave an empty cdk.out in app_dir
        args = ["bootstrap", f"aws://{account}/{region}", "--app", "", "--output", scratch]
        result = _run(args, full, app_dir, timeout_s, log)
    if result.returncode != 0:
        raise TargetError(f"cdk bootstrap aws://{account}/{region} failed: {_last_error(result.stdout)}")


def deploy(
    stack_name: str,
    context: Mapping[str, str | None],
    env: Mapping[str, str] | None,
    outdir: Path,
    *,
    app_dir: Path | None = None,
    timeout_s: float = 3600,
) -> dict[str, str]:
    """`cdk deploy` the stack with `-c key=value` context; returns its outputs. On failure raises TargetError
    naming the failed resource and its reason, after deleting a stack the failed create left behind."""
    full, app_dir, outdir = cli_env(env), app_dir or find_app_dir(), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    outputs_file = outdir / "cdk-outputs.json"
    outputs_file.unlink(missing_ok=True)
    # `--all`: the app holds exactly one stack, named by the `stack_name` context key; the CLI selects stacks
    # by construct id, which need not equal the stack name.
    args = [
        "deploy",
        "--all",
        *_context_args(context, stack_name),
        "--output",
        str(outdir / "cdk.out"),
        "--method=direct",
        "--require-approval",
        "never",
        "--outputs-file",
        str(outputs_file),
    ]
    result = _run(args, full, app_dir, timeout_s, outdir / "cdk-deploy.log")
    if result.returncode != 0:
        raise TargetError(_deploy_failure(stack_name, full, result.stdout))
    outputs: dict[str, dict[str, str]] = json.loads(outputs_file.read_text())
    return outputs.get(stack_name) or next(iter(outputs.values()), {})


def destroy(
    stack_name: str,
    context: Mapping[str, str | None],
    env: Mapping[str, str] | None,
    *,
    outdir: Path | None = None,
    app_dir: Path | None = None,
    timeout_s: float = 3600,
) -> None:
    """`cdk destroy --force` the stack (a no-op when it does not exist). Reuses the cloud assembly `deploy`
    left in `outdir` when there is one (no second synth). On failure raises TargetError listing what is
    left."""
    full, app_dir = cli_env(env), app_dir or find_app_dir()
    assembly = Path(outdir) / "cdk.out" if outdir else None
    if assembly and (assembly / "manifest.json").is_file():
        args = ["destroy", "--all", "--app", str(assembly), "--force"]
    else:
        args = ["destroy", "--all", *_context_args(context, stack_name), "--force"]
    log = Path(outdir) / "cdk-destroy.log" if outdir else None
    result = _run(args, full, app_dir, timeout_s, log)
    if result.returncode != 0:
        left = _remaining_resources(stack_name, full)
        raise TargetError(
            f"cdk destroy {stack_name} failed: {_last_error(result.stdout)}; "
            f"left: {', '.join(left) or 'unknown'}; "
            f"delete with `sagellm cleanup` or `aws cloudformation delete-stack --stack-name {stack_name}`"
        )


def _context_args(context: Mapping[str, str | None], stack_name: str) -> list[str]:
    pairs = {"stack_name": stack_name, **context}
    return [arg for key, value in pairs.items() if value is not None for arg in ("-c", f"{key}={value}")]


def _run(
    args: list[str], env: dict[str, str], cwd: Path, timeout_s: float, log: Path | None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own process group, killed with everything it started on timeout or interrupt."""
    command = ["npx", "--no-install", "cdk", *args, "--no-notices", "--ci"]
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise TargetError(
            f"cdk {args[0]} did not finish within {timeout_s:.0f} s and was stopped; "
            "what it created so far is still there"
        ) from None
    except BaseException:  # Ctrl-C / SIGTERM in the bench: stop the CLI too, then let the bench tear down
        _kill(proc)
        raise
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(command)}\n{stdout}")
    if proc.returncode != 0 and "could not determine executable to run" in stdout:
        raise TargetError(f"the pinned CDK CLI is not installed in {cwd}/node_modules: run `npm ci` there")
    return subprocess.CompletedProcess(command, proc.returncode, stdout)


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _session(env: Mapping[str, str]) -> boto3.session.Session:
    """A boto3 session configured like the CLI's environment (credentials, profile, region)."""
    return boto3.session.Session(
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        profile_name=env.get("AWS_PROFILE"),
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
    )


def _endpoint(env: Mapping[str, str], service: str) -> str | None:
    return env.get(f"AWS_ENDPOINT_URL_{service.upper()}") or env.get("AWS_ENDPOINT_URL")


def _cloudformation(env: Mapping[str, str]) -> Any:
    return _session(env).client("cloudformation", endpoint_url=_endpoint(env, "cloudformation"))


def _last_error(output: str) -> str:
    """The most telling line: the app's last line when synth failed, else the CLI's ❌ line, else the last
    line that says error, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if "Subprocess exited with error" in line:  # the app failed to synthesize: its own last words
            said = [x for x in lines[:index] if not x.lower().startswith(("npm warn", "(node:", "$ "))]
            return f"{said[-1]} ({line})" if said else line
    for marker in ("❌", "Error", "error"):
        hits = [line for line in lines if marker in line]
        if hits:
            return hits[-1][: _MAX_REASON_CHARS * 2]
    return lines[-1] if lines else "no output"


def _deploy_failure(stack_name: str, env: Mapping[str, str], output: str) -> str:
    """One line: the first resource that failed and why, and what the rollback left."""
    cfn = _cloudformation(env)
    try:
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    except ClientError:  # no stack: synth, credentials or bootstrap failed before CloudFormation ran
        return f"cdk deploy {stack_name} failed before CloudFormation created anything: {_last_error(output)}"
    events = _events_of_last_attempt(cfn, stack["StackId"])
    failed = next(
        (
            e
            for e in events
            if e["ResourceStatus"].endswith("_FAILED")
            and "cancelled" not in e.get("ResourceStatusReason", "")
        ),
        None,
    )
    if failed:
        reason = " ".join(failed.get("ResourceStatusReason", "").split())
        if len(reason) > _MAX_REASON_CHARS:
            reason = reason[:_MAX_REASON_CHARS] + "…"
        cause = (
            f"{failed['LogicalResourceId']} ({failed['ResourceType']}) {failed['ResourceStatus']}: {reason}"
        )
    else:
        cause = f"stack {stack['StackStatus']}: {stack.get('StackStatusReason') or _last_error(output)}"
    status = stack["StackStatus"]
    if status in _DELETABLE_AFTER_FAILURE:
        left = _remaining_resources(stack_name, env)
        try:
            cfn.delete_stack(StackName=stack["StackId"])
            cfn.get_waiter("stack_delete_complete").wait(
                StackName=stack["StackId"], WaiterConfig={"Delay": 5, "MaxAttempts": 360}
            )
            after = (
                "rolled back and deleted the stack; nothing left"
                if not left
                else f"deleted the stack and what the rollback left ({', '.join(left)})"
            )
        except (ClientError, BotoCoreError) as error:  # WaiterError is a BotoCoreError
            after = (
                f"{status}; deleting the stack failed ({error}); left: {', '.join(left) or 'the stack'}; "
                "delete with `sagellm cleanup`"
            )
    else:  # an update rolled back to the previous, working stack: not ours to delete
        after = f"stack is {status}"
    return f"deploy of {stack_name} failed: {cause}; {after}"


def _events_of_last_attempt(cfn: Any, stack_id: str) -> list[dict[str, Any]]:
    """The stack's events since its last User Initiated create/update, oldest first."""
    events: list[dict[str, Any]] = []
    for page in cfn.get_paginator("describe_stack_events").paginate(StackName=stack_id):
        for event in page["StackEvents"]:  # newest first
            events.append(event)
            if (
                event["ResourceType"] == "AWS::CloudFormation::Stack"
                and event.get("ResourceStatusReason") == "User Initiated"
                and event["ResourceStatus"] in ("CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS")
            ):
                return events[::-1]
    return events[::-1]


def _remaining_resources(stack_name: str, env: Mapping[str, str]) -> list[str]:
    """`LogicalId (Type)` of each resource the stack still holds; empty when the stack is gone."""
    try:
        pages = _cloudformation(env).get_paginator("list_stack_resources").paginate(StackName=stack_name)
        return [
            f"{r['LogicalResourceId']} ({r['ResourceType']})"
            for page in pages
            for r in page["StackResourceSummaries"]
            if r.get("ResourceStatus") != "DELETE_COMPLETE"
        ]
    except ClientError:  # the stack does not exist (any more)
        return []
