"""`auto` values of the five standard profiles, checked against the planner (whose constants may be re-fitted)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from profile_helpers import LLAMA2_7B, LLAMA2_13B, LLAMA2_70B, shape_of

import sagellm
from sagellm.catalog import find_instance, find_model, instances
from sagellm.planner import Payload, Shape, max_concurrency_in_timeout, predict, predict_point
from sagellm.profiles import DeploymentPlan, resolve
from sagellm.profiles.resolve import design_for

INSTANCES = ("ml.g5.2xlarge", "ml.g5.12xlarge", "ml.p4d.24xlarge")
INSTANCE_PROFILES = ("min-latency", "max-throughput", "min-cost", "autoscale")
PAYLOAD = Payload(256, 256)
TGI_KEYS = {"HF_MODEL_ID", "SM_NUM_GPUS", "MAX_INPUT_TOKENS", "MAX_TOTAL_TOKENS", "MAX_BATCH_PREFILL_TOKENS",
            "MAX_CONCURRENT_REQUESTS"}
TGI_IMAGE = re.compile(r"^\d{12}\.dkr\.ecr\.us-east-1\.amazonaws\.com/huggingface-pytorch-tgi-inference:\S+$")


def env_int(plan: DeploymentPlan, key: str) -> int:
    return int(plan.environment[key])


def served_shape(plan: DeploymentPlan) -> Shape:
    """One copy as the pinned TGI runs it: the KV budget from free memory, MAX_BATCH_SIZE where set."""
    batch = plan.environment.get("MAX_BATCH_SIZE")
    return replace(shape_of(plan), max_batch_size=int(batch) if batch else None)


def admission_limit(plan: DeploymentPlan) -> int:
    """The planner's largest power-of-two per-copy concurrency whose payload requests finish inside the timeout."""
    return max_concurrency_in_timeout(served_shape(plan), PAYLOAD)


CASES = [(p, i) for p in (*INSTANCE_PROFILES, "replicas") for i in INSTANCES] + [("replicas", "ml.p4d.24xlarge/13b")]


def _resolve(profile: str, instance: str) -> DeploymentPlan:
    inst, _, size = instance.partition("/")
    return resolve(profile, LLAMA2_13B if size == "13b" else LLAMA2_7B, inst)


@pytest.mark.parametrize(("profile", "instance"), CASES)
def test_tgi_environment_is_complete_with_token_caps_from_the_model_context(profile: str, instance: str) -> None:
    plan = _resolve(profile, instance)
    env = plan.environment
    assert TGI_KEYS <= set(env)
    assert "HF_MODEL_QUANTIZE" not in env  # no quantization asked for
    assert env["HF_MODEL_ID"] == plan.primary.model_id
    # The application's limits: Llama 2's whole 4096-token context (every case's KV cache holds two such
    # sequences); a longest prompt still leaves room for the payload's 256-token answer.
    assert 2 * 4096 <= shape_of(plan).kv_capacity_tokens
    assert (env["MAX_INPUT_TOKENS"], env["MAX_TOTAL_TOKENS"]) == ("3840", "4096")
    assert all(env[k].isdigit() for k in TGI_KEYS - {"HF_MODEL_ID"})
    assert env_int(plan, "SM_NUM_GPUS") == plan.primary.tensor_parallel
    assert (plan.input_tokens, plan.output_tokens) == (256, 256)


@pytest.mark.parametrize(("profile", "instance"), CASES)
def test_tgi3_environment_holds_no_batch_total_tokens(profile: str, instance: str) -> None:
    # TGI 3 sizes its KV budget from free memory after warm-up and ignores the variable for flash models.
    plan = _resolve(profile, instance)
    assert plan.container_version == "3.3.6"
    assert "MAX_BATCH_TOTAL_TOKENS" not in plan.environment


@pytest.mark.parametrize(("profile", "instance"), CASES)
def test_prefill_budget_is_tgi3_default_4096_within_the_context(profile: str, instance: str) -> None:
    plan = _resolve(profile, instance)
    assert env_int(plan, "MAX_BATCH_PREFILL_TOKENS") == min(4096, env_int(plan, "MAX_TOTAL_TOKENS"))
    assert env_int(plan, "MAX_BATCH_PREFILL_TOKENS") <= shape_of(plan).kv_capacity_tokens


@pytest.mark.parametrize(("profile", "instance"), CASES)
def test_plan_carries_image_tags_and_startup_guards(profile: str, instance: str) -> None:
    plan = _resolve(profile, instance)
    assert all(TGI_IMAGE.match(m.image_uri) for m in plan.models), plan.primary.image_uri
    assert plan.region == "us-east-1" and plan.container == "tgi"
    assert plan.tags == {"sagellm:profile": profile, "sagellm:model": plan.primary.model_id,
                         "sagellm:version": sagellm.__version__}
    assert plan.startup_health_check_timeout_s >= 600
    assert plan.model_data_download_timeout_s >= 600
    assert plan.volume_size_gb is None  # g5 and p4d have local NVMe: SageMaker refuses VolumeSizeInGB


# ---------------------------------------------------------------- min-latency

@pytest.mark.parametrize("instance", INSTANCES)
def test_min_latency_runs_one_sequence_sharded_over_every_gpu(instance: str) -> None:
    plan = resolve("min-latency", LLAMA2_7B, instance)
    env = plan.environment
    # One running sequence; TGI 3 honours MAX_BATCH_SIZE only with prefill chunking off.
    assert (env["MAX_BATCH_SIZE"], env["PREFILL_CHUNKING"]) == ("1", "0")
    assert env_int(plan, "SM_NUM_GPUS") == find_instance(instance).n_accelerators
    assert (plan.endpoint_kind, plan.initial_instance_count, plan.scaling) == ("instance", 1, None)


@pytest.mark.parametrize("instance", INSTANCES)
def test_min_latency_queues_callers_whose_turn_still_comes_inside_the_timeout(instance: str) -> None:
    plan = resolve("min-latency", LLAMA2_7B, instance)
    limit = env_int(plan, "MAX_CONCURRENT_REQUESTS")
    assert limit > 1  # a second caller waits for its turn instead of getting a 429
    assert limit == admission_limit(plan)
    shape = served_shape(plan)
    assert shape.max_batch_size == 1
    assert predict_point(shape, PAYLOAD, limit).within_timeout
    assert not predict_point(shape, PAYLOAD, 2 * limit).within_timeout
    # Everyone beyond the first waits in the queue: latency grows with the queue, throughput does not.
    one, full = predict_point(shape, PAYLOAD, 1), predict_point(shape, PAYLOAD, limit)
    assert full.running_per_copy == pytest.approx(1) and full.queued_per_copy == pytest.approx(limit - 1)
    assert full.throughput_tokens_per_s == pytest.approx(one.throughput_tokens_per_s)


# ---------------------------------------------------------------- max-throughput

@pytest.mark.parametrize("instance", INSTANCES)
def test_max_throughput_admits_the_largest_power_of_two_inside_the_timeout(instance: str) -> None:
    plan = resolve("max-throughput", LLAMA2_7B, instance)
    limit = env_int(plan, "MAX_CONCURRENT_REQUESTS")
    assert limit == admission_limit(plan)
    assert limit >= 1 and limit & (limit - 1) == 0  # a power of two
    shape = served_shape(plan)
    assert predict_point(shape, PAYLOAD, limit).within_timeout
    assert not predict_point(shape, PAYLOAD, 2 * limit).within_timeout


@pytest.mark.parametrize("instance", INSTANCES)
def test_max_throughput_shards_over_every_gpu_on_one_instance(instance: str) -> None:
    plan = resolve("max-throughput", LLAMA2_7B, instance)
    assert env_int(plan, "SM_NUM_GPUS") == find_instance(instance).n_accelerators
    assert (plan.endpoint_kind, plan.initial_instance_count, plan.scaling) == ("instance", 1, None)


def test_payload_sizes_admission_but_not_the_token_caps() -> None:
    plan = resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge", payload=Payload(1024, 128))
    # The caps stay the model's context; the longest prompt leaves room for the payload's answer length.
    assert (plan.environment["MAX_INPUT_TOKENS"], plan.environment["MAX_TOTAL_TOKENS"]) == ("3968", "4096")
    assert (plan.input_tokens, plan.output_tokens) == (1024, 128)
    assert env_int(plan, "MAX_CONCURRENT_REQUESTS") == max_concurrency_in_timeout(served_shape(plan), Payload(1024, 128))


def test_total_tokens_auto_halves_the_kv_cache_when_it_cannot_hold_two_full_contexts() -> None:
    # Llama 3.1 8B has a 131072-token context; one A10G holds ~30k KV tokens after the weights.
    plan = resolve("max-throughput", "meta-llama/Llama-3.1-8B", "ml.g5.2xlarge")
    kv = shape_of(plan).kv_capacity_tokens
    assert kv < 2 * 131072
    assert env_int(plan, "MAX_TOTAL_TOKENS") == kv // 2 // 256 * 256
    assert env_int(plan, "MAX_INPUT_TOKENS") == env_int(plan, "MAX_TOTAL_TOKENS") - 256
    # TGI 3 chunks the longer prompts: the prefill budget stays at its 4096 default.
    assert env_int(plan, "MAX_BATCH_PREFILL_TOKENS") == 4096


# ---------------------------------------------------------------- min-cost

def _cost_per_1m_tokens(model_id: str, instance_type: str) -> float | None:
    """Brute force: $/1M output tokens at the largest power-of-two concurrency inside the timeout, TP = all GPUs."""
    model, inst = find_model(model_id), instances()[instance_type]
    shape = Shape(model, inst, inst.n_accelerators)
    if shape.memory_shortfall_gb > 0 or shape.max_sequences(PAYLOAD) < 1:
        return None
    limit = max_concurrency_in_timeout(shape, PAYLOAD)
    if limit == 0:
        return None
    curve = predict(replace(shape, max_concurrent_requests=limit), PAYLOAD, (limit,))
    return curve.usd_per_1m_tokens(curve.points[0])


@pytest.mark.parametrize("model_id", [LLAMA2_7B, LLAMA2_70B])
def test_min_cost_picks_the_instance_with_the_lowest_predicted_cost_per_token(model_id: str) -> None:
    # Candidates: priced GPU instance types (Inferentia needs compiled artefacts, so min-cost skips it).
    # Llama 2 7B and 70B shard over every GPU count in the catalog, so TP = all GPUs is always valid.
    costs = {name: c for name, i in instances().items()
             if not i.is_neuron and i.price_per_h("us-east-1") is not None
             and (c := _cost_per_1m_tokens(model_id, name)) is not None}
    assert len(costs) >= 3
    plan = resolve("min-cost", model_id)
    assert plan.instance_type == min(costs, key=costs.__getitem__)
    assert costs[plan.instance_type] == min(costs.values())
    assert env_int(plan, "MAX_CONCURRENT_REQUESTS") == admission_limit(plan)


@pytest.mark.parametrize("instance", INSTANCES)
def test_min_cost_with_an_explicit_instance_keeps_it_and_sizes_admission_like_max_throughput(instance: str) -> None:
    plan = resolve("min-cost", LLAMA2_7B, instance)
    assert plan.instance_type == instance
    assert plan.environment == resolve("max-throughput", LLAMA2_7B, instance).environment


# ---------------------------------------------------------------- replicas

REPLICA_CASES = [(LLAMA2_7B, i) for i in INSTANCES] + [(LLAMA2_13B, "ml.p4d.24xlarge")]


@pytest.mark.parametrize(("model_id", "instance"), REPLICA_CASES)
def test_replicas_fill_every_gpu_with_copies_of_tp_gpus_each(model_id: str, instance: str) -> None:
    plan = resolve("replicas", model_id, instance)
    inst = find_instance(instance)
    [m] = plan.models
    assert plan.endpoint_kind == "inference-component"
    assert m.copy_count * m.tensor_parallel == inst.n_accelerators
    assert env_int(plan, "SM_NUM_GPUS") == m.tensor_parallel
    assert shape_of(plan).memory_shortfall_gb == 0
    # Admission is per copy: the planner's limit for one copy.
    assert env_int(plan, "MAX_CONCURRENT_REQUESTS") == admission_limit(plan)


@pytest.mark.parametrize(("model_id", "instance"), REPLICA_CASES)
def test_replicas_request_per_copy_compute_within_the_instance(model_id: str, instance: str) -> None:
    plan = resolve("replicas", model_id, instance)
    inst = find_instance(instance)
    [m] = plan.models
    assert m.compute is not None
    assert m.compute.accelerators == m.tensor_parallel
    assert m.compute.cpu_cores > 0 and m.compute.min_memory_mib > 0
    assert m.copy_count * m.compute.cpu_cores <= inst.vcpus
    assert m.copy_count * m.compute.min_memory_mib <= inst.host_mem_gib * 1024


def test_replicas_of_llama2_13b_on_p4d_use_all_eight_a100s() -> None:
    plan = resolve("replicas", LLAMA2_13B, "ml.p4d.24xlarge")
    [m] = plan.models
    assert m.copy_count * m.tensor_parallel == 8
    assert m.compute is not None and m.compute.accelerators * m.copy_count == 8


@pytest.mark.parametrize(("model_id", "instance"), REPLICA_CASES)
def test_replicas_tp_is_within_two_percent_of_the_best_predicted_instance_throughput(model_id: str,
                                                                                      instance: str) -> None:
    model, inst = find_model(model_id), find_instance(instance)
    n = inst.n_accelerators
    gen = design_for("replicas", model_id, instance).generation  # the profile's server generation
    throughput = {}
    for tp in (t for t in range(1, n + 1) if n % t == 0):
        shape = Shape(model, inst, tp, copies=n // tp, generation=gen)
        single = Shape(model, inst, tp, generation=gen)
        if single.memory_shortfall_gb > 0 or single.max_sequences(PAYLOAD) < 1:
            continue
        limit = max_concurrency_in_timeout(single, PAYLOAD)
        if limit:
            point = predict(replace(shape, max_concurrent_requests=limit), PAYLOAD, (limit * shape.copies,)).points[0]
            throughput[tp] = point.throughput_tokens_per_s
    chosen = resolve("replicas", model_id, instance).primary.tensor_parallel
    assert chosen in throughput
    assert throughput[chosen] * 1.02 >= max(throughput.values())


def test_replicas_on_one_gpu_instance_is_one_copy() -> None:
    [m] = resolve("replicas", LLAMA2_7B, "ml.g5.2xlarge").models
    assert (m.copy_count, m.tensor_parallel) == (1, 1)


# ---------------------------------------------------------------- autoscale

@pytest.mark.parametrize("instance", INSTANCES)
def test_autoscale_starts_two_instances_and_tracks_the_knee_between_two_and_four(instance: str) -> None:
    plan = resolve("autoscale", LLAMA2_7B, instance)
    s = plan.scaling
    assert plan.initial_instance_count == 2
    assert plan.endpoint_kind == "instance"
    assert s is not None
    assert (s.min_capacity, s.max_capacity) == (2, 4)
    assert (s.scale_in_cooldown_s, s.scale_out_cooldown_s) == (300, 60)
    assert s.target_value > 0
    assert env_int(plan, "MAX_CONCURRENT_REQUESTS") == admission_limit(plan)
    # Target: concurrent requests per instance at the planner's knee of one instance's curve.
    limit = env_int(plan, "MAX_CONCURRENT_REQUESTS")
    shape = replace(served_shape(plan), max_concurrent_requests=limit)
    knee = predict(shape, PAYLOAD, tuple(2**i for i in range(13) if 2**i <= limit)).knee
    assert knee is not None
    assert s.target_value == knee.concurrency


# ---------------------------------------------------------------- containers and regions

def test_region_changes_the_image_region() -> None:
    plan = resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge", region="eu-west-1")
    assert plan.region == "eu-west-1"
    assert re.match(r"^\d{12}\.dkr\.ecr\.eu-west-1\.amazonaws\.com/huggingface-pytorch-tgi-inference:",
                    plan.primary.image_uri)
    us = resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge")
    assert plan.primary.image_uri.split("/", 1)[1] == us.primary.image_uri.split("/", 1)[1]


def test_unknown_region_is_an_input_error() -> None:
    from sagellm.errors import InputError

    with pytest.raises(InputError, match=r"^region: 'us-west-9' is not a region with SageMaker in botocore's "
                                         r"endpoint data; did you mean us-west-2, us-west-1, us-east-2\? "):
        resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", region="us-west-9")
    # A region no partition knows: refused before anything else (its ARNs and hosts could not be written).
    with pytest.raises(InputError, match=r"^region: 'xx-north-9' belongs to no AWS partition botocore knows; "):
        resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", region="xx-north-9")


def test_malformed_region_is_refused_before_anything_is_designed() -> None:
    from sagellm.errors import InputError

    with pytest.raises(InputError) as exc:
        resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", region="us-east1")
    assert exc.value.messages == [("region: 'us-east1' is not an AWS region name; use one such as us-east-1 or "
                                  "eu-west-1")]


def test_lmi_container_names_the_vllm_engine_and_uses_option_names(write, team_dir) -> None:
    write("lmi.yaml", """
        name: lmi
        extends: max-throughput
        container: {kind: lmi}
        """)
    plan = resolve("lmi", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir)
    env = plan.environment
    assert (plan.container, plan.container_version) == ("lmi", "0.38.0")
    assert plan.primary.image_uri == ("763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:"
                                      "0.38.0-lmi29.0.0-cu130")
    # A CUDA 13 image runs only on the host AMI with NVIDIA driver 580 (botocore's InferenceAmiVersion docs).
    assert plan.inference_ami_version == "al2023-ami-sagemaker-inference-gpu-4-1"
    tgi = resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge").environment
    assert env == {
        "HF_MODEL_ID": LLAMA2_7B,
        # The engine, chosen explicitly: vLLM through LMI's async OpenAI service.
        "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
        "OPTION_ASYNC_MODE": "true",
        "OPTION_ROLLING_BATCH": "disable",
        "OPTION_TENSOR_PARALLEL_DEGREE": tgi["SM_NUM_GPUS"],
        "OPTION_MAX_MODEL_LEN": tgi["MAX_TOTAL_TOKENS"],
        # LMI queues rather than refusing: the admission limit becomes the running batch.
        "OPTION_MAX_ROLLING_BATCH_SIZE": tgi["MAX_CONCURRENT_REQUESTS"],
        "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS": tgi["MAX_BATCH_PREFILL_TOKENS"],
    }


def test_quantization_is_passed_to_tgi(write, team_dir) -> None:
    write("q.yaml", """
        name: q
        extends: max-throughput
        serving:
          quantization: gptq
        """)
    plan = resolve("q", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert plan.environment["HF_MODEL_QUANTIZE"] == "gptq"
    assert plan.primary.quantization == "gptq"


def test_team_tags_are_added_to_the_sagellm_tags(write, team_dir) -> None:
    write("tagged.yaml", """
        name: tagged
        extends: min-latency
        tags:
          cost-center: ml-platform
        """)
    tags = resolve("tagged", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir).tags
    assert tags == {"sagellm:profile": "tagged", "sagellm:model": LLAMA2_7B, "sagellm:version": sagellm.__version__,
                    "cost-center": "ml-platform"}


def test_plan_is_frozen() -> None:
    from pydantic import ValidationError

    plan = resolve("min-latency", LLAMA2_7B, "ml.g5.2xlarge")
    with pytest.raises(ValidationError):
        plan.instance_type = "ml.p5.48xlarge"  # type: ignore[misc]


def test_autoscaled_copies_beyond_one_instance_get_instance_bounds(write, team_dir) -> None:
    # 1..8 copies of Llama 2 13B at TP 2 on an 8-GPU p4d: the eighth copy needs a second instance.
    write("grow.yaml", """
        name: grow
        extends: replicas
        instance_type: ml.p4d.24xlarge
        serving:
          tensor_parallel: 2
        components:
          copies: 1
        autoscaling:
          min_capacity: 1
          max_capacity: 8
        """)
    plan = resolve("grow", LLAMA2_13B, profiles_dir=team_dir)
    assert plan.instance_scaling is not None
    assert (plan.instance_scaling.min_instance_count, plan.instance_scaling.max_instance_count) == (1, 2)
    # Copies that fit the starting instance need no bounds.
    assert resolve("replicas", LLAMA2_13B, "ml.p4d.24xlarge").instance_scaling is None
