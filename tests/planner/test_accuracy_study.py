"""The planner's accuracy study (benchmarks/planner_accuracy.py): its held-out tables load, each row says where it
was published, and the error on sources the fit never saw stays where docs/planner.md puts it."""

from __future__ import annotations

import csv
from dataclasses import replace
from types import ModuleType

import pytest

from benchmark_scripts import BENCHMARKS, load_benchmark


def _study() -> ModuleType:
    return load_benchmark("planner_accuracy")


def test_holdout_rows_are_their_sources_and_map_to_catalog_shapes():
    study = _study()
    rows = study.load_rows(study.HOLDOUT_CSV)
    # FMBench, and the Hugging Face benchmark's pilot runs (scored on that source's own definitions)
    assert rows and {r.source for r in rows} == {"fmbench", "huggingface"}
    for row in rows:
        shape = study.shape_of(row)  # the catalog knows the model and the instance, and the TP shards it
        assert shape.memory_shortfall_gb == 0
        assert row.ms_per_token and row.throughput


def test_holdout_rows_cite_a_source_and_say_how_they_were_measured():
    with (BENCHMARKS / "data" / "holdout.csv").open() as f:
        for r in csv.DictReader(f):
            repository = ("philschmid/text-generation-inference-tests" if r["source"].startswith("Hugging Face")
                          else "foundation-model-benchmarking-tool")
            assert repository in r["source"] and "@" in r["source"]
            assert "latency" in r["notes"] and "throughput" in r["notes"]


@pytest.mark.slow
def test_held_out_error_is_no_worse_than_docs_planner_md_says():
    # docs/planner.md: 11.8 % in ms/token and 14.9 % in throughput on sources the fit never saw (198 levels).
    study = _study()
    rows = study.load_rows(study.DEFAULT_CSV) + study.load_rows(study.HOLDOUT_CSV)
    pooled = study.leave_one_source_out(rows)["overall (pooled held-out rows)"]
    assert pooled["n"] == len(rows)
    assert pooled["ms_all"] <= 11.9 and pooled["thr_all"] <= 15.0


def test_a_level_published_by_several_runs_counts_once_at_their_median():
    study = _study()
    level = study.load_rows(study.HOLDOUT_CSV)[0]
    runs = [replace(level, ms_per_token=ms, throughput=thr) for ms, thr in ((60.0, 15.0), (64.0, 13.0), (70.0, 12.0))]
    other = replace(level, concurrency=level.concurrency + 1)
    assert study.one_per_level([*runs, other]) == [replace(level, ms_per_token=64.0, throughput=13.0), other]
