"""Whether inference components' copies fit the instances of the endpoint they share: an LlmEndpoint records the
copies of its own models, and an LlmComponent checks its copies against them before it joins.

A copy reserves its ComputeResourceRequirements (accelerators, CPU cores, memory) on one instance, and an endpoint's
instances are its initial count, or up to ManagedInstanceScaling's MaxInstanceCount where SageMaker adds instances
as copies need them (ProductionVariantManagedInstanceScaling, SageMaker API reference). Copies beyond that room
cannot be placed, and CloudFormation accepts them all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from sagellm.catalog import Instance, instances
from sagellm.profiles.plan import ComputeRequirements, DeploymentPlan, instances_for


@dataclass(frozen=True)
class Copies:
    """One model's copies on an endpoint, each reserving `compute`: how many it starts with, and the most its
    scaling allows."""

    compute: ComputeRequirements
    start: int
    most: int


def copies_of(plan: DeploymentPlan) -> list[Copies]:
    """The copies each model of an inference-component plan starts with and may scale to."""
    most = plan.scaling.max_capacity if plan.scaling is not None else 0
    return [Copies(m.compute, m.copy_count, max(m.copy_count, most)) for m in plan.models if m.compute is not None]


def room(host: DeploymentPlan) -> tuple[int, str]:
    """The most instances the endpoint may have, and the plan setting that says so."""
    if host.instance_scaling is not None:
        return host.instance_scaling.max_instance_count, "instance_scaling.max_instance_count"
    return host.initial_instance_count, "initial_instance_count"


def joining_errors(host: DeploymentPlan, host_path: str, placed: list[Copies], joining: list[Copies]) -> list[str]:
    """A component whose starting copies, beside those already on the endpoint, need more instances than it has."""
    instance = instances().get(host.instance_type)
    if instance is None or not joining:
        return []  # an instance type outside the catalog: its capacity is unknown here
    every = [(c.compute, c.start) for c in [*placed, *joining]]
    need, (allowed, setting) = instances_for(every, instance), room(host)
    if need == 0 or need <= allowed:
        return []  # fits, or one copy outgrows the instance (the plan's own check says so)
    there = sum(c.start for c in placed)
    return [(
        f"plan.models: its {_copies(sum(c.start for c in joining))} at the start cannot join endpoint {host_path}: "
        f"beside the {_copies(there)} already there, the starting copies need {need} × {host.instance_type} but the "
        f"endpoint may have {allowed} ({over(every, instance, allowed)}), and SageMaker places no copy beyond its "
        f"instances; raise the endpoint plan's {setting} to {need}, or start fewer copies here or there"
    )]


def crowding_warning(host: DeploymentPlan, host_path: str, placed: list[Copies]) -> str | None:
    """Where every component on the endpoint at its most copies needs more instances than it may have."""
    instance = instances().get(host.instance_type)
    if instance is None:
        return None
    every = [(c.compute, c.most) for c in placed]
    need, (allowed, setting) = instances_for(every, instance), room(host)
    if need == 0 or need <= allowed:
        return None
    fix = (f"raise the endpoint plan's {setting} to {need}" if host.instance_scaling is not None else
           f"give the endpoint plan instance_scaling up to {need} instances (SageMaker adds them as copies need them)")
    return (
        f"endpoint {host_path}: its components at their scaling's most copies ({sum(c.most for c in placed)}) need "
        f"{need} × {host.instance_type} but it may have {allowed} ({over(every, instance, allowed)}): they share "
        f"that room, and a copy added where none is left is not placed; if they may all be busy at once, {fix}"
    )


def over(copies: list[tuple[ComputeRequirements, int]], instance: Instance, count: int) -> str:
    """What the copies ask beyond `count` instances: accelerators first, then CPU cores and memory."""
    asked = [sum(c.accelerators * n for c, n in copies), sum(c.cpu_cores * n for c, n in copies),
             sum(c.min_memory_mib * n for c, n in copies)]
    held = [instance.n_accelerators * count, instance.vcpus * count, instance.host_mem_gib * 1024 * count]
    units = ["accelerator", "CPU core", "MiB of memory"]
    parts = [f"{_number(a - h)} {unit}{'s' if unit != 'MiB of memory' and a - h != 1 else ''} over"
             for a, h, unit in zip(asked, held, units, strict=True) if a > h]
    # Enough in sum, yet no instance has room for the next copy: a copy's reservation never spans instances.
    return ", ".join(parts) or "their reservations do not split across instances"


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.1f}"  # never `g`'s 1e+06


def _copies(count: int) -> str:
    return f"{count} cop{'y' if count == 1 else 'ies'}"
