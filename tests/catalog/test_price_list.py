"""Prices from the AWS Price List (GetProducts, stubbed with botocore's Stubber), cached, and the shipped fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import botocore.session
import pytest
from price_list_stub import PUBLISHED, product, request, serve, stubbed

from sagellm.catalog import find_model, instances, price_list, pricing
from sagellm.errors import InputError
from sagellm.planner import Payload, Shape, predict
from sagellm.profiles import resolve

SAGELLM = Path(sys.executable).with_name("sagellm")
LLAMA2_7B = "meta-llama/Llama-2-7b-hf"


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS credentials anywhere botocore looks, and no instance metadata service to wait on."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_fetch_reads_each_hosting_price_of_the_region_over_every_page() -> None:
    first = [product("ml.g5.2xlarge", "eu-west-1", 1.6),
             product("ml.g5.2xlarge", "eu-west-1", 2.2, component="Training"),  # not hosting
             product("ml.g6.xlarge", "eu-west-1", 1.3)]
    second = [product("ml.g5.12xlarge", "eu-west-1", 7.9),
              product("ml.g6.xlarge", "eu-west-1", 1.3),  # the same price twice: kept
              product("ml.p4d.24xlarge", "eu-west-1", 30.0), product("ml.p4d.24xlarge", "eu-west-1", 31.0)]
    client, stub = stubbed([(request("eu-west-1"), first), (request("eu-west-1", "page-1"), second)])

    found = price_list.fetch(client, "eu-west-1")

    stub.assert_no_pending_responses()  # both pages asked, with the filters the service model accepts
    assert {t: p["per_h"] for t, p in found.items()} == {"ml.g5.2xlarge": 1.6, "ml.g6.xlarge": 1.3,
                                                           "ml.g5.12xlarge": 7.9}  # p4d's two prices: neither
    assert found["ml.g5.2xlarge"] == {"per_h": 1.6, "currency": "USD", "region": "eu-west-1",
                                      "date": PUBLISHED[:10]}


def test_china_prices_keep_their_currency_and_are_not_a_usd_cost() -> None:
    client, _ = stubbed([(request("cn-north-1"), [product("ml.g5.2xlarge", "cn-north-1", 15.2, currency="CNY")])])

    found = price_list.fetch(client, "cn-north-1")

    assert (found["ml.g5.2xlarge"]["currency"], found["ml.g5.2xlarge"]["per_h"]) == ("CNY", 15.2)


def test_the_price_list_is_asked_where_botocore_serves_it() -> None:
    assert price_list.endpoint_region("eu-west-1") == "us-east-1"
    assert price_list.endpoint_region("ap-southeast-2") == "us-east-1"
    assert price_list.endpoint_region("cn-north-1") == "cn-northwest-1"  # the aws-cn partition's own
    assert price_list.endpoint_region("us-gov-west-1") == "us-east-1"  # aws-us-gov serves none


def test_the_regions_price_comes_from_the_price_list_and_is_cached_with_its_date(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = serve(monkeypatch, tmp_path, "eu-west-1", {"ml.g5.2xlarge": 1.6})
    g5 = instances()["ml.g5.2xlarge"]

    price = g5.price("eu-west-1")

    stub.assert_no_pending_responses()
    assert price is not None and (price.per_h, price.region, price.date) == (1.6, "eu-west-1", PUBLISHED[:10])
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert price.source == f"AWS Price List, GetProducts AmazonSageMaker component Hosting, fetched {today}"
    cached = json.loads((tmp_path / "sagellm" / "prices" / "eu-west-1.json").read_text())
    assert cached["prices"]["ml.g5.2xlarge"]["per_h"] == 1.6 and time.time() - cached["fetched_s"] < 60
    # The next run reads the cache and asks nothing (the stub has no response left to give).
    price_list._listed.cache_clear()
    assert g5.price_per_h("eu-west-1") == 1.6
    # A team's own figure still wins; us-east-1, absent from this list, keeps the shipped table's.
    assert g5.price_per_h("us-east-1") == pytest.approx(1.515)


def test_no_credentials_is_the_shipped_table_at_once_and_the_note_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_credentials: None) -> None:
    monkeypatch.setenv(price_list.PRICE_LIST_ENV, "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    price_list._listed.cache_clear()
    g5 = instances()["ml.g5.2xlarge"]

    # No credentials: no client is made, so nothing is sent (and no metadata service asked: the fixture).
    monkeypatch.setattr(botocore.session.Session, "create_client",
                        lambda *args, **kwargs: pytest.fail("a client was made with no credentials"))
    assert g5.price("eu-west-1") is None
    assert g5.price_per_h("us-east-1") == pytest.approx(1.515)  # the shipped table's
    curve = predict(Shape(find_model(LLAMA2_7B), g5, 1), Payload(256, 256), (1,), "eu-west-1")
    [note] = [n for n in curve.notes if n.startswith("cost unknown")]
    assert note.startswith("cost unknown: no eu-west-1 price of ml.g5.2xlarge (the AWS Price List was not "
                           "reachable (no AWS credentials), and the shipped table (prices.csv, us-east-1: ")
    assert "; us-west-2: 2023; sources in catalog/data/README.md) has none; give your own with SAGELLM_PRICES" in note
    # The failure is remembered for an hour: the next run does not try again.
    monkeypatch.setattr(price_list, "client", lambda region: pytest.fail("asked again within the hour"))
    price_list._listed.cache_clear()
    assert "no AWS credentials" in price_list.listed("eu-west-1").why


def test_a_stale_copy_is_asked_again_and_used_when_asking_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_credentials: None) -> None:
    monkeypatch.setenv(price_list.PRICE_LIST_ENV, "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    old = time.time() - price_list.MAX_AGE_S - 60
    folder = tmp_path / "sagellm" / "prices"
    folder.mkdir(parents=True)
    (folder / "eu-west-1.json").write_text(json.dumps({"fetched_s": old, "prices": {"ml.g5.2xlarge": {
        "per_h": 1.5, "currency": "USD", "region": "eu-west-1", "date": "2026-01-02"}}}))
    price_list._listed.cache_clear()

    listed = price_list.listed("eu-west-1")

    day = time.strftime("%Y-%m-%d", time.gmtime(old))
    assert listed.prices["ml.g5.2xlarge"].per_h == 1.5
    assert listed.why == ("the AWS Price List was not reachable (no AWS credentials); its copy of "
                          f"{day} is used")
    assert listed.prices["ml.g5.2xlarge"].source.endswith(f"fetched {day}")


def test_off_is_the_shipped_table_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(price_list, "client", lambda region: pytest.fail("asked while off"))

    assert os.environ[price_list.PRICE_LIST_ENV] == "off"  # the tests' default (conftest.py)
    assert instances()["ml.g5.2xlarge"].price("eu-west-1") is None
    assert pricing.unknown_why("eu-west-1").startswith("the AWS Price List is off (SAGELLM_PRICE_LIST=off), and "
                                                        "the shipped table (prices.csv, ")


def test_min_cost_picks_by_the_regions_own_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # us-east-1's list makes a G6e the cheapest per token for a 7B model; eu-west-1's (stubbed) makes a G5.
    serve(monkeypatch, tmp_path, "eu-west-1", {"ml.g5.2xlarge": 0.40, "ml.g6e.xlarge": 9.0, "ml.g6.xlarge": 5.0})

    assert resolve("min-cost", LLAMA2_7B).instance_type.startswith("ml.g6e.")
    assert resolve("min-cost", LLAMA2_7B, region="eu-west-1").instance_type == "ml.g5.2xlarge"


def test_min_cost_without_the_regions_prices_is_one_line_saying_why() -> None:
    with pytest.raises(InputError) as exc:
        resolve("min-cost", LLAMA2_7B, region="eu-west-1")
    [line] = exc.value.messages
    assert line.startswith("instance_type: auto: no eu-west-1 price to choose an instance type by: the AWS Price "
                           "List is off (SAGELLM_PRICE_LIST=off), and the shipped table (prices.csv, ")
    assert line.endswith("name one (--instance, -c instance=…), give prices (SAGELLM_PRICES) or allow the AWS "
                         "Price List (pricing:GetProducts; docs/regions.md)")


def test_recommend_searches_only_what_the_region_prices_at_its_own_price(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagellm.recommend import Load, Space, instance_types, search
    from sagellm.results.gate import Rule

    serve(monkeypatch, tmp_path, "eu-west-1", {"ml.g5.12xlarge": 8.0})
    load = Load(concurrency=4)
    space = Space(find_model(LLAMA2_7B), Payload(256, 128), instance_types(["g5.2xlarge", "g5.12xlarge"],
                  region="eu-west-1"), engines=("tgi",), region="eu-west-1")

    found = search(space, load, (Rule(metric="itl_ms.p50", where=load.name, max=200),))

    assert {c.config.instance_type for c in found.candidates} == {"ml.g5.12xlarge"}
    assert all(c.usd_per_h == pytest.approx(8.0 * c.instance_count) for c in found.candidates)
    [note] = [n for n in found.notes if n.startswith("ml.g5.2xlarge")]
    assert note.startswith("ml.g5.2xlarge: not searched (no eu-west-1 price: the AWS Price List, fetched ")
    assert "lists none" in note


@pytest.mark.slow
def test_plan_shows_the_regions_price_from_the_price_list_and_the_fallback_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_credentials: None) -> None:
    serve(monkeypatch, tmp_path, "eu-west-1", {"ml.g5.2xlarge": 1.6})
    assert instances()["ml.g5.2xlarge"].price_per_h("eu-west-1") == 1.6  # fetched (stubbed) into the cache
    # The plan reads that cache; were it to ask, it would ask a closed port on loopback, never AWS.
    env = {**os.environ, "AWS_ENDPOINT_URL_PRICING": "http://127.0.0.1:9"}
    args = [str(SAGELLM), "plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "g5.2xlarge",
            "--concurrency", "1,8", "--region", "eu-west-1"]

    def run(*more: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*args, *more], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              check=False, env={**env, **extra})

    shown, offline, people = run("--json"), run("--json", SAGELLM_PRICE_LIST="off"), run()

    assert shown.returncode == offline.returncode == people.returncode == 0, shown.stderr + offline.stderr
    curve = json.loads(shown.stdout)["curve"]
    assert curve["usd_per_h"] == 1.6 and curve["price"]["region"] == "eu-west-1"
    assert curve["price"]["source"].startswith("AWS Price List, GetProducts AmazonSageMaker component Hosting")
    assert "eu-west-1 price of 2026-04-30 (AWS Price List" in people.stdout
    fallback = json.loads(offline.stdout)["curve"]
    assert fallback["usd_per_h"] is None
    assert any(n.startswith("cost unknown: no eu-west-1 price of ml.g5.2xlarge (the AWS Price List is off") and
               "the shipped table (prices.csv, us-east-1: " in n and "us-west-2: 2023" in n
               for n in fallback["notes"])
