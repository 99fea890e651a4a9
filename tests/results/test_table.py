"""results.csv: one row per level, every field a column, new fields included without code changes."""

from __future__ import annotations

import csv
import io

from results_helpers import LEVELS, RUN, results
from sagellm.results.picks import make_results
from sagellm.results.schema import ERROR_KINDS, Level, Stats, Teardown
from sagellm.results.table import IDENTITY, cells, render_csv


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_one_row_per_level_with_dotted_columns_for_nested_fields() -> None:
    table = rows(render_csv(results()))

    assert [row["concurrency"] for row in table] == ["1", "2", "4", "8", "16"]
    sixteen = table[-1]
    assert float(sixteen["throughput_tokens_per_s"]) == 380
    assert float(sixteen["latency_ms_per_token.p90"]) == LEVELS[-1].latency_ms_per_token.p90
    assert sixteen["errors.overloaded"] == "20"
    assert float(sixteen["predicted.ms_per_token"]) == 45
    assert sixteen["client_overhead_ms.p50"] == ""  # not measured: empty, the column still there


def test_every_field_of_a_level_is_a_column_in_field_order() -> None:
    header = next(csv.reader(io.StringIO(render_csv(results()))))

    stats = list(Stats.model_fields)
    assert header[:9] == [*IDENTITY, "concurrency", "request_rate"]
    assert [f"ttft_ms.{s}" for s in stats] == [h for h in header if h.startswith("ttft_ms.")]
    assert [f"errors.{k}" for k in ERROR_KINDS] == [h for h in header if h.startswith("errors.")]
    assert {"window_s", "server_loop_lag_ms", "predicted.within_timeout"} <= set(header)
    assert len(header) == len(set(header))


def test_a_run_without_levels_still_has_the_header() -> None:
    empty = make_results(RUN, [], usd_per_h=None, teardown=Teardown(status="not-applicable"))

    lines = render_csv(empty).splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_id,model,profile,instance_type,instance_count,target,"
                                                   "started_at,concurrency,request_rate,repeats,requests,ok,")


def test_a_field_added_to_the_level_model_becomes_a_column() -> None:
    class Wider(Level):
        queue_ms: Stats = Stats(p50=7.5)

    wide = Wider(**LEVELS[0].model_dump())

    assert cells(Wider, wide)["queue_ms.p50"] == 7.5
    assert list(cells(Wider, None))[-len(Stats.model_fields):] == [f"queue_ms.{s}" for s in Stats.model_fields]


def test_every_row_carries_the_runs_identity_so_runs_concatenate() -> None:
    run = RUN.model_copy(update={"bench_run": "run-42"})
    table = rows(render_csv(results().model_copy(update={"run": run})))

    assert {(row["run_id"], row["model"], row["profile"], row["instance_type"]) for row in table} == {
        ("run-42", run.model, run.profile, run.instance_type)}
