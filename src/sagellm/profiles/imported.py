"""A SageMaker AI recommendation (a DescribeAIRecommendationJob response's DeploymentConfiguration) as a profile.

What maps: the image → container.kind and version (and its full tag as image_pin) where an engine's image table
holds it; instance type and count; copies per instance → an inference-component profile (`extends: replicas`) with
those copies and MinCpuMemoryRequiredInMb as memory_mib_per_copy; the environment → the profile field behind each
variable the plan owns (tensor parallel degree, max model length, …) and serving.environment for the rest; one S3
channel → model_source. The model id the environment names is the model to deploy, not a profile field. What does
not map (an image sagellm does not pin, LoRA adapters, several S3 channels) is refused in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sagellm.catalog.s3_weights import S3_PREFIX
from sagellm.engines import ENGINES, Engine, images
from sagellm.errors import InputError
from sagellm.profiles.loader import all_sources, read_source, standard_sources
from sagellm.profiles.validate import validate_profile

# <account>.dkr.ecr.<region>.<domain>/<repository>[:tag|@digest]
IMAGE = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.[a-z0-9.]+/(?P<repository>[^:@]+)"
                   r"(?::(?P<tag>[^@]+))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")
# The profile field each plan-owned setting lives in, and how its value is read from the environment.
FIELDS = {"tensor_parallel": ("serving", "tensor_parallel"), "max_total_tokens": ("serving", "max_total_tokens"),
          "max_input_tokens": ("serving", "max_input_tokens"), "max_batch_size": ("serving", "max_batch_size"),
          "max_batch_prefill_tokens": ("serving", "max_batch_prefill_tokens"),
          "max_concurrent_requests": ("serving", "max_concurrent_requests"),
          "quantization": ("serving", "quantization")}
BASE = {"instance": "max-throughput", "inference-component": "replicas"}


@dataclass(frozen=True)
class Imported:
    """The profile body, the model the environment names (None: not a Hub id), and notes for its header."""

    body: dict[str, Any]
    model: str | None
    notes: tuple[str, ...]


def container_of(image_uri: str, where: str) -> dict[str, str]:
    """container.kind, version and image_pin of an image an engine's table holds (InputError otherwise)."""
    m = IMAGE.match(image_uri)
    if m is None:
        raise InputError(f"{where}: {image_uri!r} is not an ECR image URI (<account>.dkr.ecr.<region>.amazonaws.com/"
                         "<repository>:<tag>)")
    if m["digest"] or not m["tag"]:
        raise InputError(f"{where}: {image_uri!r}: an image by digest names no version sagellm can model; use the "
                         "image by its tag")
    for kind, engine in ENGINES.items():
        for version in images.versions(engine.framework):
            entry = images.table(engine.framework)["versions"][version]
            if entry["repository"] != m["repository"] or entry["registries"].get(m["region"]) != m["account"]:
                continue
            short = images.tag(engine.framework, version)
            if m["tag"] == short:
                return {"kind": kind, "version": version}
            if not images.pin_errors(engine.framework, version, m["tag"], where):
                return {"kind": kind, "version": version, "image_pin": m["tag"]}
    known = sorted({images.table(e.framework)["versions"][v]["repository"] for e in ENGINES.values()
                    for v in images.versions(e.framework)})
    raise InputError(f"{where}: {image_uri!r} is not an image in sagellm's tables (repositories {', '.join(known)}, "
                     "in their own accounts); a profile deploys only an image sagellm pins")


def import_recommendation(response: dict[str, Any], index: int, name: str) -> Imported:
    """Recommendation `index` (1-based) of a DescribeAIRecommendationJob response as the profile `name`."""
    rec, config, dc = _recommendation(response, index)
    container = container_of(config["ImageUri"], f"{dc}.ImageUri")
    copies = config.get("CopyCountPerInstance")
    kind = "inference-component" if copies is not None else "instance"
    body: dict[str, Any] = {"name": name, "description": f"SageMaker AI recommendation {index} of "
                            f"{response.get('AIRecommendationJobName', 'a job')}", "extends": BASE[kind],
                            "container": container, "instance_type": config["InstanceType"],
                            "initial_instance_count": config.get("InstanceCount", 1)}
    serving, model = _serving(config.get("EnvironmentVariables") or {}, ENGINES[container["kind"]], dc)
    if serving:
        body["serving"] = serving
    if copies is not None:
        components: dict[str, Any] = {"copies": copies}
        if config.get("MinCpuMemoryRequiredInMb") is not None:
            components["memory_mib_per_copy"] = config["MinCpuMemoryRequiredInMb"]
        body["components"] = components
    if (source := _model_source(config.get("S3") or [], dc)) is not None:
        body["model_source"] = source
    return Imported(body, model, _notes(rec))


def _recommendation(response: dict[str, Any], index: int) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The recommendation asked for, its deployment configuration, and where that sits in the response."""
    recs = response.get("Recommendations") or []
    if not 1 <= index <= len(recs):
        raise InputError(f"--recommendation: {index}: the job has {len(recs)} recommendation(s)"
                         + (f"; give 1 to {len(recs)}" if recs else " (is it Completed?)"))
    rec = recs[index - 1]
    where = f"Recommendations[{index - 1}]"
    if rec.get("AdapterDetails"):
        raise InputError(f"{where}.AdapterDetails: LoRA adapters; sagellm deploys no adapter components")
    config = rec.get("DeploymentConfiguration")
    if not isinstance(config, dict):
        raise InputError(f"{where}.DeploymentConfiguration: missing; nothing to deploy")
    dc = f"{where}.DeploymentConfiguration"
    if "ImageUri" not in config or "InstanceType" not in config:
        raise InputError(f"{dc}: needs ImageUri and InstanceType")
    return rec, config, dc


def _serving(variables: dict[str, str], engine: Engine, dc: str) -> tuple[dict[str, Any], str | None]:
    """The container's environment as profile serving fields (the engine's own variables) and the model id
    (None where it is a path in the container: the model is in S3); the rest kept as environment."""
    serving: dict[str, Any] = {}
    environment: dict[str, str] = {}
    model = None
    owned = {n: v.sets for v in engine.variables if v.sets for n in v.names}  # name → the setting
    for key, value in variables.items():
        setting = owned.get(key)
        if setting is None:
            environment[key] = value
        elif setting == "model_id":
            model = None if value.startswith("/") else value
        else:
            _, field = FIELDS[setting]
            serving[field] = value if field == "quantization" else _integer(value, f"{dc}.EnvironmentVariables.{key}")
    if environment:
        serving["environment"] = environment
    return serving, model


def _model_source(channels: list[dict[str, Any]], dc: str) -> dict[str, str] | None:
    """The one S3 prefix the model is read from, if the recommendation stages it there."""
    if len(channels) > 1:
        raise InputError(f"{dc}.S3: {len(channels)} channels; a profile reads one model prefix (model_source)")
    if not channels:
        return None
    uri = channels[0].get("Uri", "")
    uri = uri if uri.endswith("/") else uri + "/"
    if not S3_PREFIX.match(uri):
        raise InputError(f"{dc}.S3[0].Uri: {channels[0].get('Uri')!r} is not an S3 prefix sagellm deploys from")
    return {"s3_uri": uri}


def _integer(value: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{where}: {value!r} is not a whole number; the profile field takes one") from None


def _notes(rec: dict[str, Any]) -> tuple[str, ...]:
    """What the job expects of the recommendation and the optimizations it applied, for the file's header."""
    notes = [f"expected {p.get('Stat', '')} {p['Metric']}: {p['Value']} {p.get('Unit', '')}".replace("  ", " ")
             for p in rec.get("ExpectedPerformance") or [] if "Metric" in p and "Value" in p]
    notes += [f"optimization: {o['OptimizationType']} {o.get('OptimizationConfig', {})}"
              for o in rec.get("OptimizationDetails") or [] if "OptimizationType" in o]
    if arn := rec.get("AIBenchmarkJobArn"):
        notes.append(f"measured by {arn}")
    return tuple(notes)


def write_imported(response: dict[str, Any], index: int, name: str, folder: Path) -> tuple[Path, str | None]:
    """Write the profile into `folder` only once every check `profiles validate` runs passes; → its path, model."""
    imported = import_recommendation(response, index, name)
    job = response.get("AIRecommendationJobName", "a job")
    lines = (f"Imported by `sagellm profiles import` from SageMaker AI recommendation {index} of {job}.",
             *imported.notes)
    header = "".join(f"# {line}\n" for line in lines)
    text = header + yaml.safe_dump(imported.body, sort_keys=False, allow_unicode=True)
    path = folder / f"{name}.yaml"
    sources = all_sources(folder) if folder.is_dir() else standard_sources()
    if name in sources and sources[name].path != str(path):
        raise InputError(f"--name: {name!r} is already a profile ({sources[name].path}); choose another name")
    if path.exists():
        raise InputError(f"{path}: exists; choose another --name or remove it")
    sources[name] = read_source(str(path), text)
    if errors := validate_profile(name, sources):
        raise InputError(errors)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--profiles-dir: cannot write {path}: {exc.strerror or exc}") from None
    return path, imported.model
