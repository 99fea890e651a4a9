"""Child-process entry of `EmulatorProcess`: `python -m sagellm.emulator --plan plan.json …`.

Prints `SAGELLM_EMULATOR_URL=<url>` on stdout once it listens; serves until SIGTERM/SIGINT or until the
parent process is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from sagellm.clock import Clock
from sagellm.emulator.frontend.server import Emulator, serve_forever
from sagellm.emulator.process import _READY_PREFIX
from sagellm.errors import SagellmError
from sagellm.profiles.plan import DeploymentPlan


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, load the plan, serve."""
    parser = argparse.ArgumentParser(prog="python -m sagellm.emulator")
    parser.add_argument("--plan", required=True, type=Path, help="DeploymentPlan JSON file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--endpoint-name")
    parser.add_argument("--component-names", type=json.loads, help="JSON: plan model name → component name")
    parser.add_argument("--instance-startup-s", type=float, help="autoscaling: scale-out → InService, simulated s")
    parser.add_argument("--cloudwatch-url", help="publish SageMaker's endpoint metrics to this CloudWatch")
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--work-dir", type=Path, help="removed on exit if the parent died (it cannot)")
    args = parser.parse_args(argv)
    plan = DeploymentPlan.model_validate_json(args.plan.read_text(encoding="utf-8"))
    emulator = Emulator(plan, clock=Clock(args.time_scale), endpoint_name=args.endpoint_name,
                        component_names=args.component_names, instance_startup_s=args.instance_startup_s,
                        cloudwatch_url=args.cloudwatch_url)

    def ready(url: str) -> None:
        print(f"{_READY_PREFIX}{url}", flush=True)

    asyncio.run(serve_forever(emulator, args.host, args.port, ready, parent_pid=args.parent_pid))
    if args.work_dir is not None and args.parent_pid is not None and os.getppid() != args.parent_pid:
        shutil.rmtree(args.work_dir, ignore_errors=True)  # orphaned: nobody else will clean up


if __name__ == "__main__":
    try:
        main()
    except SagellmError as exc:  # one line for EmulatorProcess to show, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(int(exc.exit_status))
