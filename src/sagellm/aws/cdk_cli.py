"""Bootstrap and deploy through the real CDK CLI, with sagellm's own app (`python -m sagellm.cdk_app`).

The CLI runs in a work folder the caller owns (one per run) with `--app` and `--output` given explicitly,
so it never reads a `cdk.json`, an app or a cloud assembly it happens to find; which CLI runs (found or
fetched) is `cdk_cli_lookup`'s choice. Its output streams line by line into a log file in that folder and to
an optional callback. The same calls serve a real account and the local AWS: only `env` (the CLI's
environment) differs. Nothing here knows about moto.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sagellm.aws import cloudformation
from sagellm.aws.cdk_cli_lookup import CDK_CLI_VERSION, find_cli
from sagellm.aws.node import use_bundled_node
from sagellm.errors import TargetError

__all__ = ["CDK_CLI_VERSION", "app_command", "bootstrap", "cli_env", "deploy", "find_cli"]

# Stack states a failed create leaves; the stack holds nothing useful and blocks the next deploy.
_DELETABLE_AFTER_FAILURE = {"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED"}
_MAX_REASON_CHARS = 300
_KILL_GRACE_S = 10

LineSink = Callable[[str], None]


def app_command() -> str:
    """`--app` for sagellm's own CDK app, run by this interpreter (so it imports this sagellm)."""
    return f"{shlex.quote(sys.executable)} -m sagellm.cdk_app"


def cli_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CLI's environment: `env` (default: os.environ) plus offline defaults it does not set itself."""
    full = dict(os.environ if env is None else env)
    full.setdefault("CDK_DISABLE_CLI_TELEMETRY", "1")
    full.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    full.setdefault("CDK_HOME", str(Path(tempfile.gettempdir()) / "sagellm-cdk-home"))
    use_bundled_node(full)  # jsii synthesizes faster on it, and prints no end-of-life banner
    return full


def bootstrap(env: Mapping[str, str] | None, workdir: Path, *, timeout_s: float = 600,
              on_line: LineSink | None = None) -> None:
    """`cdk bootstrap` the account and region of `env` (for a fresh local AWS; real accounts usually are)."""
    full = cli_env(env)
    account = cloudformation.client(full, "sts").get_caller_identity()["Account"]
    region = full.get("AWS_REGION") or full.get("AWS_DEFAULT_REGION") or "us-east-1"
    # No app: the work folder has no cdk.json, and an explicit environment needs no synthesis.
    args = ["bootstrap", f"aws://{account}/{region}", "--output", str(Path(workdir) / "bootstrap.out")]
    result = _run(args, full, Path(workdir), timeout_s, "cdk-bootstrap.log", on_line)
    if result.returncode != 0:
        raise TargetError(f"cdk bootstrap aws://{account}/{region} failed: {_last_error(result.stdout)}")


def deploy(stack_name: str, context: Mapping[str, str | None], env: Mapping[str, str] | None, workdir: Path, *,
           timeout_s: float = 3600, on_line: LineSink | None = None) -> dict[str, str]:
    """`cdk deploy` exactly `stack_name` of sagellm's app with `-c key=value` context; returns its outputs.

    The cloud assembly goes to `<workdir>/cdk.out` and the log to `<workdir>/cdk-deploy.log`. On failure
    raises TargetError naming the failed resource and its reason, after deleting a stack the failed create
    left behind."""
    full, workdir = cli_env(env), Path(workdir)
    # CDK's built-in CloudFormation validation (aws-cdk-lib 2.2xx) only warns unless
    # @aws-cdk/core:validateAgainstDefaultRules is set, and the warnings would land in a log nobody reads;
    # sagellm's own template is held to none by its tests (tests/constructs/test_template_scans.py) and to
    # cfn-lint. It costs ~2.4 s of CPU per deploy (its WASM engine). cdk-nag still runs. A user's own
    # CDK_VALIDATION wins.
    full.setdefault("CDK_VALIDATION", "false")
    outputs_file = workdir / "cdk-outputs.json"
    outputs_file.unlink(missing_ok=True)
    pairs = {"stack_name": stack_name, **context}
    args = [
        "deploy", stack_name, "--exclusively", "--app", app_command(), "--output", str(workdir / "cdk.out"),
        *[arg for key, value in pairs.items() if value is not None for arg in ("-c", f"{key}={value}")],
        "--method=direct", "--require-approval", "never", "--outputs-file", str(outputs_file),
    ]
    result = _run(args, full, workdir, timeout_s, "cdk-deploy.log", on_line)
    if result.returncode != 0:
        raise TargetError(_deploy_failure(stack_name, full, result.stdout))
    outputs: dict[str, dict[str, str]] = json.loads(outputs_file.read_text())
    return outputs.get(stack_name, {})


def _run(args: list[str], env: dict[str, str], workdir: Path, timeout_s: float, log_name: str,
         on_line: LineSink | None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in `workdir` and its own process group, its output streamed line by line to `log_name`
    there and to `on_line`; killed with everything it started on timeout or interrupt."""
    command = [*find_cli(), *args, "--no-notices", "--ci"]
    workdir.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    timed_out = threading.Event()
    with (workdir / log_name).open("w", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        started: list[subprocess.Popen[str]] = []

        def start() -> subprocess.Popen[str]:
            proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True)
            started.append(proc)
            return proc

        # Started from a thread of its own: a signal handler raises only in the main thread, so an interrupt that
        # lands while Popen returns (the CLI already running) cannot lose the CLI; the except below stops it.
        pool = ThreadPoolExecutor(1, thread_name_prefix="sagellm-cdk-start")
        timer: threading.Timer | None = None
        try:
            proc = pool.submit(start).result()
            pool.shutdown()

            def expire() -> None:
                timed_out.set()
                _kill(proc)

            timer = threading.Timer(timeout_s, expire)
            timer.daemon = True
            timer.start()
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                lines.append(line)
                if on_line is not None and line.strip():
                    on_line(line.rstrip("\n"))
            proc.wait()
        except BaseException:  # Ctrl-C / SIGTERM in the bench: stop the CLI too, then let the bench tear down
            pool.shutdown()  # a CLI still starting in the thread has started once this returns
            for cli in started:
                _kill(cli)
            raise
        finally:
            if timer is not None:
                timer.cancel()
    if timed_out.is_set():
        raise TargetError(f"cdk {args[0]} did not finish within {timeout_s:.0f} s and was stopped; "
                          "what it created so far is still there")
    return subprocess.CompletedProcess(command, proc.returncode, "".join(lines))


def _kill(proc: subprocess.Popen[str]) -> None:
    """Stop the CLI's whole process group: SIGTERM, SIGKILL what still runs after the grace, and return only
    once none of it runs. The leader exiting is not enough: its node children can outlive it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + _KILL_GRACE_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_KILL_GRACE_S)
    while _group_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_running(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + _KILL_GRACE_S
        while _group_running(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    proc.wait()


def _group_running(pgid: int) -> bool:
    """Whether a process of the group still runs; a zombie (exited, its parent not told yet) does not."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    proc_root = Path("/proc")
    if not proc_root.is_dir():  # no procfs (macOS): the group answering a signal is all there is to know
        return True
    for stat in proc_root.glob("[0-9]*/stat"):
        try:  # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if group == str(pgid) and state != "Z":
            return True
    return False


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
    cfn = cloudformation.client(env)
    stack = cloudformation.describe(cfn, stack_name)
    if stack is None:  # synth, credentials or bootstrap failed before CloudFormation ran
        return f"cdk deploy {stack_name} failed before CloudFormation created anything: {_last_error(output)}"
    events = _events_of_last_attempt(cfn, stack["StackId"])
    failed = next((e for e in events if e["ResourceStatus"].endswith("_FAILED")
                   and "cancelled" not in e.get("ResourceStatusReason", "")), None)
    if failed:
        reason = " ".join(failed.get("ResourceStatusReason", "").split())
        if len(reason) > _MAX_REASON_CHARS:
            reason = reason[:_MAX_REASON_CHARS] + "…"
        cause = f"{failed['LogicalResourceId']} ({failed['ResourceType']}) {failed['ResourceStatus']}: {reason}"
    else:
        cause = f"stack {stack['StackStatus']}: {stack.get('StackStatusReason') or _last_error(output)}"
    status = stack["StackStatus"]
    if status in _DELETABLE_AFTER_FAILURE:
        left = cloudformation.remaining_resources(cfn, stack["StackId"])
        try:
            cloudformation.delete_stack(cfn, stack, wait_s=1800)
            after = ("rolled back and deleted the stack; nothing left" if not left
                     else f"deleted the stack and what the rollback left ({', '.join(left)})")
        except TargetError as error:
            after = f"{status}; {error}"
    else:  # an update rolled back to the previous, working stack: not ours to delete
        after = f"stack is {status}"
    return f"deploy of {stack_name} failed: {cause}; {after}"


def _events_of_last_attempt(cfn: Any, stack_id: str) -> list[dict[str, Any]]:
    """The stack's events since its last User Initiated create/update, oldest first."""
    events: list[dict[str, Any]] = []
    for page in cfn.get_paginator("describe_stack_events").paginate(StackName=stack_id):
        for event in page["StackEvents"]:  # newest first
            events.append(event)
            if (event["ResourceType"] == "AWS::CloudFormation::Stack"
                    and event.get("ResourceStatusReason") == "User Initiated"
                    and event["ResourceStatus"] in ("CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS")):
                return events[::-1]
    return events[::-1]
