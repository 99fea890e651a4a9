"""The instance catalog: SageMaker accelerator types with memory, bandwidth, vCPUs, host memory and price."""

from __future__ import annotations

import pytest

from sagellm.catalog import find_instance, instances
from sagellm.errors import InputError

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


@pytest.mark.parametrize("family", ["g5", "g6", "g6e", "p4d", "p4de", "p5", "inf2"])
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
