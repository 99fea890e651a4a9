"""vLLM on Inferentia2 (Hugging Face's vllm-neuronx image): its image, what its entrypoint and serve command read,
every NeuronCore used, the compiled shape from the plan, and the Inferentia default staying TGI."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest
from entrypoints import STANDARD, vllm_neuronx_argv

from sagellm.catalog import instances
from sagellm.engines import ENGINES, NEURON_ENGINES, engine_for, kinds_on
from sagellm.engines.vllm_neuronx import STARTUP_TIMEOUT_S, VLLM_NEURONX
from sagellm.errors import InputError
from sagellm.profiles import design_for, resolve

# `optimum-cli neuron serve`'s own options (huggingface/optimum-neuron v0.4.4, commit f4bc3c5c,
# optimum/commands/neuron/serve.py `ServeCommand.parse_args`): each takes a value but the store_true one.
SERVE_OPTIONS = {"--model": True, "-m": True, "--served_model_name": True, "--served-model-name": True,
                 "--tensor_parallel_size": True, "--tensor-parallel-size": True,
                 "--batch_size": True, "--batch-size": True, "--sequence_length": True, "--sequence-length": True,
                 "--port": True, "--allow_non_cached_model": False, "--allow-non-cached-model": False}
MODEL = "meta-llama/Llama-3.1-8B"


def parsed(argv: list[str]) -> dict[str, str | bool]:
    """The serve command's options from an argv, refusing any it does not have (none reach vLLM unparsed)."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        assert flag in SERVE_OPTIONS, f"{flag}: not an option of optimum-cli neuron serve"
        takes = SERVE_OPTIONS[flag]
        out[flag.replace("-", "_").lstrip("_")] = argv[i + 1] if takes else True
        i += 2 if takes else 1
    return out


def test_image_is_the_sdks_vllm_neuronx_tag_with_its_neuron_sdk() -> None:
    # sagemaker-core 2.27.0 image_uris.retrieve("huggingface-vllm-neuronx", version="0.4.4") appends the entry's
    # newest sdk_versions for this repository: the tag optimum-neuron's docs/source/containers.mdx lists.
    assert VLLM_NEURONX.image_uri(VLLM_NEURONX.pinned, "us-east-1") == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-vllm-inference-neuronx:"
        "0.11.0-optimum0.4.4-neuronx-py310-sdk2.26.1-ubuntu22.04")
    with pytest.raises(InputError, match="no huggingface-vllm-neuronx 0.4.4 image there"):
        VLLM_NEURONX.image_uri(VLLM_NEURONX.pinned, "eu-north-1")  # 11 regions in the table


@pytest.mark.integration
def test_image_uri_is_what_the_sagemaker_sdk_returns() -> None:
    image_uris = pytest.importorskip("sagemaker.core.image_uris")
    for version in ("0.4.2", "0.4.4"):
        for region in ("us-east-1", "eu-west-3"):
            want = image_uris.retrieve("huggingface-vllm-neuronx", region=region, version=version,
                                       image_scope="inference", inference_tool="neuronx")
            assert VLLM_NEURONX.image_uri(version, region) == want


def test_it_runs_on_inferentia_only_and_tgi_stays_the_inferentia_default() -> None:
    assert ENGINES["vllm-neuronx"] is NEURON_ENGINES["vllm-neuronx"] is VLLM_NEURONX
    assert engine_for("tgi", neuron=True).label == "TGI (Neuron)"  # a plain profile on inf2 keeps TGI
    assert kinds_on(tuple(ENGINES), neuron=False) == ("tgi", "lmi", "vllm", "sglang")
    assert kinds_on(tuple(ENGINES), neuron=True) == ("tgi", "vllm-neuronx")
    with pytest.raises(InputError, match="no 'vllm-neuronx' engine on GPUs"):
        engine_for("vllm-neuronx")


def test_an_architecture_optimum_neuron_does_not_serve_is_refused_and_one_tgi_lacks_is_planned() -> None:
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", "mistralai/Mistral-7B-Instruct-v0.3", "ml.inf2.xlarge", engine="vllm-neuronx")
    assert exc.value.messages == [(
        "instance: mistralai/Mistral-7B-Instruct-v0.3 is a MistralForCausalLM, which optimum-neuron 0.4.4 does not "
        "serve on Inferentia (it serves Granite, Llama, Llama4, Mixtral, Phi3, Qwen2, Qwen3, Qwen3Moe, SmolLM3); use "
        "a GPU instance type and another engine")]
    # Qwen3 has no compiled model in TGI's neuron cache (refused there), and vllm-neuronx compiles it.
    with pytest.raises(InputError, match="has no compiled model in the neuron cache"):
        resolve("max-throughput", "Qwen/Qwen3-8B", "ml.inf2.xlarge")
    plan = resolve("max-throughput", "Qwen/Qwen3-8B", "ml.inf2.xlarge", engine="vllm-neuronx")
    assert plan.models[0].environment["SM_ON_MODEL"] == "Qwen/Qwen3-8B"


def test_a_gpu_instance_is_refused_in_one_line() -> None:
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", MODEL, "ml.g5.12xlarge", engine="vllm-neuronx")
    # Named by the option that asked for it, as every value given on the command line is.
    assert exc.value.messages == [("engine: vllm-neuronx runs on Inferentia only, not on ml.g5.12xlarge; use an "
                                   "ml.inf2 instance type or another engine")]


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory):
    """Every standard profile with vllm-neuronx on every ml.inf2 type, for a catalog model."""
    profiles_dir: Path = tmp_path_factory.mktemp("no-team-profiles")
    return {(profile, name): design_for(profile, MODEL, name, profiles_dir=profiles_dir, engine="vllm-neuronx")
            for profile in STANDARD for name, i in instances().items() if i.is_neuron}


def test_every_standard_plan_starts_the_serve_command_with_every_neuroncore(plans) -> None:
    assert len(plans) == len(STANDARD) * 4
    for (profile, name), design in plans.items():
        plan = design.plan()
        assert plan.container == "vllm-neuronx" and plan.inference_ami_version == "al2-ami-sagemaker-inference-neuron-2"
        assert plan.startup_health_check_timeout_s == STARTUP_TIMEOUT_S
        cores = 2 * instances()[name].n_accelerators
        used = 0
        for m in plan.models:
            args = parsed(vllm_neuronx_argv(m.environment))
            assert args["port"] == "8080" and args["model"] == MODEL and args["allow_non_cached_model"] is True
            batch, length = int(args["batch_size"]), int(args["sequence_length"])
            assert (batch, length) in {(b, n) for b in (1, 4, 8, 16, 32) for n in (2048, 4096)}, (profile, name)
            assert int(args["tensor_parallel_size"]) == 2 * m.tensor_parallel
            used += 2 * m.tensor_parallel * m.copy_count
        assert used == cores, (profile, name, used)
        (note,) = design.notes
        assert note.startswith(f"NeuronCores: {cores} of the {cores} of {name} used (") and note.endswith(
            "the image compiles the plan's batch and sequence length for them at start-up unless the neuron cache "
            "holds that shape")
    assert parsed(vllm_neuronx_argv(plans[("min-latency", "ml.inf2.24xlarge")].plan().models[0].environment))[
        "batch_size"] == "1"  # one sequence at a time, as the profile pins


def test_the_plans_batch_is_what_memory_holds_whole_sequences_of(plans) -> None:
    design = plans[("max-throughput", "ml.inf2.xlarge")]
    copy = design.copies[0]
    # 16 slots of 4096 tokens beside 16 GB of bf16 weights on one chip's 32 GB (32 would not fit).
    assert (copy.max_batch_size, copy.max_total_tokens) == (16, 4096)
    assert design.shape().max_batch_total_tokens == 16 * 4096


def test_limits_are_the_compiled_batch_and_the_server_queues() -> None:
    env = {"SM_ON_BATCH_SIZE": "8", "SM_ON_SEQUENCE_LENGTH": "4096"}
    limits = VLLM_NEURONX.limits(None, env, kv_tokens=10**6, context=131072)
    assert (limits.max_batch_size, limits.max_total_tokens, limits.max_batch_total_tokens) == (8, 4096, 8 * 4096)
    assert limits.max_concurrent_requests is None and VLLM_NEURONX.queues
    assert not VLLM_NEURONX.chunks_prefill(None, 8)


def test_a_profile_variable_outside_its_prefix_is_refused() -> None:
    errors = VLLM_NEURONX.environment_errors("0.4.4", {"MAX_BATCH_SIZE": "4", "SM_ON_SERVED_MODEL_NAME": "x"},
                                             lambda n: n)
    assert len(errors) == 1 and errors[0].startswith("MAX_BATCH_SIZE: the vLLM (Neuron) 0.4.4 image does not read it")


# optimum-neuron's serve command from PyPI, installed once into a cache folder beside the vLLM CPU build, with the
# versions its 0.4.4 wheel asks for (transformers~=4.57.1, optimum~=2.0.0) where the vLLM venv has newer ones; it
# runs on the vLLM venv's torch and vLLM. Its code is not kept in this repository.
OPTIMUM_NEURON = ("optimum-neuron==0.4.4", "optimum==2.0.0", "transformers==4.57.1", "tokenizers==0.22.1",
                  "huggingface_hub==0.36.0")
ON_CACHE = Path(os.environ.get("SAGELLM_VLLM_CACHE", Path.home() / ".cache" / "sagellm")) / "optimum-neuron-0.4.4"
# Each argv through the serve command's own parser (ServeCommand.parse_args on a plain argparse parser: an option
# it lacks is an error, as `optimum-cli` makes it for vLLM's parser after it).
PARSE = """
import argparse, contextlib, io, json, sys
from optimum.commands.neuron.serve import ServeCommand
out = []
for argv in json.load(sys.stdin):
    parser = argparse.ArgumentParser()
    ServeCommand.parse_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
    except SystemExit:
        out.append({"error": err.getvalue().strip().splitlines()[-1]})
        continue
    out.append(vars(ns))
print("RESULT " + json.dumps(out))
"""


def optimum_neuron_path(python: Path) -> Path:
    """The cache folder holding optimum-neuron 0.4.4 and the versions it asks for (installed on first use)."""
    marker = ON_CACHE / ".sagellm-installed"
    with (ON_CACHE.parent / f"{ON_CACHE.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            subprocess.run(["rm", "-rf", str(ON_CACHE)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(ON_CACHE),
                            *OPTIMUM_NEURON], check=True, timeout=900)
            marker.write_text(" ".join(OPTIMUM_NEURON) + "\n")
    return ON_CACHE


@pytest.mark.integration
@pytest.mark.timeout(1800, func_only=True)
def test_every_standard_inf2_plan_becomes_options_the_serve_commands_own_parser_takes(plans) -> None:
    from vllm_server import vllm_python

    python = vllm_python()
    envs = [m.environment for design in plans.values() for m in design.plan().models]
    misspelt_env = {"SM_ON_MODEL": MODEL, "SM_ON_BATCH_SIZEZ": "8"}
    argvs = [vllm_neuronx_argv(env) for env in envs] + [vllm_neuronx_argv(misspelt_env)]
    done = subprocess.run([str(python), "-c", PARSE], input=json.dumps(argvs), capture_output=True, text=True,
                          timeout=900, check=False, env={**os.environ, "PYTHONPATH": str(optimum_neuron_path(python))})
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    *parsed_all, misspelt = json.loads(line.removeprefix("RESULT "))
    assert "unrecognized arguments: --batch_sizez 8" in misspelt["error"]
    for env, ns in zip(envs, parsed_all, strict=True):
        assert ns == {"model": MODEL, "served_model_name": None, "port": 8080,
                      "tensor_parallel_size": int(env["SM_ON_TENSOR_PARALLEL_SIZE"]),
                      "batch_size": int(env["SM_ON_BATCH_SIZE"]), "sequence_length": int(env["SM_ON_SEQUENCE_LENGTH"]),
                      "allow_non_cached_model": True}, env
