"""`recommend --verify 2 --target sagemaker` against a local account: `sagellm local-aws` as the control plane,
`sagellm emulate`'s engine as the SageMaker runtime (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME), dummy credentials.

The runtime is deliberately slower than the planner predicts for the candidates: it emulates an L4
(ml.g6.2xlarge) while the candidates are A10G instances, so the correction the verify stores is visible."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from bench_helpers import AS_FROM_A_TERMINAL, MODEL, SAGELLM, local_aws_server, sagellm, wait_for
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess
from sagellm.engines.tgi import TGI
from sagellm.planner import Payload
from sagellm.profiles import resolve
from sagellm.profiles.calibration import calibration_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
TOKEN_SECRET = "prod/huggingface/token"  # Llama 2 is gated; moto does not resolve the secret's reference
SLOWER = "ml.g6.2xlarge"  # what the runtime really runs: an L4, about half an A10G's memory bandwidth
CANDIDATES = ("ml.g5.2xlarge", "ml.g5.4xlarge")
ITL = "itl_ms.p50@2 <= 400"


@pytest.fixture(scope="module")
def account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The local account's environment for child processes, its runtime an emulator slower than predicted."""
    folder = tmp_path_factory.mktemp("account")
    emulator = EmulatorProcess(resolve("max-throughput", MODEL, SLOWER, payload=Payload(256, 32)), clock=Clock(0.1))
    with local_aws_server(folder) as (_, env):
        emulator.start()
        try:
            yield env | {"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": emulator.url}
        finally:
            emulator.stop()


def stacks(env: dict[str, str]) -> set[str]:
    cfn = boto3.client("cloudformation", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    return {s["StackName"] for s in cfn.describe_stacks()["Stacks"] if s["StackStatus"] != "DELETE_COMPLETE"}


def recommend_args(cwd: Path, out: str, *extra: str) -> list[str]:
    (cwd / "slo.yaml").write_text("rules:\n  - {metric: itl_ms.p50, max: 400}\n")
    return ["recommend", "--model", "llama2-7b", "--concurrency", "2", "--output-tokens", "32", "--thresholds",
            "slo.yaml", "--instances", ",".join(CANDIDATES), "--engines", "tgi", "--profiles-dir", "team", "--out",
            out, *extra]


def recommend(env: dict[str, str], cwd: Path, out: str, *extra: str) -> dict[str, Any]:
    ran = sagellm(*recommend_args(cwd, out, *extra), env=env, cwd=cwd, timeout=1000)
    assert ran.returncode == 0, ran.stderr[-3000:]
    data: dict[str, Any] = json.loads((cwd / out / "recommendation.json").read_text())
    data["stderr"] = ran.stderr
    return data


def test_verify_2_on_sagemaker_deploys_and_deletes_two_stacks_and_stores_the_correction(
        account: dict[str, str], tmp_path: Path) -> None:
    before = stacks(account)

    data = recommend(account, tmp_path, "rec", "--verify", "2", "--target", "sagemaker",
                     "--hf-token-secret", TOKEN_SECRET)

    assert stacks(account) == before
    verify = data["verify"]
    assert verify["target"] == "sagemaker" and not verify["interrupted"]
    deleted = set()
    for i in (1, 2):
        results = json.loads((tmp_path / "rec" / "verify" / f"run-{i}" / "results.json").read_text())
        assert results["run"]["target"] == "sagemaker" and results["run"]["concurrency"] == [2, 3]
        assert results["teardown"]["status"] == "destroyed" and not results["teardown"]["leftovers"]
        deleted.add(results["teardown"]["detail"])
    assert len(deleted) == 2
    assert "verify on sagemaker (us-east-1): 2 deployment(s) in your account" in data["stderr"]
    # Re-ranked on the measurement; each candidate's measured ÷ predicted recorded, slower than predicted.
    measured = {v["deployment"]: v for v in verify["candidates"]}
    assert data["pick"]["deployment"] in measured
    for v in measured.values():
        assert v["measured_over_predicted"][ITL] > 1.2
    # The correction, one file per instance type, where calibrate writes it, and said.
    paths = [calibration_path(tmp_path / "team", MODEL, inst, "tgi", TGI.pinned) for inst in CANDIDATES]
    assert [line.split(":")[0] for line in verify["correction"]] == [f"wrote {p.relative_to(tmp_path)}"
                                                                     for p in paths]
    for path in paths:
        stored = yaml.safe_load(path.read_text())
        assert stored["decode_floor"] > 1 and [r["target"] for r in stored["runs"]] == ["sagemaker"]
    assert "Correction: wrote team/calibration/" in (tmp_path / "rec" / "frontier.md").read_text()

    # The next recommend reads it: its prediction moves toward what was measured.
    again = recommend(account, tmp_path, "again")
    first = {c["deployment"]: c["slo"][ITL] for c in data["candidates"]}
    second = {c["deployment"]: c["slo"][ITL] for c in again["candidates"]}
    for deployment, v in measured.items():
        truth = v["measured"][ITL]
        assert abs(second[deployment] - truth) < abs(first[deployment] - truth) / 2
    assert any("predicted with the measured correction stored in team/calibration" in n for n in again["notes"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_first_bench_tears_its_stack_down_and_starts_no_other(
        account: dict[str, str], tmp_path: Path, signum: int) -> None:
    before = stacks(account)
    args = recommend_args(tmp_path, "rec", "--verify", "2", "--target", "sagemaker", "--hf-token-secret",
                          TOKEN_SECRET)
    with (tmp_path / "stderr.log").open("w") as err:
        proc = subprocess.Popen([*AS_FROM_A_TERMINAL, SAGELLM, *args], cwd=tmp_path, env=account,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            wait_for(lambda: bool(stacks(account) - before) or proc.poll() is not None, 600, "the first stack",
                     poll_s=0.2)
            assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]
            proc.send_signal(signum)
            returncode = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr = (tmp_path / "stderr.log").read_text()

    assert returncode == 130, stderr[-3000:]
    assert stacks(account) == before  # the one in flight torn down
    assert not (tmp_path / "rec" / "verify" / "run-2").exists()  # and no other started
    assert "no other candidate benched" in stderr and "Traceback" not in stderr
    data = json.loads((tmp_path / "rec" / "recommendation.json").read_text())
    assert data["verify"]["interrupted"] is True and data["verify"]["correction"] == []
    assert data["pick"]["deployment"] == "1 × ml.g5.2xlarge TP1 tgi"  # the prediction stands, unverified
    assert not (tmp_path / "team").exists()
