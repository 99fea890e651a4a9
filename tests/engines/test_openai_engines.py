"""vLLM and SGLang (AWS's SageMaker images): the environment a plan sets, the flags each image's entrypoint makes
of it, checked against each server's own argument parser (vLLM's, in the CPU build) or flag list (SGLang's)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from entrypoints import STANDARD, sglang_argv, standard_plans, vllm_argv

from sagellm.cdk_context import read_context
from sagellm.engines import ENGINES, GENERATIONS, Settings
from sagellm.engines.openai_server import OpenAiServer
from sagellm.engines.sglang import SGLANG
from sagellm.engines.vllm import VLLM
from sagellm.errors import InputError
from sagellm.profiles import resolve

SETTINGS = Settings(model_id="meta-llama/Llama-2-7b-hf", version="0.30.0", tensor_parallel=2, quantization="awq",
                    max_input_tokens=3072, max_total_tokens=4096, max_batch_prefill_tokens=4096,
                    max_concurrent_requests=64, max_batch_size=None)
SGLANG_DATA = json.loads((Path(__file__).parent / "data" / "sglang-0.5.20-flags.json").read_text())
SGLANG_FLAGS = SGLANG_DATA["flags"]


def test_vllm_environment_is_one_sm_vllm_variable_per_flag() -> None:
    assert VLLM.environment(SETTINGS) == {
        "SM_VLLM_MODEL": "meta-llama/Llama-2-7b-hf", "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_MAX_MODEL_LEN": "4096", "SM_VLLM_MAX_NUM_SEQS": "64", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096",
        "SM_VLLM_QUANTIZATION": "awq"}
    # A batch-size limit is the running limit; the step budget never falls below it (vLLM refuses to start).
    env = VLLM.environment(replace(SETTINGS, max_batch_size=8, max_batch_prefill_tokens=4, quantization="none"))
    assert (env["SM_VLLM_MAX_NUM_SEQS"], env["SM_VLLM_MAX_NUM_BATCHED_TOKENS"]) == ("8", "8")
    assert "SM_VLLM_QUANTIZATION" not in env


def test_sglang_environment_is_one_sm_sglang_variable_per_flag_and_asks_for_metrics() -> None:
    assert SGLANG.environment(SETTINGS) == {
        "SM_SGLANG_MODEL_PATH": "meta-llama/Llama-2-7b-hf", "SM_SGLANG_TP_SIZE": "2",
        "SM_SGLANG_CONTEXT_LENGTH": "4096", "SM_SGLANG_MAX_RUNNING_REQUESTS": "64",
        "SM_SGLANG_CHUNKED_PREFILL_SIZE": "4096", "SM_SGLANG_QUANTIZATION": "awq", "SM_SGLANG_ENABLE_METRICS": "true"}


@pytest.mark.parametrize("engine", [VLLM, SGLANG], ids=["vllm", "sglang"])
def test_they_queue_rather_than_refuse_and_run_at_most_their_running_limit(engine: OpenAiServer) -> None:
    env = engine.environment(SETTINGS)
    limits = engine.limits(engine.pinned, env, kv_tokens=10_000, context=8192)
    assert engine.queues and limits.max_concurrent_requests is None
    assert (limits.max_total_tokens, limits.max_input_tokens, limits.max_batch_size,
            limits.max_batch_prefill_tokens) == (4096, 4095, 64, 4096)
    assert engine.limits(engine.pinned, {}, 10_000, 8192).max_total_tokens == 8192  # unset: the model's context
    assert engine.chunks_prefill(engine.pinned, 1)


def test_the_engines_are_registered_with_their_own_generations_and_wire() -> None:
    assert ENGINES["vllm"] is VLLM and ENGINES["sglang"] is SGLANG
    for engine in (VLLM, SGLANG):
        generation = GENERATIONS[engine.generation(None).name]
        # One set for both (planner.constants.VLLM_1, registered as vLLM's): the study found no engine difference.
        assert generation.constants_from == "vllm" and generation.calibrated == (engine is VLLM)
    assert (VLLM.invocations, VLLM.sagemaker_api) == (("chat", "completions"), "openai")
    assert (SGLANG.invocations, SGLANG.sagemaker_api) == (("chat",), "chat")
    assert VLLM.histograms["ttft_ms"] == ("vllm:time_to_first_token_seconds",)
    assert SGLANG.counters["generation_tokens"] == ("sglang:generation_tokens_total",)


def test_a_plan_pins_the_newest_aws_image_with_the_cuda_13_ami(tmp_path: Path) -> None:
    plans = {kind: standard_plans(kind, tmp_path)["max-throughput"] for kind in ("vllm", "sglang")}
    assert plans["vllm"].primary.image_uri == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker")
    assert plans["sglang"].primary.image_uri == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/sglang:0.5.20-gpu-py312-cu130-ubuntu24.04-sagemaker")
    assert {p.inference_ami_version for p in plans.values()} == {"al2023-ami-sagemaker-inference-gpu-4-1"}
    assert {p.container_version for p in plans.values()} == {"0.30.0", "0.5.20"}


def test_the_standard_profiles_stay_tgi_bundles() -> None:
    plan = resolve("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.12xlarge")
    assert plan.container == "tgi" and "MAX_CONCURRENT_REQUESTS" in plan.environment


def test_a_profile_variable_the_image_does_not_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="MAX_BATCH_SIZE: the vLLM 0.30.0 image does not read it"):
        standard_plans("vllm", tmp_path, "serving: {environment: {MAX_BATCH_SIZE: '4'}}\n")
    with pytest.raises(InputError, match="HF_MODEL_ID.*the plan sets the server's model id"):
        standard_plans("vllm", tmp_path, "serving: {environment: {HF_MODEL_ID: other/model}}\n")
    plans = standard_plans("sglang", tmp_path, "serving: {environment: {SM_SGLANG_DISABLE_RADIX_CACHE: 'true'}}\n")
    assert "--disable-radix-cache" in sglang_argv(plans["min-latency"].environment)


def test_every_standard_sglang_plan_becomes_flags_sglang_0_5_20_has(tmp_path: Path) -> None:
    plans = standard_plans("sglang", tmp_path, "serving: {quantization: awq}\n")
    assert set(plans) == set(STANDARD)
    for name, plan in plans.items():
        for env in (m.environment for m in plan.models):
            argv = sglang_argv(env)
            given: dict[str, str | None] = {}
            for i, token in enumerate(argv):
                if not token.startswith("--"):
                    continue
                assert token in SGLANG_FLAGS, (name, token)
                value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
                assert (value is not None) == (SGLANG_FLAGS[token] == "value"), (name, token)
                given[token] = value
            assert given["--model-path"] == "meta-llama/Llama-2-7b-hf" and given["--port"] == "8080"
            assert given["--context-length"] == env["SM_SGLANG_CONTEXT_LENGTH"]
            assert "--enable-metrics" in argv and given["--quantization"] == "awq"


def test_sglangs_quantizations_are_the_choices_of_its_quantization_flag() -> None:
    assert SGLANG.quantizations == set(SGLANG_DATA["choices"]["--quantization"])
    assert {"gptq", "awq", "fp8", "bitsandbytes"} <= SGLANG.quantizations and "eetq" not in SGLANG.quantizations


def test_the_sglang_check_refuses_a_flag_sglang_lacks() -> None:
    argv = sglang_argv({"SM_SGLANG_MAX_NUM_SEQS": "8"})  # vLLM's name, not SGLang's
    assert argv[:2] == ["--max-num-seqs", "8"] and "--max-num-seqs" not in SGLANG_FLAGS


# vLLM's own parser, in the CPU build the suite installs (vllm 0.32.0: the image runs 0.30.0, whose flags these are
# too). Each argv is parsed; a refused one reports argparse's message instead of values.
PARSE = """
import contextlib, io, json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
    except SystemExit:
        out.append({"error": err.getvalue().strip().splitlines()[-1]})
        continue
    out.append({k: getattr(ns, k) for k in ("model", "port", "tensor_parallel_size", "max_model_len", "max_num_seqs",
                                            "max_num_batched_tokens", "quantization", "enable_prefix_caching",
                                            "middleware")})
print("RESULT " + json.dumps(out))
"""


@pytest.mark.integration
@pytest.mark.timeout(1800, func_only=True)
def test_every_standard_vllm_plan_becomes_flags_vllms_own_parser_takes(tmp_path: Path) -> None:
    from vllm_server import vllm_python

    plans = standard_plans("vllm", tmp_path, "serving: {quantization: awq, environment: "
                                             "{SM_VLLM_ENABLE_PREFIX_CACHING: 'true'}}\n")
    envs = [m.environment for plan in plans.values() for m in plan.models]
    argvs = [vllm_argv(env) for env in envs] + [vllm_argv({"SM_VLLM_MAX_NUM_SEQZ": "8"})]  # a misspelt name
    done = subprocess.run([str(vllm_python()), "-c", PARSE], input=json.dumps(argvs), capture_output=True,
                          text=True, timeout=900, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    *parsed, misspelt = json.loads(line.removeprefix("RESULT "))
    assert "unrecognized arguments: --max-num-seqz" in misspelt["error"]
    for env, ns in zip(envs, parsed, strict=True):
        assert "error" not in ns, (env, ns)
        assert ns == {"model": "meta-llama/Llama-2-7b-hf", "port": 8080,
                      "tensor_parallel_size": int(env["SM_VLLM_TENSOR_PARALLEL_SIZE"]),
                      "max_model_len": int(env["SM_VLLM_MAX_MODEL_LEN"]),
                      "max_num_seqs": int(env["SM_VLLM_MAX_NUM_SEQS"]),
                      "max_num_batched_tokens": int(env["SM_VLLM_MAX_NUM_BATCHED_TOKENS"]),
                      "quantization": "awq", "enable_prefix_caching": True,
                      "middleware": ["sagemaker_serve.SageMakerRouteMiddleware"]}


@pytest.mark.integration
@pytest.mark.timeout(1800, func_only=True)
def test_vllms_quantizations_are_the_list_vllm_checks_its_flag_against() -> None:
    from vllm_server import vllm_python

    script = ("import json; from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS as q; "
              "print('RESULT ' + json.dumps(q))")
    done = subprocess.run([str(vllm_python()), "-c", script], capture_output=True, text=True, timeout=900, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    assert VLLM.quantizations == set(json.loads(line.removeprefix("RESULT ")))


def test_cdk_context_engine_resolves_a_standard_profile_for_that_engine() -> None:
    context = {"profile": "max-throughput", "model": "meta-llama/Llama-2-7b-hf", "engine": "sglang"}
    ctx = read_context(context.get, context)
    assert ctx.engine == "sglang"
    plan = resolve(ctx.profile, ctx.model, "ml.g5.12xlarge", engine=ctx.engine)
    assert (plan.container, plan.container_version) == ("sglang", "0.5.20")
    assert plan.environment["SM_SGLANG_MODEL_PATH"] == "meta-llama/Llama-2-7b-hf"
    with pytest.raises(InputError, match=r"unknown engine 'trt' \(known: tgi, lmi, vllm, sglang, vllm-neuronx\)"):
        resolve("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.12xlarge", engine="trt")


@pytest.mark.integration  # the SDK takes ~1 s per lookup
@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_image_uri_is_what_the_sagemaker_sdk_returns(kind: str) -> None:
    image_uris = pytest.importorskip("sagemaker.core.image_uris")

    engine = ENGINES[kind]
    for region in ("us-east-1", "eu-west-1", "ap-northeast-1"):
        want = image_uris.retrieve(engine.framework, region=region, version=engine.pinned, image_scope="inference")
        assert engine.image_uri(engine.pinned, region) == want, region


def test_a_region_without_the_pinned_image_is_told_the_version_it_has() -> None:
    from sagellm.engines.sglang import SGLANG

    # GovCloud and China get images after the commercial regions (the SDK's tables, sagemaker-core 2.27.0).
    with pytest.raises(InputError) as sglang:
        SGLANG.image_uri(SGLANG.pinned, "us-gov-west-1")
    assert sglang.value.messages == [
        ("region: 'us-gov-west-1': no sglang 0.5.20 image there; the newest there is 0.5.19: pin it in the profile "
        "(container.version: 0.5.19) or deploy to a region that has it, such as us-east-1")]
    assert SGLANG.image_uri("0.5.19", "us-gov-west-1").startswith("442386744353.dkr.ecr.us-gov-west-1.amazonaws.com/")
    # vLLM's newest image in China is older than the versions sagellm models: said, not offered as the fix.
    with pytest.raises(InputError) as vllm:
        ENGINES["vllm"].image_uri(ENGINES["vllm"].pinned, "cn-north-1")
    assert vllm.value.messages == [
        ("region: 'cn-north-1': no vllm 0.30.0 image there, and its newest there, 0.28.0, is older than the 0.30.0 "
        "sagellm models; use another engine there or deploy to a region that has it, such as us-east-1")]
    assert ENGINES["vllm"].version_errors("0.28.0", "container.version")
