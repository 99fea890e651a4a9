"""The ramp's report section and ramp.png, from a hand-built ramp block."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_helpers import RUN, level
from sagellm.results.picks import make_results
from sagellm.results.report import render_markdown, write_report
from sagellm.results.schema import (
    RampInterval,
    RampRecord,
    Results,
    ScalingEvent,
    ScalingPolicyRecord,
    Stats,
    SweepRecord,
    Teardown,
)

POLICY = ScalingPolicyRecord(metric="SageMakerVariantConcurrentRequestsPerModelHighResolution", target_value=60.0, min_capacity=1, max_capacity=2,
                       scale_out_cooldown_s=60.0, scale_in_cooldown_s=300.0, period_s=60.0, out_datapoints=3,
                       in_datapoints=15, metric_delay_s=60.0, instance_startup_s=525.0)
EVENTS = [ScalingEvent(t_s=120.0, kind="breach", desired=1, in_service=1, detail="SageMakerVariantConcurrentRequestsPerModelHighResolution 90 > 60"),
          ScalingEvent(t_s=300.0, kind="scale-out", desired=2, in_service=1),
          ScalingEvent(t_s=825.0, kind="in-service", desired=2, in_service=2)]


def interval(start: float, in_service: int | None, p50_ms: float, errors: int = 0) -> RampInterval:
    return RampInterval(start_s=start, offered_rps=2.0, achieved_rps=1.8, instances_desired=in_service,
                        instances_in_service=in_service, requests=60, errors=errors, above_slo=5,
                        ttft_ms=Stats(p50=p50_ms, p90=2 * p50_ms), e2e_s=Stats(p50=p50_ms / 100, p90=p50_ms / 50),
                        ms_per_token=Stats(p50=p50_ms / 10, p90=p50_ms / 5))


def ramp(simulated: bool = True) -> RampRecord:
    intervals = [interval(30.0 * i, (1 if i < 28 else 2) if simulated else None, 100.0 if i < 28 else 50.0,
                          errors=1 if i == 20 else 0) for i in range(32)]
    return RampRecord(rates=[1.0, 2.0], step_s=480.0, interval_s=30.0, scaling="simulated" if simulated else "none",
                policy=POLICY if simulated else None, intervals=intervals, events=EVENTS if simulated else [],
                first_breach_s=120.0 if simulated else None, first_scale_out_s=300.0 if simulated else None,
                first_in_service_s=825.0 if simulated else None,
                breach_to_in_service_s=705.0 if simulated else None, slo_ms_per_token=8.0, slo_violated_s=0.0,
                slo_recovered_s=840.0, requests_while_scaling=1050, failed_while_scaling=1,
                above_slo_while_scaling=90, instance_minutes=18.25, cost_usd=0.46)


def results(r: RampRecord) -> Results:
    out = make_results(RUN, [level(1, 100, 10)], usd_per_h=1.5, teardown=Teardown(status="destroyed"))
    return out.model_copy(update={"ramp": r})


def test_the_ramp_section_gives_the_delay_the_slo_the_requests_while_scaling_and_the_cost() -> None:
    text = render_markdown(results(ramp()))
    section = text[text.index("## Ramp"):text.index("## Levels")]
    assert "![load, instances and latency over time](ramp.png)" in section
    assert "| **breach → new instance InService** | **11:45.0** |" in section
    assert "| over the SLO (8 ms/token) | 14:00.0 (from 0:00.0 to 14:00.0) |" in section
    assert "| … failed | 1 |" in section and "| … ok but above the SLO | 90 |" in section
    assert "| cost of the run | $0.46 |" in section
    assert "| 5:00.0 | scale-out | 2 | 1 |" in section
    assert "instance start-up 525 s" in section
    # The deployed policy's metric and what its target counts.
    assert "`SageMakerVariantConcurrentRequestsPerModelHighResolution` (target 60 requests in flight per instance" \
        in section
    table = section[section.index("| time | offered /s"):].splitlines()
    rows = [ln for ln in table[2:] if ln.startswith("| ")]
    assert len(rows) == 32
    assert rows[0] == "| 0:00.0 | 2.00 | 1.80 | 1 | 1 | 60 | 0 | 5 | 100 / 200 | 1.00 / 2.00 |"


@pytest.mark.slow
def test_write_report_draws_ramp_png_only_after_a_ramp(tmp_path: Path) -> None:
    paths = write_report(tmp_path / "ramp", results(ramp()))
    assert tmp_path / "ramp" / "ramp.png" in paths
    assert (tmp_path / "ramp" / "ramp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fixed = write_report(tmp_path / "fixed", results(ramp(simulated=False)))
    assert (tmp_path / "fixed" / "ramp.png").exists() and "none observed" in render_markdown(
        results(ramp(simulated=False)))
    plain = write_report(tmp_path / "sweep", make_results(RUN, [level(1, 100, 10)], usd_per_h=1.5,
                                                          teardown=Teardown(status="destroyed")))
    assert not any(p.name == "ramp.png" for p in plain) and fixed


def test_the_header_says_ramp_with_its_steps_and_the_instance_minutes_it_kept() -> None:
    r = results(ramp()).model_copy(update={"sweep": SweepRecord(method="ramp", order=["1/s", "2/s"],
                                                                 endpoint_minutes=16.0)})

    text = render_markdown(r)

    assert "- Ramp: 2 steps of 480 s back to back, 18.25 endpoint-minutes (instances in service × minutes)" in text
    assert "Sweep:" not in text


def test_a_ramp_time_rounds_before_it_splits_into_minutes_and_seconds() -> None:
    # The user's scale-to-zero cold start of 179.96 s read "2:60.0".
    text = render_markdown(results(ramp().model_copy(update={"cold_start_s": 179.96, "slo_recovered_s": 59.96})))
    assert "| **cold start (first request after zero copies → first token)** | **3:00.0** |" in text
    assert "| over the SLO (8 ms/token) | 1:00.0 (from 0:00.0 to 1:00.0) |" in text
