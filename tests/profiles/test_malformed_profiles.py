"""Every file in tests/profiles/malformed/ fed to `sagellm profiles validate`: exit 2, one line naming the file.

The table holds the exact line each file earns (after the file's path): adding a fixture means adding its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from profile_helpers import run_cli

MALFORMED = Path(__file__).parent / "malformed"
EXPECTED = {
    "alias-bomb.yaml": (
        ": more than 100000 values (YAML aliases expanding?); a profile is a few dozen lines — write the "
        "values out"),
    "architecture-missing-facts.yaml": (
        ":3: architecture: missing hidden_size, n_heads, n_kv_heads, head_dim, max_context (add them)"),
    "bad-quantization.yaml": (
        ":4: serving.quantization: 'int3': Input should be 'none', 'gptq', 'awq', 'bitsandbytes', 'eetq' "
        "or 'fp8'"),
    "binary.yaml": (
        ": not UTF-8 text (byte 0x00 at offset 8); a profile is YAML saved as UTF-8 — is this the right "
        "file?"),
    "capacity-inverted.yaml": ":5: autoscaling.max_capacity: 2 must be at least min_capacity (3)",
    "zero-on-instance-endpoint.yaml": (
        ":4: autoscaling.min_capacity: 0 needs endpoint_kind: inference-component (only inference components "
        "scale to zero; use the scale-to-zero profile)"),
    "caps-contradict.yaml": (
        ":5: serving.max_total_tokens: 1024 must exceed max_input_tokens (2048); set it to at least 2049 "
        "(input + the longest generation)"),
    "comments-only.yaml": (
        ": empty; a profile needs at least `name: <name>` and `extends: <profile>` (e.g. extends: "
        "max-throughput)"),
    "copies-on-instance-endpoint.yaml": (
        ":4: components.copies: 4 copies need endpoint_kind: inference-component (use the replicas "
        "profile)"),
    "cpu-below-minimum.yaml": (
        ":4: components.cpu_cores_per_copy: 0.1: out of range; use a value ≥ 0.25 or auto"),
    "download-timeout-too-short.yaml": (
        ":3: model_data_download_timeout_s: 10: out of range; use a value ≥ 60 or auto"),
    "duplicate-key.yaml": ":6: serving.max_input_tokens: duplicate key (first at line 4); keep one of them",
    "duplicate-top-level-key.yaml": ":3: extends: duplicate key (first at line 2); keep one of them",
    "empty.yaml": (
        ": empty; a profile needs at least `name: <name>` and `extends: <profile>` (e.g. extends: "
        "max-throughput)"),
    "env-aliases-disagree.yaml": (
        ":5: serving.environment.MAX_INPUT_TOKENS: '1024' (and MAX_INPUT_LENGTH: '2048'): the plan sets "
        "the server's max input tokens from serving.max_input_tokens; remove them and set "
        "serving.max_input_tokens"),
    "env-bad-variable-name.yaml": (
        ":5: serving.environment.LOG-LEVEL: not a valid variable name (SageMaker takes letters, digits and "
        "underscores, not starting with a digit)"),
    "env-legacy-name.yaml": (
        ":5: serving.environment.MAX_INPUT_LENGTH: '2048': the plan sets the server's max input tokens "
        "from serving.max_input_tokens; remove it and set serving.max_input_tokens: 2048"),
    "env-number-value.yaml": (
        ":5: serving.environment.CUDA_MEMORY_FRACTION: 0.9: Input should be a valid string; quote it: "
        '"0.9"'),
    "env-revisions-disagree.yaml": (
        ":5: serving.environment.HF_MODEL_REVISION: 'main' (and REVISION: 'v2'): these disagree, and both "
        "set the server's model revision (only one wins); keep one of them"),
    "extends-itself.yaml": (
        ":2: extends: cycle extends-itself → extends-itself; make one of them extend a standard profile"),
    "extra-models-on-instance-endpoint.yaml": (
        ":4: components.extra_models: extra models need endpoint_kind: inference-component"),
    "fractional-count.yaml": (
        ":3: initial_instance_count: 1.5: Input should be a valid integer, got a number with a fractional "
        "part"),
    "huge-concurrency.yaml": (
        ":4: serving.max_concurrent_requests: 100000000000000000000: out of range; use a value ≤ "
        "2305843009213693951 or auto"),
    "initial-count-outside-scaling.yaml": (
        ":3: initial_instance_count: 5 must lie within autoscaling min_capacity..max_capacity (2..4)"),
    "latin-1.yaml": (
        ": not UTF-8 text (byte 0xe9 at offset 9); a profile is YAML saved as UTF-8 — is this the right "
        "file?"),
    "memory-below-minimum.yaml": (
        ":4: components.memory_mib_per_copy: 64: out of range; use a value ≥ 128 or auto"),
    "models.yaml": ":1: acme/custom-7b: missing head_dim (add it)",
    "name-too-long.yaml": (
        ":1: name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' cannot be part "
        "of a CloudFormation stack name: use ASCII letters, digits and hyphens, at most 64 characters "
        "(e.g. 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')"),
    "name-with-spaces.yaml": (
        ":1: name: 'team chat' cannot be part of a CloudFormation stack name: use ASCII letters, digits "
        "and hyphens, at most 64 characters (e.g. 'team-chat')"),
    "negative-cooldown.yaml": ":4: autoscaling.scale_in_cooldown_s: -300: out of range; use a value ≥ 0",
    "non-ascii-name.yaml": (
        ":1: name: 'café-chat' cannot be part of a CloudFormation stack name: use ASCII letters, digits "
        "and hyphens, at most 64 characters (e.g. 'cafe-chat')"),
    "not-a-mapping.yaml": (
        ": a profile must be a YAML mapping (name: ..., serving: ...), not list [{'name': 'a'}, {'name': "
        "'b'}]"),
    "reserved-tag.yaml": ":4: tags.aws:owner: the aws: prefix is reserved for AWS; rename the key",
    "startup-timeout-too-long.yaml": (
        ":3: startup_health_check_timeout_s: 7200: out of range; use a value ≤ 3600 or auto"),
    "syntax-error.yaml": (
        ":4: not valid YAML: did not find expected ',' or '}' (while parsing a flow mapping)"),
    "tab-indented.yaml": (
        ":3: not valid YAML: found character that cannot start any token (while scanning for the next "
        "token)"),
    "token-in-environment.yaml": (
        ":5: serving.environment.HF_TOKEN: a token variable never goes in a container environment: store it in "
        "Secrets Manager and set hf_token_secret: <secret name or ARN>"),
    "tokens-beyond-u32.yaml": (
        ":4: serving.max_batch_prefill_tokens: 4294967296: out of range; use a value ≤ 4294967295 or auto"),
    "two-documents.yaml": (
        ":3: not valid YAML: but found another document (expected a single document in the stream)"),
    "unknown-extends.yaml": ":2: extends: unknown profile 'max-thruput': did you mean max-throughput?",
    "unknown-instance-type.yaml": (
        ":3: instance_type: unknown instance type 'ml.g5.2xlarg': did you mean ml.g5.2xlarge, "
        "ml.g5.24xlarge, ml.g5.12xlarge?"),
    "unknown-key.yaml": (
        ":4: serving.max_concurent_requests: unknown key (did you mean max_concurrent_requests?)"),
    "unknown-top-level-key.yaml": ":3: instance: unknown key (did you mean instance_type?)",
    "utf-16.yaml": (
        ": not UTF-8 text (byte 0x00 at offset 3); a profile is YAML saved as UTF-8 — is this the right "
        "file?"),
    "volume-too-big.yaml": ":3: volume_size_gb: 1024: out of range; use a value ≤ 512 or auto",
    "word-for-a-number.yaml": ":4: serving.tensor_parallel: 'four': expected a whole number ≥ 1 or 'auto'",
    "zero-payload.yaml": ":4: payload.input_tokens: 0: out of range; use a value ≥ 1",
    "zero-target-value.yaml": ":4: autoscaling.target_value: 0: out of range; use a value > 0.0 or auto",
    "zero-tensor-parallel.yaml": ":4: serving.tensor_parallel: 0: out of range; use a value ≥ 1 or auto",
}


def test_every_fixture_has_its_expected_line() -> None:
    assert sorted(p.name for p in MALFORMED.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("path", sorted(MALFORMED.iterdir()), ids=lambda p: p.name)
def test_malformed_file_is_refused_in_one_line_naming_the_file(path: Path, capsys, monkeypatch) -> None:
    code, out, err = run_cli(capsys, monkeypatch, "profiles", "validate", str(path))
    assert (code, out) == (2, "")
    assert "Traceback" not in err
    assert err.splitlines() == [f"sagellm: error: {path}{EXPECTED[path.name]}"]
