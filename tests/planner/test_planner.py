"""The planner's performance model: capacity by hand, curve shape, TP, queueing, timeout limit, MoE."""

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from sagellm.catalog import find_instance, find_model
from sagellm.planner import (
    DEFAULT_CONCURRENCY,
    Payload,
    Shape,
    StepModel,
    max_concurrency_in_timeout,
    predict,
    predict_point,
)

P256 = Payload(256, 256)


def shape(model: str, instance: str, tp: int, **kw) -> Shape:
    return Shape(find_model(model), find_instance(instance), tp, **kw)


def test_kv_capacity_matches_tgi_inferred_budget_for_llama_7b_on_one_a10():
    # TGI 0.9.1 sized LLaMA-7B's KV cache on one 24 GB A10 at --max-batch-total-tokens 17664
    # (OlivierDehaene in vllm-project/vllm#381). By hand: the driver reports 23028 MiB = 24.147 GB, less the
    # 1.41 GB reserve, less 6.74e9 × 2 B of weights = 9.257 GB; KV per token = 2 (K,V) × 32 layers × 32 KV
    # heads × 128 head dim × 2 B = 524,288 B → 17,655 tokens (A10G has the same 23028 MiB).
    s = shape("llama2-7b", "ml.g5.2xlarge", 1)
    assert s.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    assert s.kv_capacity_tokens == int((23028 * 2**20 / 1e9 - 1.41 - 6.74 * 2) * 1e9 / 524_288) == 17_655
    assert s.kv_capacity_tokens == pytest.approx(17_664, rel=0.005)
    assert s.max_sequences(P256) == 34  # method.md §4: ~28 at 512 tokens (with a rougher reserve)


@pytest.mark.parametrize("model,instance,tp,payload", [
    ("llama2-7b", "ml.g5.2xlarge", 1, P256),
    ("llama2-7b", "ml.g5.12xlarge", 4, P256),
    ("llama2-7b", "ml.p4d.24xlarge", 8, P256),
    ("llama2-7b", "ml.g5.2xlarge", 1, Payload(3840, 256)),
    ("llama2-13b", "ml.p4d.24xlarge", 8, Payload(220, 50)),
])
def test_throughput_and_latency_do_not_decrease_with_concurrency_up_to_the_knee(model, instance, tp, payload):
    curve = predict(shape(model, instance, tp), payload, DEFAULT_CONCURRENCY)
    assert curve.knee is not None
    upto = [p for p in curve.points if p.concurrency <= curve.knee.concurrency]
    for a, b in itertools.pairwise(upto):
        assert b.throughput_tokens_per_s >= a.throughput_tokens_per_s
        assert b.ms_per_token >= a.ms_per_token


def test_tensor_parallelism_cuts_batch1_latency_on_nvlink_when_weight_reads_dominate():
    # 13B on one A100 reads 26 GB per token; splitting it over 2 NVLink GPUs halves that for ~5 ms of
    # all-reduce latency. (For 7B the all-reduces cost more than they save — method.md §3.)
    tp1 = StepModel(shape("llama2-13b", "ml.p4d.24xlarge", 1)).decode_step_s(1, 256)
    tp2 = StepModel(shape("llama2-13b", "ml.p4d.24xlarge", 2)).decode_step_s(1, 256)
    assert tp2 < 0.9 * tp1
    # 70B on 80 GB A100s: TP 4 halves TP 2's ~36 ms of weight reads per GPU, and adds one doubling of latency to
    # 2 × 80 all-reduces (~13 ms at the fitted NVLink latency): a net gain of about a tenth.
    tp2_70b = StepModel(shape("llama2-70b", "ml.p4de.24xlarge", 2)).decode_step_s(1, 256)
    tp4_70b = StepModel(shape("llama2-70b", "ml.p4de.24xlarge", 4)).decode_step_s(1, 256)
    assert tp4_70b < 0.95 * tp2_70b


def test_queueing_beyond_kv_capacity_raises_latency_linearly_at_flat_throughput():
    s = shape("llama2-7b", "ml.g5.2xlarge", 1)  # 34 sequences of 512 tokens fit
    p64, p128, p256 = (predict_point(s, P256, c) for c in (64, 128, 256))
    assert p128.e2e_s / p64.e2e_s == pytest.approx(2.0, rel=0.02)
    assert p256.e2e_s / p128.e2e_s == pytest.approx(2.0, rel=0.02)
    assert p256.throughput_tokens_per_s == pytest.approx(p64.throughput_tokens_per_s, rel=0.01)
    assert p128.queued_per_copy == 128 - s.max_sequences(P256)


@pytest.mark.parametrize("instance,tp,budget,published", [
    ("ml.g5.2xlarge", 1, 8192, 64), ("ml.g5.12xlarge", 4, 32768, 128), ("ml.p4d.24xlarge", 8, 131072, 512),
])
def test_max_concurrency_in_timeout_for_llama2_7b_256_256_matches_published(instance, tp, budget, published):
    # method.md §3: 64 / 128 / 512, measured on JumpStart's deployments, whose KV budgets
    # (MAX_BATCH_TOTAL_TOKENS) benchmarks/planner_accuracy.py reads off the published sweeps.
    s = shape("llama2-7b", instance, tp, max_batch_total_tokens=budget)
    assert max_concurrency_in_timeout(s, P256) == published


def test_moe_reads_only_routed_experts_at_batch_1_with_a_fused_moe_kernel():
    moe = find_model("mixtral-8x7b")
    dense = replace(moe, n_experts=1, experts_per_token=1, active_params_b=moe.params_b)
    inst = find_instance("ml.p4de.24xlarge")
    fused = StepModel(Shape(moe, inst, 2, generation="tgi-3"))
    moe_bytes = fused.weight_bytes_read(1)
    dense_bytes = StepModel(Shape(dense, inst, 2, generation="tgi-3")).weight_bytes_read(1)
    assert moe_bytes == pytest.approx(moe.weight_bytes() * moe.active_b / moe.params_b)
    assert moe_bytes < 0.3 * dense_bytes
    # A big batch touches every expert: MoE then reads (nearly) all its weights.
    assert fused.weight_bytes_read(256) == pytest.approx(dense_bytes, rel=0.01)


@pytest.mark.parametrize("batch", [2, 4, 16])
def test_moe_reads_the_expected_distinct_experts_of_a_batch(batch):
    # b rows each routed to k of E experts touch E·(1 - (1 - k/E)^b) distinct experts per layer on average
    # (each expert is missed by a row with probability 1 - k/E), plus the dense part (attention, norms, router).
    moe, inst = find_model("mixtral-8x7b"), find_instance("ml.p4de.24xlarge")
    steps = StepModel(Shape(moe, inst, 2, generation="tgi-3"))
    total, e, k = moe.weight_bytes(), moe.n_experts, moe.experts_per_token
    active = total * moe.active_b / moe.params_b
    expert = (total - active) / (e - k)  # one expert's weights over all layers
    dense = active - k * expert
    touched = e * (1 - (1 - k / e) ** batch)
    assert steps.weight_bytes_read(batch) == pytest.approx(dense + touched * expert)
    assert k < touched < e


def test_moe_on_tgi_1_computes_every_expert_up_to_256_token_rows():
    # TGI 1.x's Mixtral runs dense_forward (all experts) unless a pass has more than 256 rows.
    moe, inst = find_model("mixtral-8x7b"), find_instance("ml.p4de.24xlarge")
    steps = StepModel(Shape(moe, inst, 2, generation="tgi-1"))
    fused = StepModel(Shape(moe, inst, 2, generation="tgi-3"))
    assert steps.weight_bytes_read(1) == steps.weight_bytes_read(256) == moe.weight_bytes()
    assert fused.weight_bytes_read(1) < 0.3 * moe.weight_bytes()
    # Beyond 256 rows TGI 1.x switches to its sparse kernel: the same reads as a fused kernel.
    assert steps.weight_bytes_read(257) == fused.weight_bytes_read(257)
    # ... and the dense path multiplies every row through every expert.
    assert steps.prefill_s(256) > 1.4 * fused.prefill_s(256)  # 3.6× the FLOPs; weight reads bound the fused pass


def test_ttft_alone_is_the_prefill_and_with_others_decoding_one_step_more():
    # The prefill pass yields the first token; a closed-loop request that finds others decoding waits for
    # the step in flight (it arrives just after the step in which its predecessor finished began).
    # TGI 3's router sends a lone prompt at once, in its own pass; two streams that start together share
    # one pass and keep sharing it (they finish together), as TGI 1.x's waves do.
    s = shape("llama2-7b", "ml.g5.2xlarge", 1, generation="tgi-3")
    steps = StepModel(s)
    alone, pair = predict_point(s, P256, 1), predict_point(s, P256, 2)
    assert alone.ttft_ms == pytest.approx(steps.prefill_s(256) * 1000)
    assert alone.queue_wait_s == 0 and pair.queue_wait_s == 0
    step = steps.decode_step_s(2, 2 * (256 + 128))  # two sequences holding 256 + 128 tokens on average
    assert pair.ttft_ms == pytest.approx((steps.prefill_s(512, 2) + step) * 1000)


def test_tgi_1_router_admits_prompts_longer_than_half_the_prefill_budget_one_per_twenty_steps():
    # JumpStart's Llama 2 7B on ml.p4d.24xlarge: 3,840-token prompts, one per 4,096-token prefill pass. TGI 1.x adds
    # a pass to a running batch of n only when floor(1.2 n) prompts fit in it, or after 20 decode steps: the batch
    # levels off at 256 output tokens × 1 prompt ÷ 20 steps, the rest queue. TGI 3 admits at every step.
    long = Payload(3840, 256)
    tgi1 = shape("llama2-7b", "ml.p4d.24xlarge", 8, max_batch_total_tokens=131072)
    point = predict_point(tgi1, long, 32)
    assert point.running_per_copy == pytest.approx(256 / 20)
    assert point.queued_per_copy == pytest.approx(32 - 256 / 20)
    # past its queue wait a prompt gets its own pass (one prompt fits), then the step it joins
    steps = StepModel(tgi1)
    assert point.ttft_ms / 1000 - point.queue_wait_s == pytest.approx(
        steps.prefill_s(3840) + steps.decode_step_s(13, 13 * (3840 + 128)))
    assert predict_point(replace(tgi1, generation="tgi-3"), long, 32).running_per_copy == 32
    # 256-token prompts: 16 per pass; 128 running finish 0.5 a step, 10 per 20 steps, which a pass holds.
    assert predict_point(tgi1, P256, 128).running_per_copy == 128


def test_vllm_and_sglang_shard_past_the_kv_heads_by_replicating_them_and_tgi_does_not() -> None:
    from dataclasses import replace as replaced

    from sagellm.planner import valid_tp

    four = replaced(find_model("meta-llama/Llama-3.1-8B-Instruct"), n_kv_heads=4)  # 32 heads, 4 KV heads
    assert valid_tp(four, 8) == [1, 2, 4]  # TGI splits KV heads: 8 shards cannot share 4
    assert valid_tp(four, 8, "vllm") == valid_tp(four, 8, "sglang") == [1, 2, 4, 8]
    p5 = find_instance("ml.p5.48xlarge")
    eight, half = Shape(four, p5, 8, generation="vllm"), Shape(four, p5, 4, generation="vllm")
    # Each of 8 GPUs holds one of the 4 KV heads of every token: a token costs a quarter of its KV bytes per GPU.
    per_gpu = eight.kv_bytes_per_token / 4
    assert eight.kv_capacity_tokens == int((eight.usable_gb_per_gpu - eight.weight_gb_per_gpu) * 1e9 / per_gpu)
    assert half.kv_capacity_tokens == int((half.usable_gb_per_gpu - half.weight_gb_per_gpu) * 4 * 1e9
                                          / half.kv_bytes_per_token)


def test_compressed_kv_is_held_whole_by_every_gpu_and_read_as_one_latent() -> None:
    """MLA (DeepSeek): each token caches one latent per layer, replicated on every TP rank (vLLM's
    kv_a_proj_with_mqa is a ReplicatedLinear), so TP adds no KV capacity; a decode step reads the latent."""
    from sagellm.catalog.hub import model_from_config
    from sagellm.planner import StepModel

    config = json.loads((Path(__file__).parents[1] / "catalog/hub_configs/deepseek-ai__DeepSeek-V3.json").read_text())
    ds = model_from_config("deepseek-ai/DeepSeek-V3", config)
    h200 = find_instance("ml.p5en.48xlarge")
    shape = Shape(ds, h200, 8, quantization="fp8", generation="vllm")
    per_gpu_free = (shape.usable_gb_per_gpu - shape.weight_gb_per_gpu) * 1e9
    assert shape.kv_capacity_tokens == int(per_gpu_free / ds.kv_bytes_per_token(2.0))
    # Per-head K and V of 128 heads would cost ~85× the bytes per token: what MLA saves.
    mha = replace(ds, kv_lora_rank=None)
    assert mha.kv_bytes_per_token() / ds.kv_bytes_per_token() == pytest.approx(2 * 128 * 192 / 576)
    # A decode step over 100k context tokens reads each GPU's whole latent: more than with 8-way sharded heads
    # of the same per-token size would (latent ÷ 8), less than the 128 heads of MHA.
    steps, mha_steps = StepModel(shape), StepModel(Shape(mha, h200, 8, quantization="fp8", generation="vllm"))
    kv_s = steps.decode_step_s(64, 100_000) - steps.decode_step_s(64, 0)
    assert 0 < kv_s < mha_steps.decode_step_s(64, 100_000) - mha_steps.decode_step_s(64, 0)


def test_each_engine_sizes_the_memory_for_weights_and_kv_by_its_own_default() -> None:
    from sagellm.engines import sglang, vllm

    # SGLang's mem_fraction_static when unset (memory_hook.py): H100 80 GB reserves 512 + 1.5 × 8192 + 128 + 2 × 256
    # MiB = 13,440 MiB of 81,559 (research/schedulers.md's worked example: ≈ 0.835); A10G: 6,880 of the 23,028 MiB
    # the catalog gives it (0.70).
    h100, a10g = find_instance("ml.p5.48xlarge"), find_instance("ml.g5.xlarge")
    assert sglang.mem_fraction_static(h100.device_mem_mib, 1) == round((h100.device_mem_mib - 13440)
                                                                        / h100.device_mem_mib, 3)
    assert sglang.mem_fraction_static(h100.device_mem_mib, 1) == pytest.approx(0.835, abs=0.002)
    assert sglang.mem_fraction_static(a10g.device_mem_mib, 1) == pytest.approx(0.70, abs=0.02)
    model = find_model("meta-llama/Llama-3.1-8B-Instruct")
    tgi, vl, sg = (Shape(model, h100, 1, generation=g) for g in ("tgi-3", "vllm", "sglang"))
    # vLLM: 0.92 of the GPU less ~1 GB its profile run keeps; TGI: all but the 1.41 GB measured reserve.
    assert vl.usable_gb_per_gpu == pytest.approx(vllm.GPU_MEMORY_UTILIZATION * h100.device_mem_mib * 2**20 / 1e9 - 1.0)
    assert sg.kv_capacity_tokens < vl.kv_capacity_tokens < tgi.kv_capacity_tokens
