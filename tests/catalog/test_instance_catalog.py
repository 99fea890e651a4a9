"""The instance catalog: SageMaker accelerator types with memory, bandwidth, vCPUs, host memory and price."""

from __future__ import annotations

import botocore.loaders
import pytest

from sagellm.catalog import find_instance, find_model, has_local_nvme, instances
from sagellm.errors import InputError
from sagellm.planner import Payload, Shape, StepModel, predict

# From shared/reference/instances.csv:
# type -> (accelerators, accelerator, GB each, GB/s each, TFLOPS each, vCPUs, host GiB, $/h us-east-1).
# P4d, P4de and P5 carry the post-June-2025 figures the reference gives (the only list with a p4de price):
# one list for the three, so that p4de is not cheaper than p4d by mixing two lists.
REFERENCE = {
    "ml.g5.2xlarge": (1, "A10G", 24, 600, 70, 8, 32, 1.515),
    "ml.g5.12xlarge": (4, "A10G", 24, 600, 70, 48, 192, 7.09),
    "ml.g5.48xlarge": (8, "A10G", 24, 600, 70, 192, 768, 20.36),
    "ml.g6.12xlarge": (4, "L4", 24, 300, 121, 48, 192, 5.752),
    "ml.g6e.xlarge": (1, "L40S", 48, 864, 362, 4, 32, 2.61),
    "ml.g6e.48xlarge": (8, "L40S", 48, 864, 362, 192, 1536, 37.66),
    "ml.p4d.24xlarge": (8, "A100-40GB", 40, 1555, 312, 96, 1152, 25.2513),
    "ml.p4de.24xlarge": (8, "A100-80GB", 80, 2039, 312, 96, 1152, 31.5641),
    "ml.p5.48xlarge": (8, "H100-80GB", 80, 3350, 989, 192, 2048, 63.296),
    "ml.inf2.48xlarge": (12, "Inferentia2", 32, 820, 190, 192, 768, 15.58),
}

# The types botocore 1.44.8 added that the catalog now carries (data/README.md, "G7, G7e, P5 4xlarge, P6"): type ->
# (accelerators, accelerator, GB each, GB/s each, dense BF16 TFLOPS each, interconnect, vCPUs, host GiB).
NEW_TYPES = {
    # AWS G7 launch (What's New 2026-06-18): 2 × RTX PRO 4500 Blackwell Server Edition, 48 vCPUs, 192 GiB;
    # 32 GB and 800 GB/s (Exxact's Server Edition page); TFLOPS derived (82 SMs at aiconfigurator's per-SM rate).
    "ml.g7.12xlarge": (2, "RTX-PRO-4500", 32, 800, 204, "pcie", 48, 192),
    # AWS G7e launch: 8 × RTX PRO 6000 Blackwell Server Edition, 192 vCPUs, 2048 GiB; NVIDIA: 96 GB, 1597 GB/s;
    # aiconfigurator rtx_pro_6000_server.yaml: 467.8 TFLOPS dense BF16.
    "ml.g7e.48xlarge": (8, "RTX-PRO-6000", 96, 1597, 468, "pcie", 192, 2048),
    "ml.g7e.12xlarge": (2, "RTX-PRO-6000", 96, 1597, 468, "pcie", 48, 512),
    "ml.g7e.2xlarge": (1, "RTX-PRO-6000", 96, 1597, 468, "single", 8, 64),
    # AWS P6: 8 × B200, 192 vCPUs, 2048 GiB; NVIDIA Blackwell datasheet (HGX B200): 180 GB, 7.7 TB/s, 2.25 PFLOPS.
    "ml.p6-b200.48xlarge": (8, "B200", 180, 7700, 2250, "nvlink", 192, 2048),
    # AWS P6-B300: 8 × B300, 192 vCPUs, 4096 GiB; NVIDIA Blackwell Ultra datasheet: 288 GB, 62 TB/s ÷ 8, 2.25 PFLOPS.
    "ml.p6-b300.48xlarge": (8, "B300", 288, 7750, 2250, "nvlink", 192, 4096),
    # One H100 of P5: 16 vCPUs, 256 GiB (the Price List table the reference cites).
    "ml.p5.4xlarge": (1, "H100-80GB", 80, 3350, 989, "single", 16, 256),
}
# The NVIDIA GPU families of SageMaker hosting the catalog claims in full: every size botocore lists, no other.
GPU_FAMILIES = ("g5", "g6", "g6e", "g7", "g7e", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300")


def hosting_types() -> set[str]:
    """SageMaker's real-time hosting instance types, as the installed botocore's service model lists them."""
    model = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")
    return set(model["shapes"]["ProductionVariantInstanceType"]["enum"])


@pytest.mark.parametrize("family", ["g5", "g6", "g6e", "g7", "g7e", "p4d", "p4de", "p5", "p6-b200", "p6-b300", "inf2"])
def test_every_required_family_is_in_the_catalog(family: str) -> None:
    assert any(name.startswith(f"ml.{family}.") for name in instances())


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_instance_facts_match_the_reference(name: str) -> None:
    n, accel, mem, bw, tflops, vcpus, host, price = REFERENCE[name]
    i = instances()[name]
    assert (i.n_accelerators, i.accelerator, i.mem_per_accel_gb, i.bw_per_accel_gbps, i.tflops_per_accel,
            i.vcpus, i.host_mem_gib) == (n, accel, mem, bw, tflops, vcpus, host)
    assert i.price_per_h("us-east-1") == pytest.approx(price)


def test_the_80_gb_a100_costs_more_than_the_40_gb_one() -> None:
    catalog = instances()
    assert catalog["ml.p4de.24xlarge"].price_per_h("us-east-1") > catalog["ml.p4d.24xlarge"].price_per_h("us-east-1")


def test_every_instance_has_positive_accelerators_memory_bandwidth_and_host_resources() -> None:
    for i in instances().values():
        assert i.n_accelerators >= 1 and i.mem_per_accel_gb > 0 and i.bw_per_accel_gbps > 0, i.instance_type
        assert i.tflops_per_accel > 0 and i.vcpus > 0 and i.host_mem_gib > 0, i.instance_type


def test_a_region_without_a_known_price_is_unknown_not_us_east_1s() -> None:
    g5 = instances()["ml.g5.12xlarge"]
    assert g5.price_per_h("eu-west-1") is None and g5.price("eu-west-1") is None
    assert g5.price_per_h("us-east-1") == pytest.approx(7.09)  # known there, and not lent to eu-west-1
    assert instances()["ml.g5.2xlarge"].price_per_h("us-west-2") == pytest.approx(1.52)


def test_only_inferentia_counts_as_neuron() -> None:
    neuron = {name for name, i in instances().items() if i.is_neuron}
    assert neuron and all(name.startswith("ml.inf2.") for name in neuron)


def test_instance_type_without_ml_prefix_is_accepted() -> None:
    assert find_instance("g5.2xlarge").instance_type == "ml.g5.2xlarge"


def test_unknown_instance_type_suggests_close_names() -> None:
    with pytest.raises(InputError) as exc:
        find_instance("ml.g5.2xlarg")
    assert exc.value.messages == [
        ("instance_type: unknown instance type 'ml.g5.2xlarg': did you mean ml.g5.2xlarge, ml.g5.24xlarge, "
         "ml.g5.12xlarge?")
    ]


def test_every_catalog_type_is_a_sagemaker_hosting_type_in_botocore() -> None:
    assert set(instances()) - hosting_types() == set()


@pytest.mark.parametrize("family", GPU_FAMILIES)
def test_the_catalog_has_exactly_botocores_sizes_of_each_gpu_family_it_claims(family: str) -> None:
    prefix = f"ml.{family}."
    assert {t for t in instances() if t.startswith(prefix)} == {t for t in hosting_types() if t.startswith(prefix)}


@pytest.mark.parametrize("name", sorted(NEW_TYPES))
def test_new_instance_facts_match_their_sources(name: str) -> None:
    n, accel, mem, bw, tflops, link, vcpus, host = NEW_TYPES[name]
    i = instances()[name]
    assert (i.n_accelerators, i.accelerator, i.mem_per_accel_gb, i.bw_per_accel_gbps, i.tflops_per_accel,
            i.interconnect, i.vcpus, i.host_mem_gib) == (n, accel, mem, bw, tflops, link, vcpus, host)
    assert i.local_nvme  # every one lists NVMe instance storage (AWS instance pages)


def test_each_accelerator_has_one_set_of_facts_across_its_instance_types() -> None:
    facts: dict[str, set[tuple[float, int, float, float]]] = {}
    for i in instances().values():
        facts.setdefault(i.accelerator, set()).add(
            (i.mem_per_accel_gb, i.device_mem_mib, i.bw_per_accel_gbps, i.tflops_per_accel))
    assert {a: len(f) for a, f in facts.items() if len(f) > 1} == {}


def test_multi_gpu_types_say_how_their_gpus_talk_and_single_gpu_types_say_single() -> None:
    for i in instances().values():
        assert (i.interconnect == "single") == (i.n_accelerators == 1), i.instance_type
    assert not has_local_nvme("ml.inf2.xlarge") and has_local_nvme("ml.p6-b200.48xlarge")


def test_llama_3_1_70b_plans_on_p6_b200_and_decodes_faster_than_on_h200s() -> None:
    model = find_model("meta-llama/Llama-3.1-70B-Instruct")
    b200 = Shape(model, find_instance("ml.p6-b200.48xlarge"), 8)
    h200 = Shape(model, find_instance("ml.p5en.48xlarge"), 8)

    curve = predict(b200, Payload(256, 256), (1, 64))
    assert b200.memory_shortfall_gb == 0 and all(p.within_timeout for p in curve.points)
    assert curve.points[1].throughput_tokens_per_s > curve.points[0].throughput_tokens_per_s
    # Decode at batch 1 reads the weights: 7.7 TB/s per B200 against 4.8 TB/s per H200, the same NVLink model.
    assert StepModel(b200).decode_floor_s() < StepModel(h200).decode_floor_s()
    assert curve.usd_per_h is None  # no public SageMaker price of P6-B200 was found: unknown, never guessed
