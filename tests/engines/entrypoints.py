"""The vLLM and SGLang SageMaker images' translation of a container environment into server flags, written here
after each entrypoint's rule (their code is not copied), and the standard profiles' environments for an engine.

- vLLM (aws/deep-learning-containers e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0, scripts/docker/vllm/
  sagemaker_args.py `build_args`, then sagemaker_entrypoint.sh): `--port 8080`; `--model` from HF_MODEL_ID
  when SM_VLLM_MODEL is unset (and /opt/ml/model is empty, as without model data); then every SM_VLLM_* variable
  in name order: the name after the prefix, lower case, `_` → `-`; the value `true` gives the bare flag, `false`
  nothing, an empty value the bare flag, a JSON array one token per element, anything else one token; then
  `--middleware sagemaker_serve.SageMakerRouteMiddleware` (the amzn2023 image ships sagemaker_serve.py).
- SGLang (same commit, scripts/docker/sglang/sagemaker_entrypoint.sh): every SM_SGLANG_* variable in the
  environment's order with the same naming and true/false/empty rule (no JSON handling), then `--port 8080`,
  `--host 0.0.0.0` and `--model-path /opt/ml/model` where those flags are not given.
- vLLM on Inferentia (huggingface/optimum-neuron v0.4.4, commit f4bc3c5c, docker/vllm/Dockerfile's `entrypoint.sh`):
  `--port 8080`, then every SM_ON_* variable in the environment's order: the name after the prefix in lower case,
  underscores kept, then the value unless it is empty; all of it goes to `optimum-cli neuron serve`.
"""

from __future__ import annotations

import json
from pathlib import Path

from sagellm.profiles import resolve
from sagellm.profiles.plan import DeploymentPlan

STANDARD = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale")
MODEL = "meta-llama/Llama-2-7b-hf"
INSTANCE = "ml.g5.12xlarge"


def _flag(prefix: str, key: str) -> str:
    return "--" + key[len(prefix):].lower().replace("_", "-")


def _tokens(prefix: str, key: str, value: str, *, json_arrays: bool) -> list[str]:
    lowered = value.strip().lower()
    if lowered == "false":
        return []
    if lowered == "true" or not value:
        return [_flag(prefix, key)]
    stripped = value.strip()
    if json_arrays and stripped.startswith("[") and stripped.endswith("]"):
        elements = json.loads(stripped)
        return [_flag(prefix, key), *(json.dumps(e) if isinstance(e, (dict, list)) else str(e) for e in elements)]
    return [_flag(prefix, key), value]


def vllm_argv(env: dict[str, str]) -> list[str]:
    """What AWS's vLLM image runs `vllm.entrypoints.openai.api_server` with, for `env`."""
    prefix = "SM_VLLM_"
    args = ["--port", "8080"]
    if not env.get(f"{prefix}MODEL") and env.get("HF_MODEL_ID"):
        args += ["--model", env["HF_MODEL_ID"]]
    for key in sorted(k for k in env if k.startswith(prefix)):
        args += _tokens(prefix, key, env[key], json_arrays=True)
    return [*args, "--middleware", "sagemaker_serve.SageMakerRouteMiddleware"]


def sglang_argv(env: dict[str, str]) -> list[str]:
    """What AWS's SGLang image runs `sglang.launch_server` with, for `env`."""
    prefix = "SM_SGLANG_"
    args: list[str] = []
    for key, value in env.items():
        if key.startswith(prefix):
            args += _tokens(prefix, key, value, json_arrays=False)
    for flag, default in (("--port", env.get(f"{prefix}PORT", "8080")), ("--host", env.get(f"{prefix}HOST", "0.0.0.0")),
                          ("--model-path", env.get(f"{prefix}MODEL_PATH", "/opt/ml/model"))):
        if flag not in args:
            args += [flag, default]
    return args


def vllm_neuronx_argv(env: dict[str, str]) -> list[str]:
    """What Hugging Face's vllm-neuronx image runs `optimum-cli neuron serve` with, for `env`."""
    prefix = "SM_ON_"
    args = ["--port", "8080"]
    for key, value in env.items():
        if key.startswith(prefix):
            args += ["--" + key[len(prefix):].lower(), *([value] if value else [])]
    return args


def standard_plans(kind: str, profiles_dir: Path, extra_yaml: str = "") -> dict[str, DeploymentPlan]:
    """Every standard profile resolved with `container.kind: kind` (profiles written into `profiles_dir`)."""
    plans = {}
    for name in STANDARD:
        (profiles_dir / f"{name}-{kind}.yaml").write_text(
            f"name: {name}-{kind}\nextends: {name}\ncontainer: {{kind: {kind}}}\n{extra_yaml}")
        plans[name] = resolve(f"{name}-{kind}", MODEL, INSTANCE, profiles_dir=profiles_dir)
    return plans
