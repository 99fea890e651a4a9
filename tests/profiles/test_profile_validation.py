"""Validation at resolve time: each error names file (or flag), field, value and fix; all reported together."""

from __future__ import annotations

from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B, LLAMA2_13B, LLAMA2_70B

from sagellm.catalog import find_instance, find_model, instances
from sagellm.errors import InputError
from sagellm.planner import Payload, Shape
from sagellm.profiles import resolve
from sagellm.profiles.loader import all_sources, load_profile
from sagellm.profiles.validate import validate_profile


def messages(*args, **kwargs) -> list[str]:
    with pytest.raises(InputError) as exc:
        resolve(*args, **kwargs)
    return exc.value.messages


# ---------------------------------------------------------------- memory

def test_model_that_does_not_fit_says_how_many_gb_are_missing_and_what_would_fit() -> None:
    model, inst = find_model(LLAMA2_70B), find_instance("ml.g5.2xlarge")
    shape = Shape(model, inst, 1)
    [msg] = messages("max-throughput", LLAMA2_70B, "ml.g5.2xlarge")
    head, _, tail = msg.partition("would fit: ")
    assert head == (f"instance: meta-llama/Llama-2-70b-hf needs {shape.weight_gb_per_gpu:.1f} GB of weights per "
                    f"accelerator at TP 1 (none) but ml.g5.2xlarge has {shape.usable_gb_per_gpu:.1f} GB usable: "
                    f"{shape.memory_shortfall_gb:.1f} GB missing; ")
    assert shape.weight_gb_per_gpu == pytest.approx(137.96, abs=0.05)
    # One A10G: no TP or 4-bit fix exists, so the suggestions are the cheapest instance types where it fits.
    suggested = tail.split(", ")
    assert 1 <= len(suggested) <= 3

    def fits(i):
        return Shape(model, i, i.n_accelerators).memory_shortfall_gb == 0

    assert all(fits(instances()[name]) for name in suggested)
    prices = [instances()[name].price_per_h("us-east-1") for name in suggested]
    assert prices == sorted(prices)
    cheapest = min((i for i in instances().values() if not i.is_neuron and fits(i)),
                   key=lambda i: i.price_per_h("us-east-1") or 1e9)
    assert suggested[0] == cheapest.instance_type


def test_model_that_does_not_fit_at_a_pinned_tp_suggests_more_shards_or_4_bit_first() -> None:
    shape = Shape(find_model(LLAMA2_13B), find_instance("ml.g5.12xlarge"), 1)
    [msg] = messages("max-throughput", LLAMA2_13B, "ml.g5.12xlarge", tensor_parallel=1)
    assert msg.startswith(
        f"instance: meta-llama/Llama-2-13b-hf needs {shape.weight_gb_per_gpu:.1f} GB of weights per accelerator at "
        f"TP 1 (none) but ml.g5.12xlarge has {shape.usable_gb_per_gpu:.1f} GB usable: "
        f"{shape.memory_shortfall_gb:.1f} GB missing; would fit: tensor_parallel 2, tensor_parallel 4, "
        "serving.quantization: gptq (or awq), ")


# ---------------------------------------------------------------- tensor parallelism

def test_rejects_tp_that_does_not_divide_the_instance_gpus() -> None:
    assert messages("max-throughput", LLAMA2_7B, "ml.g5.12xlarge", tensor_parallel=3) == [
        "tensor_parallel: 3 must divide the 4 accelerators of ml.g5.12xlarge (valid: 1, 2, 4)"
    ]


def test_rejects_tp_above_the_instance_gpus() -> None:
    assert messages("max-throughput", LLAMA2_7B, "ml.g5.12xlarge", tensor_parallel=8) == [
        "tensor_parallel: 8 must divide the 4 accelerators of ml.g5.12xlarge (valid: 1, 2, 4)"
    ]


def test_rejects_tp_pinned_in_a_profile_with_its_file_and_line(write, team_dir: Path) -> None:
    path = write("tp3.yaml", """
        name: tp3
        extends: max-throughput
        instance_type: ml.g5.12xlarge
        serving:
          tensor_parallel: 3
        """)
    assert messages("tp3", LLAMA2_7B, profiles_dir=team_dir) == [
        f"{path}:5: serving.tensor_parallel: 3 must divide the 4 accelerators of ml.g5.12xlarge (valid: 1, 2, 4)"
    ]


def test_rejects_tp_that_cannot_shard_falcon_7b_71_heads() -> None:
    assert messages("max-throughput", "tiiuae/falcon-7b", "ml.g5.12xlarge", tensor_parallel=2) == [
        "tensor_parallel: 2 cannot shard tiiuae/falcon-7b (attention heads: 71, KV heads: 1; valid: 1)"
    ]


def test_auto_tp_for_falcon_7b_falls_back_to_one_gpu() -> None:
    assert resolve("max-throughput", "tiiuae/falcon-7b", "ml.g5.12xlarge").environment["SM_NUM_GPUS"] == "1"


def test_rejects_tp_that_does_not_divide_the_attention_heads() -> None:
    # Qwen2.5-7B: 28 attention heads, 4 KV heads; 8 divides the 8 GPUs but not the heads.
    assert messages("max-throughput", "Qwen/Qwen2.5-7B", "ml.g5.48xlarge", tensor_parallel=8) == [
        "tensor_parallel: 8 cannot shard Qwen/Qwen2.5-7B (attention heads: 28, KV heads: 4; valid: 1, 2, 4)"
    ]


def test_rejects_tp_above_the_gqa_kv_heads(write, team_dir: Path) -> None:
    write("gqa2.yaml", """
        name: gqa2
        extends: max-throughput
        architecture:
          params_b: 7.0
          n_layers: 32
          hidden_size: 4096
          n_heads: 32
          n_kv_heads: 2
          head_dim: 128
          max_context: 8192
        """)
    assert messages("gqa2", "acme/gqa2", "ml.g5.12xlarge", tensor_parallel=4, profiles_dir=team_dir) == [
        "tensor_parallel: 4 cannot shard acme/gqa2 (attention heads: 32, KV heads: 2; valid: 1, 2)"
    ]
    # With TP auto it picks the largest degree the KV heads allow.
    plan = resolve("gqa2", "acme/gqa2", "ml.g5.12xlarge", profiles_dir=team_dir)
    assert plan.environment["SM_NUM_GPUS"] == "2"


def test_rejects_zero_tensor_parallel_as_input_error(write, team_dir: Path) -> None:
    write("tp0.yaml", """
        name: tp0
        extends: max-throughput
        serving:
          tensor_parallel: 0
        """)
    with pytest.raises(InputError, match="tensor_parallel"):
        resolve("tp0", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir)


# ---------------------------------------------------------------- token limits

def test_rejects_total_tokens_not_above_input(write, team_dir: Path) -> None:
    path = write("eq.yaml", """
        name: eq
        extends: max-throughput
        serving:
          max_input_tokens: 1024
          max_total_tokens: 1024
        """)
    assert messages("eq", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir) == [
        (f"{path}:5: serving.max_total_tokens: 1024 must exceed max_input_tokens (1024); set it to at least 1025 "
         "(input + the longest generation)")
    ]


def test_rejects_prefill_budget_below_max_input_where_tgi_cannot_chunk(write, team_dir: Path) -> None:
    # min-latency's MAX_BATCH_SIZE needs PREFILL_CHUNKING=0: every prompt is prefilled in one pass.
    path = write("prefill.yaml", """
        name: prefill
        extends: min-latency
        serving:
          max_input_tokens: 1024
          max_batch_prefill_tokens: 512
        """)
    assert messages("prefill", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir) == [
        (f"{path}:5: serving.max_batch_prefill_tokens: 512 is below max_input_tokens (1024); a full prompt could "
         "never be prefilled — set it to at least 1024")
    ]


def test_accepts_prefill_budget_below_max_input_where_tgi3_chunks_prompts(write, team_dir: Path) -> None:
    write("chunk.yaml", """
        name: chunk
        extends: max-throughput
        serving:
          max_input_tokens: 1024
          max_batch_prefill_tokens: 512
        """)
    plan = resolve("chunk", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir)
    assert plan.environment["MAX_BATCH_PREFILL_TOKENS"] == "512"


def test_rejects_total_tokens_above_the_llama2_context(write, team_dir: Path) -> None:
    path = write("ctx.yaml", """
        name: ctx
        extends: max-throughput
        instance_type: ml.p4d.24xlarge
        serving:
          max_input_tokens: 4000
          max_total_tokens: 4200
        """)
    assert messages("ctx", LLAMA2_7B, profiles_dir=team_dir) == [
        (f"{path}:6: serving.max_total_tokens: 4200 exceeds the 4096-token context of meta-llama/Llama-2-7b-hf; "
         "lower max_total_tokens or use auto")
    ]


def test_payload_above_the_context_is_rejected_even_with_auto_caps() -> None:
    assert messages("min-latency", LLAMA2_7B, "ml.p4d.24xlarge", payload=Payload(3000, 2000)) == [
        ("input_tokens/output_tokens: 3000 input + 2000 output tokens do not fit under max_input_tokens 2096 / "
         "max_total_tokens 4096 (the context of meta-llama/Llama-2-7b-hf is 4096 tokens); shorten the payload or "
         "raise the caps")
    ]


def test_payload_above_pinned_caps_names_the_profile_payload(write, team_dir: Path) -> None:
    path = write("short.yaml", """
        name: short
        extends: max-throughput
        serving:
          max_input_tokens: 512
          max_total_tokens: 1024
        payload:
          input_tokens: 1000
          output_tokens: 24
        """)
    assert messages("short", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir) == [
        (f"{path}:6: payload: 1000 input + 24 output tokens do not fit under max_input_tokens 512 / "
         "max_total_tokens 1024; shorten the payload or raise the caps")
    ]


def test_rejects_total_tokens_above_the_kv_capacity(write, team_dir: Path) -> None:
    kv = Shape(find_model("meta-llama/Llama-3.1-8B"), find_instance("ml.g5.2xlarge"), 1).kv_capacity_tokens
    path = write("kv.yaml", f"""
        name: kv
        extends: max-throughput
        serving:
          max_total_tokens: {kv + 1}
        """)
    assert messages("kv", "meta-llama/Llama-3.1-8B", "ml.g5.2xlarge", profiles_dir=team_dir) == [
        (f"{path}:4: serving.max_total_tokens: one request of {kv + 1} tokens exceeds the {kv} KV-cache tokens free "
         f"at TP 1 (the server would refuse to start); use auto or at most {kv}")
    ]


def test_batch_total_tokens_is_no_longer_a_profile_field(write, team_dir: Path) -> None:
    # TGI ignores it for flash-attention models; neither the field nor the variable is accepted.
    path = write("kv.yaml", """
        name: kv
        extends: max-throughput
        serving:
          max_batch_total_tokens: 20000
          environment:
            MAX_BATCH_TOTAL_TOKENS: "20000"
        """)
    with pytest.raises(InputError) as exc:
        load_profile("kv", all_sources(team_dir))
    assert exc.value.messages == [(f"{path}:4: serving.max_batch_total_tokens: no longer a profile field: TGI ≥ 1.4 "
                                   "ignores MAX_BATCH_TOTAL_TOKENS for flash-attention models (the KV budget is what "
                                   "is free after warm-up); remove it (serving.max_batch_size limits running "
                                   "sequences)")]
    write("kv.yaml", """
        name: kv
        extends: max-throughput
        serving:
          environment:
            MAX_BATCH_TOTAL_TOKENS: "20000"
        """)
    assert messages("kv", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir) == [
        (f"{path}:5: serving.environment.MAX_BATCH_TOTAL_TOKENS: TGI ≥ 1.4 ignores it for flash-attention models: "
         "the KV budget is what is free after warm-up (TGI 3.3.6); remove it")
    ]


def test_rejects_zero_admission_limit(write, team_dir: Path) -> None:
    path = write("zero.yaml", """
        name: zero
        extends: max-throughput
        serving:
          max_concurrent_requests: 0
        """)
    assert messages("zero", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir) == [
        f"{path}:4: serving.max_concurrent_requests: 0: out of range; use a value ≥ 1 or auto"
    ]


# ---------------------------------------------------------------- copies, instances

def test_rejects_copies_times_tp_above_the_instance_gpus() -> None:
    assert messages("replicas", LLAMA2_7B, "ml.p4d.24xlarge", tensor_parallel=2, copies=8) == [
        "replicas: 8 copies × 2 GPUs exceed the 8 accelerators of ml.p4d.24xlarge (at most 4 copies at TP 2)"
    ]


def test_rejects_copies_pinned_in_a_profile_with_its_file_and_line(write, team_dir: Path) -> None:
    path = write("rep.yaml", """
        name: rep
        extends: replicas
        instance_type: ml.p4d.24xlarge
        serving:
          tensor_parallel: 2
        components:
          copies: 8
        """)
    assert messages("rep", LLAMA2_7B, profiles_dir=team_dir) == [
        (f"{path}:7: components.copies: 8 copies × 2 GPUs exceed the 8 accelerators of ml.p4d.24xlarge "
         "(at most 4 copies at TP 2)")
    ]


def test_rejects_several_copies_on_an_instance_endpoint() -> None:
    assert messages("max-throughput", LLAMA2_7B, "ml.p4d.24xlarge", tensor_parallel=1, copies=8) == [
        "replicas: 8 copies need endpoint_kind: inference-component (use the replicas profile)"
    ]


def test_rejects_unknown_instance_type_from_the_cli_with_close_names() -> None:
    assert messages("max-throughput", LLAMA2_7B, "ml.g5.2xlarg") == [
        "instance: unknown instance type 'ml.g5.2xlarg': did you mean ml.g5.2xlarge, ml.g5.24xlarge, ml.g5.12xlarge?"
    ]


def test_rejects_unknown_instance_type_from_a_profile_with_its_line(write, team_dir: Path) -> None:
    path = write("inst.yaml", """
        name: inst
        extends: replicas
        instance_type: ml.p4d.24xlarg
        """)
    assert messages("inst", LLAMA2_7B, profiles_dir=team_dir) == [
        (f"{path}:3: instance_type: unknown instance type 'ml.p4d.24xlarg': did you mean ml.p4d.24xlarge, "
         "ml.p4de.24xlarge, ml.p5.4xlarge?")
    ]


def test_instance_without_ml_prefix_resolves_to_the_full_name() -> None:
    assert resolve("max-throughput", LLAMA2_7B, "g5.2xlarge").instance_type == "ml.g5.2xlarge"


def test_rejects_initial_count_outside_the_autoscaling_bounds() -> None:
    assert messages("autoscale", LLAMA2_7B, "ml.g5.2xlarge", instance_count=5) == [
        "instance_count: 5 must lie within autoscaling min_capacity..max_capacity (2..4)"
    ]


# ---------------------------------------------------------------- YAML keys and secrets

def test_unknown_keys_are_reported_with_file_and_line(write, team_dir: Path) -> None:
    path = write("typo.yaml", """
        name: typo
        extends: max-throughput
        instance: ml.g5.2xlarge
        serving:
          max_concurent_requests: 8
        """)
    with pytest.raises(InputError) as exc:
        load_profile("typo", all_sources(team_dir))
    assert sorted(exc.value.messages) == [
        f"{path}:3: instance: unknown key (did you mean instance_type?)",
        f"{path}:5: serving.max_concurent_requests: unknown key (did you mean max_concurrent_requests?)",
    ]


def test_unknown_key_in_a_parent_profile_is_reported_at_the_parent_file(write, team_dir: Path) -> None:
    parent = write("parent.yaml", """
        name: parent
        extends: min-latency
        autoscaling:
          min_capacity: 1
          target: 5
        """)
    write("child.yaml", "name: child\nextends: parent\n")
    with pytest.raises(InputError) as exc:
        load_profile("child", all_sources(team_dir))
    assert exc.value.messages == [f"{parent}:5: autoscaling.target: unknown key (did you mean target_value?)"]


def test_wrong_value_names_the_value_and_the_choices(write, team_dir: Path) -> None:
    path = write("q.yaml", """
        name: q
        extends: max-throughput
        serving:
          quantization: int3
        """)
    with pytest.raises(InputError) as exc:
        load_profile("q", all_sources(team_dir))
    assert exc.value.messages == [
        (f"{path}:4: serving.quantization: 'int3': Input should be 'none', 'gptq', 'awq', 'bitsandbytes', 'eetq' or "
         "'fp8'")
    ]


def test_wrong_type_for_an_auto_field_is_one_message_on_the_field(write, team_dir: Path) -> None:
    path = write("four.yaml", """
        name: four
        extends: max-throughput
        serving:
          tensor_parallel: four
        """)
    with pytest.raises(InputError) as exc:
        load_profile("four", all_sources(team_dir))
    [msg] = exc.value.messages
    assert msg.startswith(f"{path}:4: serving.tensor_parallel: 'four': ")


def test_yaml_syntax_error_names_file_and_line(write, team_dir: Path) -> None:
    path = write("broken.yaml", "name: broken\nserving:\n  environment: {A: 1\n")
    with pytest.raises(InputError, match=rf"^{path}:\d+: not valid YAML: "):
        load_profile("broken", all_sources(team_dir))


@pytest.mark.parametrize("key", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"])
def test_refuses_plaintext_hugging_face_token_pointing_to_the_secret_field(write, team_dir: Path, key: str) -> None:
    path = write("tok.yaml", f"""
        name: tok
        extends: min-latency
        serving:
          environment:
            {key}: hf_abcdef
        """)
    with pytest.raises(InputError) as exc:
        load_profile("tok", all_sources(team_dir))
    assert exc.value.messages == [
        (f"{path}:5: serving.environment.{key}: a token variable never goes in a container environment: store it "
         "in Secrets Manager and set hf_token_secret: <secret name or ARN>")
    ]


def test_token_in_a_parent_profile_is_refused_for_the_child(write, team_dir: Path) -> None:
    parent = write("parent.yaml", """
        name: parent
        extends: min-latency
        serving:
          environment:
            HF_TOKEN: hf_abcdef
        """)
    write("child.yaml", "name: child\nextends: parent\n")
    with pytest.raises(InputError) as exc:
        resolve("child", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages[0].startswith(f"{parent}:5: serving.environment.HF_TOKEN: a token variable never")


def test_secret_reference_is_carried_into_the_plan_and_not_the_environment(write, team_dir: Path) -> None:
    write("gated.yaml", """
        name: gated
        extends: min-latency
        hf_token_secret: prod/huggingface/token
        """)
    plan = resolve("gated", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert plan.hf_token_secret == "prod/huggingface/token"
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(plan.environment)


# ---------------------------------------------------------------- several errors at once

def test_several_profile_errors_come_in_one_input_error_before_the_model_is_looked_at(write, team_dir: Path) -> None:
    path = write("multi.yaml", """
        name: multi
        extends: min-latency
        instance_type: ml.g5.12xlarge
        serving:
          tensor_parallel: 3
          max_input_tokens: 1024
          max_total_tokens: 1024
          max_batch_prefill_tokens: 512
        """)
    assert messages("multi", "no/such-model", profiles_dir=team_dir) == [
        (f"{path}:7: serving.max_total_tokens: 1024 must exceed max_input_tokens (1024); set it to at least 1025 "
         "(input + the longest generation)"),
        (f"{path}:8: serving.max_batch_prefill_tokens: 512 is below max_input_tokens (1024); a full prompt could "
         "never be prefilled — set it to at least 1024"),
    ]


def test_several_design_errors_of_one_profile_come_in_one_input_error(write, team_dir: Path) -> None:
    path = write("multi.yaml", """
        name: multi
        extends: replicas
        instance_type: ml.g5.12xlarge
        serving:
          tensor_parallel: 3
        components:
          copies: 8
        """)
    assert messages("multi", LLAMA2_7B, profiles_dir=team_dir) == [
        f"{path}:5: serving.tensor_parallel: 3 must divide the 4 accelerators of ml.g5.12xlarge (valid: 1, 2, 4)",
        (f"{path}:7: components.copies: 8 copies × 3 GPUs exceed the 4 accelerators of ml.g5.12xlarge "
         "(at most 1 copies at TP 3)"),
    ]


def test_several_schema_errors_and_a_token_come_in_one_input_error(write, team_dir: Path) -> None:
    path = write("bad.yaml", """
        name: bad
        extends: min-latency
        serving:
          tensor_parall: 2
          quantization: int3
          environment:
            HF_TOKEN: hf_abc
        """)
    with pytest.raises(InputError) as exc:
        load_profile("bad", all_sources(team_dir))
    assert sorted(exc.value.messages) == sorted([
        (f"{path}:7: serving.environment.HF_TOKEN: a token variable never goes in a container environment: store it "
         "in Secrets Manager and set hf_token_secret: <secret name or ARN>"),
        (f"{path}:5: serving.quantization: 'int3': Input should be 'none', 'gptq', 'awq', 'bitsandbytes', 'eetq' or "
         "'fp8'"),
        f"{path}:4: serving.tensor_parall: unknown key (did you mean tensor_parallel?)",
    ])
    assert str(exc.value) == "\n".join(exc.value.messages)


def test_a_schema_error_and_semantic_errors_of_one_file_come_together(write, team_dir: Path) -> None:
    path = write("team.yaml", """
        name: team
        extends: max-throughput
        serving:
          max_batch_size: 0
          max_input_tokens: 4096
          max_total_tokens: 2048
        autoscaling:
          min_capacity: 5
          max_capacity: 2
        """)
    expected = [
        f"{path}:4: serving.max_batch_size: 0: out of range; use a value ≥ 1",
        (f"{path}:6: serving.max_total_tokens: 2048 must exceed max_input_tokens (4096); set it to at least 4097 "
         "(input + the longest generation)"),
        f"{path}:9: autoscaling.max_capacity: 2 must be at least min_capacity (5)",
    ]
    assert validate_profile("team", all_sources(team_dir)) == expected
    # bench, plan and cdk synth report the same lines, before the model is looked at.
    assert messages("team", "no/such-model", profiles_dir=team_dir) == expected


def test_two_semantic_errors_of_one_file_come_together(write, team_dir: Path) -> None:
    path = write("two.yaml", """
        name: two
        extends: max-throughput
        tags:
          "aws:team": chat
        serving:
          max_input_tokens: 4096
          max_total_tokens: 2048
        """)
    assert validate_profile("two", all_sources(team_dir)) == [
        f"{path}:4: tags.aws:team: the aws: prefix is reserved for AWS; rename the key",
        (f"{path}:7: serving.max_total_tokens: 2048 must exceed max_input_tokens (4096); set it to at least 4097 "
         "(input + the longest generation)"),
    ]


def test_a_value_the_schema_refused_is_not_checked_again_as_its_default(write, team_dir: Path) -> None:
    # The refused count would stand in as 1, outside 2..4; the refused kind as tgi, which has no version 0.38.0.
    path = write("refused.yaml", """
        name: refused
        extends: autoscale
        initial_instance_count: 0
        autoscaling: {min_capacity: 2, max_capacity: 4}
        container: {kind: lmj, version: 0.38.0}
        """)
    assert sorted(validate_profile("refused", all_sources(team_dir))) == [
        f"{path}:3: initial_instance_count: 0: out of range; use a value ≥ 1",
        (f"{path}:5: container.kind: 'lmj': 'lmj' is not an engine sagellm knows (known: tgi, lmi, vllm, sglang, "
         "vllm-neuronx)"),
    ]
