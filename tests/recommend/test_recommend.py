"""`sagellm recommend`: the catalog search, the pick and its profile, the exit codes, the JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sagellm.catalog import find_model, instances
from sagellm.engines import ENGINES
from sagellm.planner import Payload, predict_point
from sagellm.profiles import design_for
from sagellm.recommend import Load, Space, choose, concurrency_for_rate, instance_types, search
from sagellm.results.gate import Rule

SAGELLM = Path(sys.executable).parent / "sagellm"
MODEL = find_model("llama2-7b")


def sagellm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def slo_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slo.yaml"
    path.write_text(text)
    return path


def itl(load: Load, limit: float) -> tuple[Rule, ...]:
    return (Rule(metric="itl_ms.p50", where=load.name, max=limit),)


@pytest.mark.slow
def test_the_search_covers_every_priced_gpu_instance_type_of_the_catalog():
    load = Load(concurrency=8)
    found = search(Space(find_model("llama2-13b"), Payload(), instance_types()), load, itl(load, 60))
    searched = {c.config.instance_type for c in found.candidates}
    # Priced and offered there (ml.p5.4xlarge has a us-east-1 price, but cfn-lint's region list lacks it).
    gpu = {name for name, inst in instances().items()
           if not inst.is_neuron and inst.price_per_h("us-east-1") and inst.offered_in("us-east-1") is not False}
    assert searched == gpu
    assert all("not searched" in note for note in found.notes)
    # A 13B model (26 GB of weights) does not fit one 24 GB A10G: said, not predicted.
    (alone,) = [c for c in found.candidates if c.config.instance_type == "ml.g5.2xlarge"]
    assert alone.problem is not None and alone.problem.startswith("does not fit") and alone.point is None
    fitted = [c for c in found.candidates if c.problem is None]
    assert {c.config.engine for c in fitted} == {k for k, e in ENGINES.items() if e.gpu}  # every GPU engine
    for c in fitted:
        gpus = instances()[c.config.instance_type].n_accelerators
        if c.config.endpoint_kind == "inference-component":
            assert c.config.copies == gpus // c.config.tensor_parallel >= 2 and c.instance_count == 1
        else:
            assert c.config.copies == 1
        assert c.usd_per_h == pytest.approx(instances()[c.config.instance_type].price_per_h("us-east-1")
                                            * c.instance_count)


def test_an_open_loop_rate_becomes_the_concurrency_littles_law_gives():
    shape = design_for("max-throughput", "llama2-7b", "ml.g5.2xlarge").shape()
    n = concurrency_for_rate(shape, Payload(), 1.5)
    assert n is not None and n > 1
    at, below = predict_point(shape, Payload(), n), predict_point(shape, Payload(), n - 1)
    assert at.requests_per_s >= 1.5 > below.requests_per_s
    assert n == pytest.approx(1.5 * at.e2e_s, rel=0.1)  # N = λ × W at the fixed point
    assert concurrency_for_rate(shape, Payload(), 1e6) is None  # no single GPU sustains a million requests/s


@pytest.mark.slow
# Up to six pruned searches of three families (about 17 s of CPU; a full search of every count took 90–250 s).
@pytest.mark.timeout(1000)
def test_inference_component_copies_can_beat_every_single_copy_endpoint():
    # Look for a load and an ITL bound where the planner prefers copies, instead of guessing one.
    space = Space(MODEL, Payload(), instance_types(families=("g5", "g6e", "p4d")))
    found = None
    for concurrency in (32, 64, 128):
        for limit in (20.0, 30.0):
            load = Load(concurrency=concurrency)
            # No headroom: this is about which endpoint kind is cheapest where both meet the bound.
            # Pruned: the pick and every cheaper candidate are what a full search gives (test_recommend_simulated.py).
            rec = choose(search(space, load, itl(load, limit), headroom=0, prune=True), load, itl(load, limit),
                         Payload())
            if rec.pick is not None and rec.pick.config.endpoint_kind == "inference-component":
                found = rec
                break
        if found:
            break
    assert found is not None and found.pick is not None, "no load where copies win"
    pick = found.pick
    single = [c for c in found.candidates if c.config.endpoint_kind == "instance" and c.meets]
    assert single, "some single-copy endpoint meets the SLO too, at a price"
    assert all(c.usd_per_h > pick.usd_per_h for c in single)
    # The same instance as one copy over all its GPUs misses the SLO or costs more.
    gpus = instances()[pick.config.instance_type].n_accelerators
    same = [c for c in found.candidates if c.config.instance_type == pick.config.instance_type
            and c.config.endpoint_kind == "instance" and c.config.tensor_parallel == gpus and c.instance_count == 1]
    assert same and all(not c.meets for c in same)
    assert all(found.reason(c).startswith("misses itl_ms.p50 by") for c in same)


@pytest.mark.slow
def test_a_recommendation_writes_the_frontier_the_json_the_plot_and_a_profile_that_resolves(tmp_path):
    slo = slo_file(tmp_path, "rules:\n  - {metric: ttft_ms.p90, max: 800}\n  - {metric: itl_ms.p50, max: 40}\n")
    result = sagellm("recommend", "--model", "llama2-7b", "--request-rate", "2", "--thresholds", str(slo),
                     "--families", "g5,g6e", "--out", "rec", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "rec"
    assert {p.name for p in out.iterdir()} == {"frontier.md", "recommendation.json", "frontier.png", "profiles"}
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "frontier.md").read_text()
    assert "| **pick** |" in table and "ttft_ms.p90@2/s <= 800" in table and "$/1M tokens" in table
    data = json.loads((out / "recommendation.json").read_text())
    assert {"model", "payload", "load", "slo", "pick", "profile", "peak", "closest", "frontier", "candidates",
            "model_note"} <= set(data)
    assert data["load"] == {"concurrency": None, "request_rate": 2.0}
    pick = data["pick"]
    assert pick["meets_slo"] and pick["why_not"] is None and pick["prediction"]["ttft_ms"] <= 800
    assert data["candidates"].count(pick) == 1 and pick["deployment"] in data["frontier"]
    losers = [c for c in data["candidates"] if c != pick]
    assert all(c["why_not"] for c in losers)
    reasons = " ".join(c["why_not"] for c in losers)
    assert "misses ttft_ms.p90 by" in reasons or "misses itl_ms.p50 by" in reasons
    assert "× the pick" in reasons
    for c in data["candidates"]:
        if c["meets_slo"] and c["usd_per_h"] > pick["usd_per_h"]:
            ratio = c["usd_per_h"] / pick["usd_per_h"]
            assert c["why_not"] == f"costs {ratio:.2f}× the pick"
    # The profile extends the standard one and pins what was picked; the real validation path accepts it.
    profile = tmp_path / data["profile"]
    assert profile.parent == out / "profiles"
    validated = sagellm("profiles", "validate", "--profiles-dir", str(profile.parent), cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    design = design_for(profile.stem, "llama2-7b", profiles_dir=profile.parent)
    assert design.instance.instance_type == pick["instance_type"]
    assert design.instance_count == pick["instance_count"]
    assert design.copies[0].tensor_parallel == pick["tensor_parallel"] and design.container == pick["engine"]
    assert design.profile.extends in ("max-throughput", "replicas")


@pytest.mark.slow
def test_nothing_meets_the_slo_exits_1_naming_the_closest_and_its_gap(tmp_path):
    slo = slo_file(tmp_path, "rules:\n  - {metric: itl_ms.p50, max: 1}\n")
    result = sagellm("recommend", "--model", "llama2-7b", "--concurrency", "16", "--thresholds", str(slo),
                     "--families", "g5", "--out", "rec", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("recommend: ")]  # progress
    assert lines[0].startswith("sagellm: nothing is predicted to meet the SLO at 16; binding limit: itl_ms.p50 "
                               "(predicted ") and lines[0].endswith(" on the closest, allowed <= 1)")
    assert lines[1].startswith("closest: ") and "misses itl_ms.p50 by" in lines[1]
    data = json.loads((tmp_path / "rec" / "recommendation.json").read_text())
    assert data["pick"] is None and data["profile"] is None
    gaps = data["closest"]["gaps"]
    assert list(gaps) == ["itl_ms.p50@16 <= 1"] and gaps["itl_ms.p50@16 <= 1"]["gap_pct"] > 100
    assert not (tmp_path / "rec" / "profiles").exists()


@pytest.mark.slow
def test_a_peak_rate_sizes_autoscaling_from_the_target_count_to_the_peaks(tmp_path):
    slo = slo_file(tmp_path, "rules:\n  - {metric: itl_ms.p50, max: 40}\n")
    result = sagellm("recommend", "--model", "llama2-7b", "--request-rate", "2", "--peak-rate", "8",
                     "--thresholds", str(slo), "--families", "g5,g6e", "--engines", "tgi", "--out", "rec",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "rec" / "recommendation.json").read_text())
    pick, peak = data["pick"], data["peak"]
    assert pick["endpoint_kind"] == "instance" and pick["engine"] == "tgi"
    assert peak["min_capacity"] == pick["instance_count"] < peak["max_capacity"]
    assert peak["target_value"] == pytest.approx(peak["peak_concurrency"] / peak["max_capacity"], abs=0.01)
    design = design_for((tmp_path / data["profile"]).stem, "llama2-7b", profiles_dir=tmp_path / "rec" / "profiles")
    assert design.profile.extends == "autoscale"
    assert design.scaling is not None
    assert (design.scaling.min_capacity, design.scaling.max_capacity) == (peak["min_capacity"], peak["max_capacity"])
    assert design.scaling.target_value == peak["target_value"]
    # max_capacity is the fewest instances meeting the SLO with the headroom at the peak: one fewer misses it,
    # cannot carry it, or meets it short of the headroom.
    rules = (Rule(metric="itl_ms.p50", where="8/s", max=40),)
    from sagellm.recommend.search import DEFAULT_HEADROOM, Candidate, Config, evaluate, least_margin

    config = Config(**{k: pick[k] for k in ("instance_type", "endpoint_kind", "tensor_parallel", "copies", "engine",
                                             "quantization")})
    fewer = Candidate(config, peak["max_capacity"] - 1, 1.0)
    evaluate(fewer, design.shape(peak["max_capacity"] - 1), Payload(), Load(request_rate=8), rules)
    assert not fewer.meets or least_margin(fewer, rules) < DEFAULT_HEADROOM


@pytest.mark.parametrize(("args", "slo", "message"), [
    ([], "rules: [{metric: itl_ms.p50, max: 40}]", "--request-rate / --concurrency: give exactly one target load"),
    (["--concurrency", "4", "--request-rate", "1"], "rules: [{metric: itl_ms.p50, max: 40}]",
     "--request-rate / --concurrency: give exactly one"),
    (["--concurrency", "4", "--peak-rate", "3"], "rules: [{metric: itl_ms.p50, max: 40}]",
     "--peak-rate: needs --request-rate"),
    (["--concurrency", "4", "--engine", "tgi,nope"], "rules: [{metric: itl_ms.p50, max: 40}]",
     "--engine: unknown engine 'nope'"),
    (["--concurrency", "4"], "rules: [{metric: itl_ms.p50, where: knee, max: 40}]",
     "rules[0].where: knee depends on a measured sweep"),
    (["--concurrency", "4"], "rules: [{metric: token_gap_ms.p50, max: 40}]",
     "rules[0].metric: token_gap_ms.p50 cannot be predicted"),
    (["--concurrency", "4"], "rules: [{metric: itl_ms.p5O, max: 40}]", "is not a known metric"),
    (["--concurrency", "4", "--families", "zz9"], "rules: [{metric: itl_ms.p50, max: 40}]",
     "--families: zz9: no such family"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, slo, message):
    path = slo_file(tmp_path, slo)
    result = sagellm("recommend", "--model", "llama2-7b", "--thresholds", str(path), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sagellm: error: ") and message in lines[0], lines
    assert not (tmp_path / "recommendation").exists()


def test_a_rule_without_where_applies_at_the_target_load_and_one_with_where_at_its_own(tmp_path):
    from sagellm.recommend import load_slo
    from sagellm.recommend.search import Candidate, Config, evaluate

    slo = slo_file(tmp_path, "rules:\n  - {metric: itl_ms.p50, max: 40}\n"
                             "  - {metric: itl_ms.p50, where: 64, max: 1000}\n  - {metric: cost.usd_per_h, max: 5}\n")
    rules = load_slo(slo, Load(concurrency=8)).rules
    assert [r.where for r in rules] == [8, 64, None]
    design = design_for("max-throughput", "llama2-7b", "ml.g5.2xlarge")
    candidate = Candidate(Config("ml.g5.2xlarge", "instance", 1, 1, "tgi", "none"), 1, 1.515)
    evaluate(candidate, design.shape(), Payload(), Load(concurrency=8), rules)
    at8, at64 = predict_point(design.shape(), Payload(), 8), predict_point(design.shape(), Payload(), 64)
    assert candidate.values == {rules[0].label: at8.itl_ms, rules[1].label: at64.itl_ms, rules[2].label: 1.515}
    assert at64.itl_ms > at8.itl_ms


@pytest.mark.slow
def test_a_rule_at_a_load_nothing_sustains_is_a_miss_not_a_crash(tmp_path):
    slo = slo_file(tmp_path, "rules:\n  - {metric: error_rate, max: 0}\n"
                             "  - {metric: ttft_ms.p90, where: 100000/s, max: 800}\n")
    result = sagellm("recommend", "--model", "llama2-7b", "--concurrency", "4", "--thresholds", str(slo),
                     "--families", "g5", "--out", "rec", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("recommend: ")]  # progress
    assert "no prediction there (that load cannot be sustained)" in lines[1]
    data = json.loads((tmp_path / "rec" / "recommendation.json").read_text())
    assert data["closest"]["gaps"] == {"ttft_ms.p90@100000/s <= 800": {"predicted": None, "gap_pct": 100.0}}
    assert (tmp_path / "rec" / "frontier.png").is_file()


@pytest.mark.slow
def test_an_out_that_is_a_file_is_one_line_before_the_search(tmp_path):
    (tmp_path / "rec").write_text("a file\n")
    slo = slo_file(tmp_path, "rules:\n  - {metric: latency_ms_per_token.p50, max: 60}\n")

    result = sagellm("recommend", "--model", "llama2-7b", "--concurrency", "16", "--thresholds", str(slo),
                     "--families", "g5", "--out", "rec", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [("sagellm: error: --out: rec is a file, not a folder; choose a folder to "
                                          "write the results in")]


@pytest.mark.slow
def test_a_file_where_the_profiles_go_is_one_line_and_nothing_of_the_recommendation_is_kept(tmp_path):
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "profiles").write_text("in the way\n")
    slo = slo_file(tmp_path, "rules:\n  - {metric: latency_ms_per_token.p50, max: 60}\n")

    # --json: no progress lines on stderr, so the error is all it holds.
    result = sagellm("recommend", "--model", "llama2-7b", "--concurrency", "16", "--thresholds", str(slo),
                     "--families", "g5", "--out", "rec", "--json", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        ("sagellm: error: --out: cannot write rec/profiles: File exists; choose a folder you can write to (nothing of "
        "this recommendation was kept)")]
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["profiles"]


@pytest.mark.slow
def test_a_read_only_out_is_one_line_before_the_search(tmp_path):
    home = Path(tempfile.mkdtemp(prefix="sagellm-rec-"))  # outside pytest's folder, which only root may enter
    try:
        home.chmod(0o755)
        (home / "ro").mkdir(mode=0o555)
        slo = slo_file(home, "rules:\n  - {metric: latency_ms_per_token.p50, max: 60}\n")
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []

        result = subprocess.run([*drop, str(SAGELLM), "recommend", "--model", "llama2-7b", "--concurrency", "16",
                                 "--thresholds", str(slo), "--families", "g5", "--out", "ro/rec"], cwd=home, capture_output=True, text=True,
                                timeout=120, check=False, env={**os.environ, "HOME": str(home)})

        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [("sagellm: error: --out: ro/rec: cannot write in ro (permission "
                                              "denied); choose a writable folder")]
        assert list((home / "ro").iterdir()) == []
    finally:
        shutil.rmtree(home)
