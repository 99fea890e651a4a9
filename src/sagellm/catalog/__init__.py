"""Facts about models and instance types, shipped as CSV package data."""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from sagellm.catalog import pricing
from sagellm.catalog.model import BYTES_PER_PARAM, Model
from sagellm.catalog.pricing import OFFERINGS_SOURCE, Price
from sagellm.errors import InputError

__all__ = ["BYTES_PER_PARAM", "HUB_ID", "NVME_FAMILIES", "Instance", "Model", "Price", "check_offered",
           "find_instance", "find_model", "has_local_nvme", "instances", "local_folder", "models"]

# Families with local NVMe instance storage (AWS "Instance store volumes"; Inf2 is EBS-only): SageMaker
# encrypts it in hardware and refuses both KmsKeyId and VolumeSizeInGB for them (CreateEndpointConfig).
# The catalog's families, plus GPU families outside it that a hand-built plan may name.
NVME_FAMILIES = ("ml.g5.", "ml.g6.", "ml.g6e.", "ml.g7.", "ml.g7e.", "ml.p4d.", "ml.p4de.", "ml.p5.", "ml.p5e.",
                 "ml.p5en.", "ml.p6-b200.", "ml.p6-b300.", "ml.g4dn.", "ml.p3dn.", "ml.trn1.", "ml.trn1n.")
# A Hugging Face repository id: owner/name of letters, digits, '-', '_', '.' (the Hub's own rule).
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# Names only a path has: a Hub id (and a catalog alias) starts with a letter or digit, holds one '/', no backslash.
PATH_STARTS = (".", "/", "~")


@dataclass(frozen=True)
class Instance:
    """A SageMaker accelerator instance type."""

    instance_type: str
    n_accelerators: int
    accelerator: str
    mem_per_accel_gb: float
    device_mem_mib: int  # what the driver reports as total memory (nvidia-smi), a little under the label
    bw_per_accel_gbps: float
    tflops_per_accel: float
    interconnect: str  # single | pcie | nvlink | neuronlink
    vcpus: int
    host_mem_gib: float

    @property
    def device_mem_gb(self) -> float:
        """Memory per accelerator as the driver reports it, in GB (10^9 bytes, as weights are counted)."""
        return self.device_mem_mib * 2**20 / 1e9

    @property
    def is_neuron(self) -> bool:
        """Whether the accelerator is AWS Inferentia (Neuron SDK containers)."""
        return self.accelerator.startswith("Inferentia")

    @property
    def local_nvme(self) -> bool:
        """Whether the instance brings NVMe instance storage (no KmsKeyId, no VolumeSizeInGB on SageMaker)."""
        return has_local_nvme(self.instance_type)

    @property
    def total_mem_gb(self) -> float:
        """Accelerator memory of the whole instance, GB as labelled."""
        return self.n_accelerators * self.mem_per_accel_gb

    def price(self, region: str) -> Price | None:
        """The region's own on-demand price (its currency, date and source), or None where none is known."""
        return pricing.price(self.instance_type, region)

    def price_per_h(self, region: str) -> float | None:
        """The region's own on-demand $/h, or None where no USD price is known there (never another region's)."""
        p = self.price(region)
        return p.per_h if p is not None and p.currency == "USD" else None

    def offered_in(self, region: str) -> bool | None:
        """Whether SageMaker hosting offers the type in a region; None where the region's list is not known."""
        return pricing.offered(self.instance_type, region)


def has_local_nvme(instance_type: str) -> bool:
    """Whether an instance type (in the catalog or not) brings NVMe instance storage."""
    return instance_type.startswith(NVME_FAMILIES)


def _rows(name: str) -> list[dict[str, str]]:
    text = resources.files("sagellm.catalog").joinpath("data", name).read_text()
    return list(csv.DictReader(text.splitlines()))


@cache
def models() -> dict[str, Model]:
    """All catalog models by Hugging Face id."""
    out = {}
    for r in _rows("models.csv"):
        out[r["hf_id"]] = Model(
            hf_id=r["hf_id"],
            alias=r["alias"],
            params_b=float(r["params_b"]),
            active_params_b=float(r["active_params_b"]),
            n_layers=int(r["n_layers"]),
            hidden_size=int(r["hidden_size"]),
            n_heads=int(r["n_heads"]),
            n_kv_heads=int(r["n_kv_heads"]),
            head_dim=int(r["head_dim"]),
            max_context=int(r["max_context"]),
            n_experts=int(r["n_experts"]),
            experts_per_token=int(r["experts_per_token"]),
            parallel_attention=r["parallel_attention"] == "true",
            gated=r["gated"] == "true",
        )
    return out


@cache
def instances() -> dict[str, Instance]:
    """All catalog instance types by name (ml.g5.2xlarge)."""
    out = {}
    for r in _rows("instances.csv"):
        out[r["instance_type"]] = Instance(
            instance_type=r["instance_type"],
            n_accelerators=int(r["n_accelerators"]),
            accelerator=r["accelerator"],
            mem_per_accel_gb=float(r["mem_per_accel_gb"]),
            device_mem_mib=int(r["device_mem_mib"]),
            bw_per_accel_gbps=float(r["bw_per_accel_gbps"]),
            tflops_per_accel=float(r["tflops_per_accel"]),
            interconnect=r["interconnect"],
            vcpus=int(r["vcpus"]),
            host_mem_gib=float(r["host_mem_gib"]),
        )
    return out


def _suggest(value: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=3, cutoff=0.5)
    return f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(choices))}"


@cache
def _by_key() -> dict[str, Model]:
    """Catalog models by lower-case Hugging Face id and alias."""
    by_key = {m.hf_id.lower(): m for m in models().values()}
    by_key.update({m.alias.lower(): m for m in models().values() if m.alias})
    return by_key


def local_folder(name: str) -> Path | None:
    """The local model folder a model name means (None: a catalog or Hub id): an existing path wins over the Hub,
    as in transformers; a name only a path can have (./x, ../x, /x, ~/x, x/, a/b/c) is a folder even if missing
    (and `local_model` says so)."""
    if name.lower() in _by_key():
        return None
    path = Path(name).expanduser()
    path_like = name.startswith(PATH_STARTS) or name.endswith("/") or "\\" in name or name.count("/") > 1
    return path if path_like or path.exists() else None


def find_model(name: str, where: str = "model") -> Model:
    """Look a model up by Hugging Face id or alias (case-insensitive); a local folder (`local_folder`) or an
    `owner/name` id outside the catalog is read from its config.json there or on the Hugging Face Hub
    (sagellm.catalog.hub)."""
    hit = _by_key().get(name.lower())
    folder = None if hit else local_folder(name)
    if folder is not None:
        from sagellm.catalog.hub import local_model

        try:
            return local_model(folder)
        except InputError as exc:
            raise InputError([f"{where}: {m}" for m in exc.messages]) from None
    if hit is None and HUB_ID.fullmatch(name):
        from sagellm.catalog.hub import hub_model

        try:
            return hub_model(name)
        except InputError as exc:
            close = difflib.get_close_matches(name, list(models()), n=3, cutoff=0.5)
            hint = f" (catalog models close to it: {', '.join(close)})" if close else ""
            raise InputError([f"{where}: {m}{hint}" for m in exc.messages]) from None
    if hit is None:
        raise InputError(
            f"{where}: unknown model {name!r}: {_suggest(name, list(models()))} "
            "(or give its architecture under 'architecture:' in the profile)"
        )
    return hit


def find_instance(name: str, where: str = "instance_type") -> Instance:
    """Look an instance type up by name; 'g5.2xlarge' without the 'ml.' prefix is accepted."""
    key = name if name.startswith("ml.") else f"ml.{name}"
    hit = instances().get(key)
    if hit is None:
        raise InputError(f"{where}: unknown instance type {name!r}: {_suggest(key, list(instances()))}")
    return hit


def check_offered(instance_type: str, region: str, where: str = "instance_type") -> None:
    """An InputError in one line naming the nearest types (by accelerator memory) the region offers, where it does
    not offer this catalog type; nothing where it does or where that is not known (a type outside the catalog, a
    region the data does not cover)."""
    catalog = instances()
    if instance_type not in catalog or pricing.offered(instance_type, region) is not False:
        return
    there = [catalog[t] for t in pricing.offerings()[region] if t in catalog]
    if not there:
        raise InputError(f"{where}: {instance_type} is not offered in {region}, nor is any catalog instance type "
                         f"(source: {OFFERINGS_SOURCE}); use a region such as us-east-1")
    want = catalog[instance_type].total_mem_gb
    near = sorted(there, key=lambda i: (abs(i.total_mem_gb - want), i.price_per_h(region) or 1e9))[:4]
    more = ", …" if len(there) > len(near) else ""
    raise InputError(f"{where}: {instance_type} is not offered in {region} (offered there: "
                     f"{', '.join(i.instance_type for i in near)}{more}; source: {OFFERINGS_SOURCE})")
