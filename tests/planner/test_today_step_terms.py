"""The step-time terms for today's engines (FP8 matmuls, measured GEMM rates, fused-MoE efficiency, per-prompt cost,
per-layer costs): each does what its constant says, and each is inert at its default, so TGI_1's fitted step times do
not move."""

from dataclasses import replace
from itertools import pairwise

import pytest

from sagellm.catalog import find_instance, find_model
from sagellm.engines import Limits
from sagellm.planner import Shape, StepModel
from sagellm.planner.constants import (
    ALLREDUCE,
    GEMM_RATE,
    MEASURED,
    NO_FP8_TENSOR_CORES,
    TGI_1,
    VLLM_1,
    StepConstants,
)
from sagellm.planner.simulate import Served, SimulatedPromptSet, simulate
from sagellm.planner.steps import routed_active_b


def steps(model: str, instance: str, tp: int, k: StepConstants, quantization: str = "none") -> StepModel:
    sm = StepModel(Shape(find_model(model), find_instance(instance), tp, quantization=quantization))
    sm.__dict__["k"] = k  # the constants under test instead of the generation's (cached_property's slot)
    return sm


TODAY = replace(TGI_1, measured_gemm_rates=True)


def test_the_defaults_leave_tgi_1s_step_times_as_fitted():
    plain = StepModel(Shape(find_model("qwen3-8b"), find_instance("ml.p5.48xlarge"), 1, quantization="fp8"))
    explicit = steps("qwen3-8b", "ml.p5.48xlarge", 1, replace(TGI_1, prompt_overhead_s=0.0, fp8_bandwidth_efficiency=1.0,
                                                             measured_gemm_rates=False, moe_compute_efficiency=1.0,
                                                             layer_overhead_s=0.0, moe_layer_overhead_s=0.0))
    for sm in (plain, explicit):
        assert sm.k == TGI_1 or sm.k == replace(TGI_1)
    assert plain.prefill_s(8192, 4) == explicit.prefill_s(8192, 4)
    assert plain.decode_step_s(256, 256 * 500) == explicit.decode_step_s(256, 256 * 500)


def test_fp8_checkpoints_multiply_at_fp8_rates_only_where_the_gpu_has_fp8_tensor_cores():
    # A compute-bound prefill (16k tokens) of a dense model: on H100 FP8 runs at GEMM_RATE's FP8 share, bf16 at its
    # bf16 share; A100 has no FP8 tensor cores (vLLM runs FP8 weights through 16-bit matmuls there).
    def compute_s(instance: str, quantization: str) -> float:
        sm = steps("qwen3-14b", instance, 1, replace(TODAY, step_overhead_s=0.0), quantization)
        return sm.prefill_s(16384, 8)

    bf16, fp8 = GEMM_RATE["H100-80GB"]
    assert fp8 is not None
    assert compute_s("ml.p5.48xlarge", "none") / compute_s("ml.p5.48xlarge", "fp8") == pytest.approx(fp8 / bf16, rel=1e-6)
    assert compute_s("ml.p4de.24xlarge", "fp8") == pytest.approx(compute_s("ml.p4de.24xlarge", "none"), rel=1e-9)


def test_measured_gemm_rates_slow_hopper_compute_relative_to_its_datasheet_peak():
    datasheet = steps("qwen3-14b", "ml.p5.48xlarge", 1, replace(TGI_1, step_overhead_s=0.0)).prefill_s(16384, 8)
    measured = steps("qwen3-14b", "ml.p5.48xlarge", 1, replace(TODAY, step_overhead_s=0.0)).prefill_s(16384, 8)
    assert measured / datasheet == pytest.approx(1 / GEMM_RATE["H100-80GB"][0], rel=1e-6)


def test_fused_moe_efficiency_slows_only_the_routed_experts_matmuls():
    slow = replace(TODAY, moe_compute_efficiency=0.25, step_overhead_s=0.0)
    fast = replace(TODAY, moe_compute_efficiency=1.0, step_overhead_s=0.0)
    moe, dense = find_model("mixtral-8x7b"), find_model("qwen3-14b")
    # Mixtral: 2 of 8 experts per token; the routed share of what a token multiplies is most of its 12.9B.
    assert 0 < routed_active_b(moe) < moe.active_b and routed_active_b(dense) == 0
    slower = (steps("mixtral-8x7b", "ml.p5.48xlarge", 2, slow).prefill_s(16384, 8)
              - steps("mixtral-8x7b", "ml.p5.48xlarge", 2, fast).prefill_s(16384, 8))
    # 1/0.25 - 1 = 3 more multiplies per routed parameter per token, at the copy's measured bf16 rate and the MFU.
    rate = 2 * find_instance("ml.p5.48xlarge").tflops_per_accel * 1e12 * GEMM_RATE["H100-80GB"][0] * TODAY.prefill_mfu
    assert slower == pytest.approx(16384 * 2 * 3 * routed_active_b(moe) * 1e9 / rate, rel=1e-6)
    assert (steps("qwen3-14b", "ml.p5.48xlarge", 1, slow).prefill_s(16384, 8)
            == steps("qwen3-14b", "ml.p5.48xlarge", 1, fast).prefill_s(16384, 8))


def test_each_prompt_in_a_pass_pays_the_per_prompt_cost():
    k = replace(TODAY, prompt_overhead_s=0.004)
    base = steps("qwen3-8b", "ml.p5.48xlarge", 1, TODAY)
    paid = steps("qwen3-8b", "ml.p5.48xlarge", 1, k)
    assert paid.prefill_s(2048, 16) - base.prefill_s(2048, 16) == pytest.approx(16 * 0.004)
    assert paid.decode_step_s(64, 64 * 300) == base.decode_step_s(64, 64 * 300)  # decodes enter no pass anew


def test_fp8_weight_reads_reach_their_own_share_of_the_bandwidth():
    half = replace(TODAY, fp8_bandwidth_efficiency=0.5)
    full = replace(TODAY, fp8_bandwidth_efficiency=1.0)
    sm_half, sm_full = (steps("qwen3-8b", "ml.p5.48xlarge", 1, k, "fp8") for k in (half, full))
    fixed = sm_full._fixed_s()
    assert sm_half.decode_floor_s() - fixed == pytest.approx(2 * (sm_full.decode_floor_s() - fixed))
    bf16 = steps("qwen3-8b", "ml.p5.48xlarge", 1, half)  # not FP8: untouched
    assert bf16.decode_floor_s() == steps("qwen3-8b", "ml.p5.48xlarge", 1, full).decode_floor_s()


def test_layer_costs_are_paid_per_layer_on_every_rank_and_the_moe_one_only_by_moe_models():
    k = replace(TODAY, step_overhead_s=0.0, layer_overhead_s=40e-6, moe_layer_overhead_s=25e-6)
    none = replace(TODAY, step_overhead_s=0.0)
    for model, tp in (("qwen3-8b", 1), ("qwen3-8b", 4), ("mixtral-8x7b", 2)):
        m = find_model(model)
        added = (steps(model, "ml.p5.48xlarge", tp, k).decode_step_s(8, 8 * 500)
                 - steps(model, "ml.p5.48xlarge", tp, none).decode_step_s(8, 8 * 500))
        per_layer = 40e-6 + (25e-6 if m.n_experts > 1 else 0.0)
        # Every rank runs every layer's kernels: the cost does not shrink with TP.
        assert added == pytest.approx(per_layer * m.n_layers, rel=1e-9)
        assert (steps(model, "ml.p5.48xlarge", tp, k).prefill_s(4096, 4)
                - steps(model, "ml.p5.48xlarge", tp, none).prefill_s(4096, 4)) == pytest.approx(added, rel=1e-9)


def test_step_inputs_name_the_accelerator_only_where_the_constants_read_its_gemm_rate():
    # Two GPUs alike in bandwidth, FLOPs and links but named apart time every pass alike unless the constants read
    # each GPU's measured GEMM rate (GEMM_RATE is keyed by the name): only then must their simulations stay apart.
    h100 = find_instance("ml.p5.48xlarge")
    renamed = replace(h100, accelerator="H100-renamed")
    assert renamed.accelerator not in GEMM_RATE

    def pair(k: StepConstants) -> tuple[StepModel, StepModel]:
        a, b = (StepModel(Shape(find_model("qwen3-14b"), inst, 1)) for inst in (h100, renamed))
        a.__dict__["k"] = b.__dict__["k"] = k
        return a, b

    datasheet = pair(replace(TGI_1, step_overhead_s=0.0))
    assert datasheet[0].inputs == datasheet[1].inputs
    assert datasheet[0].prefill_s(16384, 8) == datasheet[1].prefill_s(16384, 8)
    measured = pair(replace(TODAY, step_overhead_s=0.0))
    assert measured[0].inputs != measured[1].inputs
    assert measured[0].prefill_s(16384, 8) != measured[1].prefill_s(16384, 8)


def test_the_terms_of_round_5_are_off_in_tgi_1_and_on_in_the_set_ready_for_vllm_and_sglang():
    # TGI's step times and `plan --engine tgi` must not move: each new term is inert in TGI_1.
    assert (TGI_1.measured_allreduce, TGI_1.weight_only_fp8_slowdown, TGI_1.request_latency_s,
            TGI_1.moe_routing_skew) == (False, 1.0, 0.0, 1.0)
    assert VLLM_1.measured_allreduce and VLLM_1.weight_only_fp8_slowdown > 1 and VLLM_1.request_latency_s > 0
    assert MEASURED["vllm"][0] == VLLM_1 and MEASURED["tgi-1"][0] == TGI_1


@pytest.mark.parametrize(("instance", "tp"), [("ml.p5.48xlarge", 8), ("ml.p5e.48xlarge", 4), ("ml.p4de.24xlarge", 2)])
def test_measured_all_reduces_cost_their_latency_and_bus_bandwidth_per_layer(instance: str, tp: int):
    # Two all-reduces a layer (attention and MLP), each the measured latency plus its ring share of the rows' bytes
    # at the measured bus bandwidth; nothing per pass, where TGI_1 pays 3.7 ms a pass per doubling.
    k = replace(VLLM_1, layer_overhead_s=0.0, moe_layer_overhead_s=0.0)
    sm, m = steps("meta-llama/Llama-2-70b-hf", instance, tp, k), find_model("meta-llama/Llama-2-70b-hf")
    latency, bus_gbps = ALLREDUCE[find_instance(instance).accelerator][tp]
    rows = 256
    message = rows * m.hidden_size * 2
    assert sm._allreduce_s(0) == pytest.approx(2 * m.n_layers * latency, rel=1e-9)
    assert sm._allreduce_s(rows) - sm._allreduce_s(0) == pytest.approx(
        2 * m.n_layers * message * 2 * (tp - 1) / tp / (bus_gbps * 1e9), rel=1e-9)
    # Over PCIe (no measurement) the per-doubling form stays.
    pcie = steps("meta-llama/Llama-2-70b-hf", "ml.g5.48xlarge", 8, k)
    assert pcie._allreduce_s(0) == pytest.approx(2 * m.n_layers * k.pcie_allreduce_latency_s * 3, rel=1e-9)


def test_fp8_weights_on_a_gpu_without_fp8_tensor_cores_multiply_slower_than_16_bit_ones():
    # vLLM serves FP8 checkpoints on A100 as weight-only Marlin: a compute-bound prefill takes the slowdown's share
    # longer than bf16's, where on H100 FP8 is faster than bf16.
    k = replace(VLLM_1, layer_overhead_s=0.0)

    def prefill(instance: str, quantization: str) -> float:
        return steps("qwen3-14b", instance, 1, k, quantization).prefill_s(16384, 8)

    assert "A100-80GB" in NO_FP8_TENSOR_CORES and "H100-80GB" not in NO_FP8_TENSOR_CORES
    assert prefill("ml.p4de.24xlarge", "fp8") / prefill("ml.p4de.24xlarge", "none") == pytest.approx(
        k.weight_only_fp8_slowdown, rel=1e-6)
    assert prefill("ml.p5.48xlarge", "fp8") < prefill("ml.p5.48xlarge", "none")


def test_moe_routing_skew_slows_the_routed_experts_matmuls_only():
    def prefill(model: str, skew: float) -> float:
        return steps(model, "ml.p5.48xlarge", 2, replace(VLLM_1, moe_routing_skew=skew)).prefill_s(16384, 8)

    assert prefill("mixtral-8x7b", 1.5) > prefill("mixtral-8x7b", 1.0)
    assert prefill("qwen3-14b", 1.5) == prefill("qwen3-14b", 1.0)


def _simulated(k: StepConstants, load: SimulatedPromptSet) -> list:
    sm = steps("qwen3-8b", "ml.p5.48xlarge", 1, k)
    limits = Limits(max_input_tokens=4095, max_total_tokens=4096, max_batch_prefill_tokens=8192,
                    max_batch_total_tokens=200_000, max_concurrent_requests=None, max_batch_size=256,
                    kv_block_tokens=16)
    return simulate(Served(sm, limits, "vllm", 1), 512, 64, load, timeout_s=None).measured


@pytest.mark.parametrize("concurrency", [None, 1, 4])
def test_the_front_end_latency_adds_to_every_ttft_without_stalling_a_pass(concurrency: int | None):
    # A burst of 16 and closed loops: each request reaches the scheduler request_latency_s after it was sent, so
    # its TTFT and end-to-end latency grow by exactly that and its token gaps not at all; a closed-loop client's
    # next request leaves as the reply ends (the engine sees it the latency later).
    bare, late = replace(VLLM_1, request_latency_s=0.0), replace(VLLM_1, request_latency_s=0.05)
    load = SimulatedPromptSet(16, concurrency)
    before, after = _simulated(bare, load), _simulated(late, load)
    for b, a in zip(before, after):
        assert a.first_token_s - a.arrived_s == pytest.approx(b.first_token_s - b.arrived_s + 0.05, abs=1e-9)
        assert a.last_token_s - a.first_token_s == pytest.approx(b.last_token_s - b.first_token_s, abs=1e-9)
    if concurrency == 1:
        assert all(nxt.arrived_s == pytest.approx(prev.last_token_s, abs=1e-9) for prev, nxt in pairwise(after))
