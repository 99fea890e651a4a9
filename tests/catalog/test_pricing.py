"""Regions are real: which instance types each region offers, and prices with their region, date and source."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import cfnlint
import pytest
from price_list_stub import serve

from sagellm.catalog import check_offered, find_model, instances, pricing
from sagellm.errors import InputError
from sagellm.planner import Payload, Shape, predict
from sagellm.profiles import resolve

SAGELLM = Path(sys.executable).with_name("sagellm")
HOSTING = Path(cfnlint.__file__).parent / "data/schemas/extensions/aws_sagemaker_hosting/instancetype_enum.json"
LLAMA2_7B = "meta-llama/Llama-2-7b-hf"


def sagellm(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
                          env=env)


def test_offerings_are_the_installed_cfn_lints_hosting_types_of_the_catalog() -> None:
    hosting = {region: set(v["enum"]) for region, v in json.loads(HOSTING.read_text()).items() if region != "description"}

    assert set(pricing.offerings()) == set(hosting)
    for region, offered in pricing.offerings().items():
        assert offered == {t for t in instances() if t in hosting[region]}, region


def test_the_main_regions_are_covered() -> None:
    main = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1", "ap-southeast-1",
            "ap-southeast-2", "ap-south-1", "cn-north-1", "cn-northwest-1", "us-gov-west-1", "us-gov-east-1")
    assert set(main) <= set(pricing.offerings())
    assert "ml.p5.48xlarge" in pricing.offerings()["us-east-1"]
    assert "ml.p5.48xlarge" not in pricing.offerings()["cn-north-1"]


def test_every_price_row_has_a_currency_a_date_and_a_source() -> None:
    text = (Path(pricing.__file__).parent / "data" / "prices.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert rows and all(r["instance_type"] in instances() for r in rows)
    assert all(r["currency"] in ("USD", "CNY") and r["date"] and r["source"] and float(r["per_h"]) > 0 for r in rows)
    assert len({(r["instance_type"], r["region"]) for r in rows}) == len(rows)


def test_an_instance_a_region_does_not_offer_is_one_line_naming_the_nearest_by_memory() -> None:
    with pytest.raises(InputError) as exc:
        check_offered("ml.p5.48xlarge", "cn-north-1", "--instance")
    [line] = exc.value.messages
    assert line.startswith("--instance: ml.p5.48xlarge is not offered in cn-north-1 (offered there: "
                           "ml.g5.48xlarge, ")  # the most accelerator memory cn-north-1 has: 8 × 24 GB
    assert "AWS Price List" in line
    # A region whose list is not known, and a type outside the catalog, are not refused.
    check_offered("ml.p5.48xlarge", "eusc-de-east-1")
    check_offered("ml.trn1.32xlarge", "cn-north-1")


@pytest.mark.slow
def test_plan_refuses_p5_in_cn_north_1_in_one_line(tmp_path: Path) -> None:
    done = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "p5.48xlarge",
                   "--region", "cn-north-1", cwd=tmp_path)

    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "ml.p5.48xlarge is not offered in cn-north-1 (offered there: ml.g5.48xlarge" in line


@pytest.mark.slow
def test_plan_says_whose_price_it_is_and_unknown_where_the_region_has_none(tmp_path: Path) -> None:
    east = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "g5.2xlarge",
                   "--concurrency", "1,8", "--json", cwd=tmp_path)
    west = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "g5.2xlarge",
                   "--concurrency", "1,8", "--region", "eu-west-1", "--json", cwd=tmp_path)

    assert east.returncode == west.returncode == 0, east.stderr + west.stderr
    price = json.loads(east.stdout)["curve"]["price"]
    assert (price["region"], price["per_h"], price["currency"]) == ("us-east-1", 1.515, "USD")
    assert price["date"] and price["source"]
    curve = json.loads(west.stdout)["curve"]
    assert curve["usd_per_h"] is None and curve["usd_per_1m_tokens_at_max_throughput"] is None
    assert curve["price"] == {"region": "eu-west-1"}
    assert any(n.startswith("cost unknown: no eu-west-1 price of ml.g5.2xlarge (the AWS Price List is off")
               for n in curve["notes"])


def test_a_teams_prices_file_replaces_the_catalogs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "prices.csv"
    mine.write_text("instance_type,region,per_h,currency,date,source\n"
                    "ml.g5.2xlarge,eu-west-1,1.10,USD,2026-11,our enterprise discount\n")
    monkeypatch.setenv(pricing.PRICES_ENV, str(mine))
    g5 = instances()["ml.g5.2xlarge"]

    assert g5.price_per_h("eu-west-1") == pytest.approx(1.10)
    assert g5.price("eu-west-1").source == "our enterprise discount"  # type: ignore[union-attr]
    assert g5.price_per_h("us-east-1") == pytest.approx(1.515)  # the rest stays the catalog's
    shape = Shape(find_model(LLAMA2_7B), g5, 1)
    assert predict(shape, Payload(256, 256), (1,), "eu-west-1").usd_per_h == pytest.approx(1.10)


def test_a_bad_prices_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "prices.csv"
    bad.write_text("instance_type,region,per_h,currency,date,source\nml.g5.2xlarge,eu-west-1,cheap,USD,2026,me\n")
    monkeypatch.setenv(pricing.PRICES_ENV, str(bad))
    with pytest.raises(InputError, match=r"^SAGELLM_PRICES=.* line 2: per_h 'cheap' is not a number$"):
        instances()["ml.g5.2xlarge"].price("eu-west-1")


def test_min_cost_only_picks_an_instance_the_region_offers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # us-east-1's cheapest per token for a 7B model is a G6e, which ap-southeast-1 does not offer: priced there
    # (the Price List, stubbed) at a figure that would win were it offered.
    serve(monkeypatch, tmp_path, "ap-southeast-1", {"ml.g6e.xlarge": 0.01, "ml.g5.2xlarge": 1.9, "ml.g5.xlarge": 1.8})
    east = resolve("min-cost", LLAMA2_7B)
    there = resolve("min-cost", LLAMA2_7B, region="ap-southeast-1")

    assert east.instance_type.startswith("ml.g6e.")
    assert instances()[east.instance_type].offered_in("ap-southeast-1") is False
    assert there.instance_type in pricing.offerings()["ap-southeast-1"]


def test_synth_refuses_a_plan_for_an_instance_the_region_does_not_offer() -> None:
    from aws_cdk import App

    from sagellm.stacks import EndpointStack

    plan = resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge").model_copy(update={"region": "cn-northwest-1"})
    with pytest.raises(InputError, match=r"^plan\.instance_type: ml\.g5\.2xlarge is not offered in cn-northwest-1, "):
        EndpointStack(App(), "S", plan=plan)


def test_recommend_refuses_an_instance_the_region_does_not_offer() -> None:
    from sagellm.recommend.search import instance_types

    with pytest.raises(InputError, match=r"^--instances: ml\.p5\.48xlarge is not offered in cn-north-1 "):
        instance_types(["p5.48xlarge"], region="cn-north-1")
    assert [i.instance_type for i in instance_types(["g5.2xlarge"], region="cn-north-1")] == ["ml.g5.2xlarge"]
