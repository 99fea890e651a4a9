"""results.json: assembly, round trip, and clear errors on files that cannot be used."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sagellm.errors import InputError
from sagellm.planner.curve import Point
from sagellm.results.picks import make_results
from sagellm.results.schema import (
    ERROR_KINDS,
    Level,
    Results,
    Run,
    Stats,
    Teardown,
    load_results,
    predicted_from,
    write_results,
)

RUN = Run(profile="max-throughput", model="meta-llama/Llama-2-7b-hf", instance_type="ml.g5.2xlarge",
          instance_count=2, target="local", emulated=True, time_scale=0.1, region="us-east-1",
          environment={"MAX_CONCURRENT_REQUESTS": "64"}, input_tokens=256, output_tokens=256,
          concurrency=[1, 2, 4, 8], tool_version="0.1.0", started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
          ended_at=datetime(2025, 1, 2, 3, 9, 5, tzinfo=UTC), command="sagellm bench --profile max-throughput")
POINT = Point(concurrency=4, ms_per_token=14.0, ttft_ms=80.0, itl_ms=12.0, e2e_s=3.6,
              throughput_tokens_per_s=280.0, requests_per_s=1.1, running_per_copy=2, queued_per_copy=0,
              rejected=False, within_timeout=True)


def level(c: int, tput: float, p50: float, *, error_rate: float = 0.0) -> Level:
    return Level(
        concurrency=c, requests=100, ok=100, errors=dict.fromkeys(ERROR_KINDS, 0), error_rate=error_rate,
        retries=0, window_s=10, output_tokens=int(tput * 10), throughput_tokens_per_s=tput,
        requests_per_s=tput / 256, latency_ms_per_token=Stats(p50=p50, p90=p50 * 1.2, p99=p50 * 1.5, mean=p50),
        ttft_ms=Stats(p50=50, p90=60, p99=70, mean=55), itl_ms=Stats(p50=9, p90=10, p99=12, mean=9.5),
        e2e_s=Stats(p50=p50 * 0.256, p90=1, p99=1, mean=1), predicted=predicted_from(POINT))


def results(**kw) -> Results:
    levels = [level(1, 100, 10), level(2, 190, 10.5), level(4, 300, 14), level(8, 360, 25, error_rate=0.1)]
    return make_results(RUN, levels, usd_per_h=3.03, teardown=Teardown(status="destroyed"), **kw)


def test_make_results_picks_knee_max_throughput_slo_and_cost_from_the_levels() -> None:
    r = results(slo_ms_per_token=12, stopped_reason="error rate 10% at 8")
    assert r.knee is not None and r.knee.concurrency == 4
    assert r.max_throughput is not None and r.max_throughput.concurrency == 4  # 8 had 10 % errors
    assert r.slo is not None and r.slo.best is not None and r.slo.best.concurrency == 2
    assert r.cost.usd_per_h == 3.03
    assert r.cost.at_concurrency == 4
    assert r.cost.usd_per_1m_tokens == pytest.approx(1e6 / 300 / 3600 * 3.03)
    assert r.stopped_reason == "error rate 10% at 8"


def test_predicted_block_copies_the_planner_point() -> None:
    p = predicted_from(POINT)
    assert (p.ms_per_token, p.ttft_ms, p.itl_ms, p.throughput_tokens_per_s) == (14.0, 80.0, 12.0, 280.0)


def test_results_json_has_the_contract_top_level_keys(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_results(path, results())
    data = json.loads(path.read_text())
    assert list(data) == ["schema_version", "run", "levels", "knee", "max_throughput", "slo", "cost",
                          "teardown", "gate", "stopped_reason", "failure", "ramp", "sweep", "predicted_curve"]
    assert data["schema_version"] == 2
    assert data["run"]["started_at"] == "2025-01-02T03:04:05Z"
    assert set(data["levels"][0]) >= {"concurrency", "request_rate", "repeats", "requests", "errors",
                                      "throughput_tokens_per_s", "requests_per_s", "latency_ms_per_token",
                                      "ttft_ms", "itl_ms", "tpot_ms", "token_gap_ms", "e2e_s", "lateness_ms",
                                      "spread", "predicted"}
    assert set(data["levels"][0]["ttft_ms"]) == {"p50", "p90", "p95", "p99", "mean"}


def test_results_round_trip_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    original = results(slo_ms_per_token=12)
    write_results(path, original)
    assert load_results(path) == original


def test_load_names_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(InputError) as exc:
        load_results(path)
    assert exc.value.messages == [
        f"{path}: file not found (pass the results.json a `sagellm bench --out DIR` wrote)"]


def test_load_names_the_line_of_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{\n  "schema_version": 1,\n  oops\n}')
    with pytest.raises(InputError) as exc:
        load_results(path)
    assert exc.value.messages == [f"{path}: line 3: not valid JSON: Expecting property name enclosed in double quotes"]


def test_load_explains_an_older_or_unknown_schema_version_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    data = json.loads(results().model_dump_json())
    for version, why in ((1, "written by an older sagellm, before per-request ITL, p95 and request-rate levels"),
                         (3, "not a version this sagellm knows")):
        data["schema_version"] = version
        path.write_text(json.dumps(data))
        with pytest.raises(InputError) as exc:
            load_results(path)
        assert exc.value.messages == [(f"{path}: schema_version {version} is {why}; this sagellm reads version "
                                       "2 (re-run the bench to get one)")]


def test_load_lists_every_invalid_field_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    data = json.loads(results().model_dump_json())
    data["levels"][1]["requests"] = "many"
    data["teardown"]["status"] = "gone"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as exc:
        load_results(path)
    assert exc.value.messages == [
        f"{path}: levels[1].requests: Input should be a valid integer, unable to parse string as an integer",
        f"{path}: teardown.status: Input should be 'destroyed', 'kept', 'failed' or 'not-applicable'",
    ]


def test_the_docs_document_every_field_of_the_results_schema() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text(encoding="utf-8")
    section = page[page.index("\n## Fields\n"):]
    schema = Results.model_json_schema()
    names = set(schema["properties"]) | {name for model in schema["$defs"].values()
                                         for name in model.get("properties", {})}

    assert sorted(name for name in names if f"`{name}`" not in section) == []
