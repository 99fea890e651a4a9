"""How much slower `cdk synth` of one profile is than `cdk synth` of a bare CDK app with one empty stack.

Both run through the pinned CDK CLI (`npx --no-install cdk synth`) from the repository root, with the same
cdk.json context and the same Node for jsii, alternating (profile, bare, profile, bare, …) so that load on a
shared machine falls on both alike; the medians and their ratio are printed. Target: ≤ 1.2×.

    .venv/bin/python benchmarks/synth_speed.py [--runs 7] [--profile max-throughput] [--model llama2-7b]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sagellm.aws.node import use_bundled_node

ROOT = Path(__file__).resolve().parents[1]
BARE_APP = "from aws_cdk import App, Stack\n\napp = App()\nStack(app, 'Empty')\napp.synth()\n"


def synth(args: list[str], scratch: Path, env: dict[str, str]) -> float:
    """Seconds one `cdk synth` takes, start to exit (raises if it fails)."""
    start = time.perf_counter()
    result = subprocess.run(["npx", "--no-install", "cdk", "synth", "--quiet", "--output", str(scratch), *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"cdk synth {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="synths of each app (alternating)")
    parser.add_argument("--profile", default="max-throughput")
    parser.add_argument("--model", default="meta-llama/Llama-2-7b-hf")
    parser.add_argument("--instance", default="ml.g5.2xlarge")
    opts = parser.parse_args()

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "CDK_DISABLE_CLI_TELEMETRY": "1"}
    use_bundled_node(env)  # both apps on the same Node: the comparison is about the app, not the runtime
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env["CDK_HOME"] = str(folder / "cdk-home")
        (folder / "bare_app.py").write_text(BARE_APP)
        profile_args = ["-c", f"profile={opts.profile}", "-c", f"model={opts.model}", "-c", f"instance={opts.instance}",
                        "-c", "hf_token_secret=prod/huggingface/token"]
        bare_args = ["--app", f"{sys.executable} {folder / 'bare_app.py'}"]
        synth(profile_args, folder / "warm", env)  # first runs fill OS caches; not counted
        synth(bare_args, folder / "warm", env)
        times: dict[str, list[float]] = {"profile": [], "bare": []}
        for i in range(opts.runs):
            times["profile"].append(synth(profile_args, folder / f"p{i}", env))
            times["bare"].append(synth(bare_args, folder / f"b{i}", env))
    profile, bare = statistics.median(times["profile"]), statistics.median(times["bare"])
    print(f"cdk synth, median of {opts.runs} alternating runs (shared machine: expect noise)")
    print(f"  profile {opts.profile} ({opts.model} on {opts.instance}): {profile:.2f} s  "
          f"{' '.join(f'{t:.2f}' for t in times['profile'])}")
    print(f"  bare app, one empty stack:              {bare:.2f} s  {' '.join(f'{t:.2f}' for t in times['bare'])}")
    print(f"  ratio: {profile / bare:.2f}× (target ≤ 1.20×)")


if __name__ == "__main__":
    main()
