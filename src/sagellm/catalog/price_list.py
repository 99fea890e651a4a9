"""The AWS Price List: a region's SageMaker real-time hosting prices, asked once and kept in the user cache.

One GetProducts query per region (ServiceCode `AmazonSageMaker`, TERM_MATCH on the product attributes `regionCode`
and `component` = `Hosting`), each product's `instanceName` its instance type and its OnDemand price dimension in
`Hrs` its price: the attributes and unit awslabs/llmeter matches for SageMaker real-time endpoints
(`llmeter/callbacks/cost/providers/sagemaker.py` @cada4847, `fetch_sm_hosting_od_price`); `instanceType` there
carries a suffix (`ml.g5.2xlarge-hosting`), so it is not the key. The item's shape (`product.attributes`,
`terms.OnDemand.*.priceDimensions.*.pricePerUnit`, `publicationDate`) is botocore's own GetProducts example
(`botocore/data/pricing/2017-10-15/examples-1.json`); `PriceList` is a list of JSON strings (its service model).

A region's prices are cached in `$XDG_CACHE_HOME/sagellm/prices/<region>.json` (default ~/.cache) with when they
were fetched, and asked again after a week; a failed lookup (no credentials, no network, no permission) is
remembered for an hour, so `plan` does not wait on it each run. SAGELLM_PRICE_LIST=off turns the lookup (and the
cache) off: prices are then the shipped table's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from sagellm.catalog.regions import _botocore_partitions, find_partition

PRICE_LIST_ENV = "SAGELLM_PRICE_LIST"
SOURCE = "AWS Price List, GetProducts AmazonSageMaker component Hosting"
MAX_AGE_S = 7 * 24 * 3600  # list prices change a few times a year; a week-old copy is current enough
RETRY_AFTER_S = 3600  # after a failure: an hour without asking again
MAX_PAGES = 20  # a region's hosting products fill a few pages of 100; more means something is wrong
# Short and once: a price is a nicety beside the plan, never worth a wait (botocore's defaults retry 3-5 times).
CLIENT_CONFIG = {"connect_timeout": 2, "read_timeout": 10, "retries": {"total_max_attempts": 1}}


class NoCredentials(Exception):
    """No AWS credentials were found: nothing was asked."""


@dataclass(frozen=True)
class Price:
    """The on-demand price of one instance for an hour in one region, with where the figure comes from."""

    per_h: float
    currency: str  # USD; CNY in the China regions
    region: str
    date: str  # when the figure was the list price (as precise as its source says)
    source: str

    def label(self) -> str:
        """One line: the amount, whose price it is and from when."""
        return f"{self.currency} {self.per_h:.4g}/h, {self.region} price of {self.date} ({self.source})"


@dataclass(frozen=True)
class Listed:
    """A region's prices from the Price List (empty where none were had), and where they come from or why not."""

    prices: dict[str, Price]
    why: str


def enabled() -> bool:
    """Whether the Price List may be asked (SAGELLM_PRICE_LIST is not off, 0, false or no)."""
    return os.environ.get(PRICE_LIST_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/sagellm/prices` (default ~/.cache/sagellm/prices)."""
    root = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(root) if os.path.isabs(root) else Path.home() / ".cache"  # the XDG spec ignores a relative one
    return base / "sagellm" / "prices"


def listed(region: str) -> Listed:
    """The region's Price List prices: the cache while fresh, else asked once (the cache again if that fails)."""
    if not enabled():
        return Listed({}, f"the AWS Price List is off ({PRICE_LIST_ENV}=off)")
    return _listed(region, cache_dir())


@cache
def _listed(region: str, folder: Path) -> Listed:
    path = folder / f"{region}.json"
    record = _read(path)
    now = time.time()
    fetched, failed = record.get("fetched_s", 0), record.get("failed_s", 0)
    if now - fetched < MAX_AGE_S or now - failed < RETRY_AFTER_S:
        return _from(record)
    try:
        prices = fetch(client(region), region)
    except Exception as exc:  # noqa: BLE001 - any failure means the shipped table, never a traceback in `plan`
        record |= {"failed_s": now, "why": f"not reachable ({_first_line(exc)})"}
    else:
        record = {"fetched_s": now, "prices": prices}
    _write(path, record)
    return _from(record)


def _from(record: dict[str, Any]) -> Listed:
    """The prices of a cache record, labelled with the day they were fetched."""
    day = time.strftime("%Y-%m-%d", time.gmtime(record.get("fetched_s", 0)))
    prices = {t: Price(p["per_h"], p["currency"], p["region"], p["date"], f"{SOURCE}, fetched {day}")
              for t, p in record.get("prices", {}).items()}
    if "why" in record:
        return Listed(prices, f"the AWS Price List was {record['why']}" + (f"; its copy of {day} is used"
                                                                         if prices else ""))
    return Listed(prices, f"the AWS Price List, fetched {day}")


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write(path: Path, record: dict[str, Any]) -> None:
    """Write atomically (two runs at once each see a whole file); a read-only cache only costs a lookup."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if isinstance(exc, NoCredentials) or not text:
        return text[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {text[0][:200]}"


def endpoint_region(region: str) -> str:
    """Where the Price List is served for `region`: its partition's `api.pricing` endpoint in botocore's endpoint
    data (us-east-1, eu-central-1, ap-south-1 for aws; cn-northwest-1 for aws-cn), us-east-1 where the partition
    has none (GovCloud: its prices are in the aws partition's list)."""
    found = find_partition(region)
    for p in _botocore_partitions("endpoints.json"):
        served = list(p["services"].get("api.pricing", {}).get("endpoints", {}))
        if found is not None and p["partition"] == found.name and served:
            return "us-east-1" if "us-east-1" in served else served[0]
    return "us-east-1"


def client(region: str) -> Any:
    """A Price List client for `region`'s prices; an error where no credentials are found (before any request:
    botocore asks the instance metadata service only once, briefly, and not where AWS_EC2_METADATA_DISABLED)."""
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    if session.get_credentials() is None:
        raise NoCredentials("no AWS credentials")
    return session.create_client("pricing", region_name=endpoint_region(region), config=Config(**CLIENT_CONFIG))


def fetch(pricing: Any, region: str) -> dict[str, dict[str, Any]]:
    """Instance type → {per_h, currency, region, date} for `region`'s real-time hosting, from a `pricing` client;
    a type whose products disagree on the price is left out (which one SageMaker bills is not known)."""
    found: dict[str, dict[str, Any]] = {}
    clashes: set[str] = set()
    token: dict[str, str] = {}
    for _ in range(MAX_PAGES):
        page = pricing.get_products(ServiceCode="AmazonSageMaker", FormatVersion="aws_v1", MaxResults=100, Filters=[
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
            {"Type": "TERM_MATCH", "Field": "component", "Value": "Hosting"},
        ], **token)
        for text in page.get("PriceList", []):
            row = _hosting_price(json.loads(text), region)
            if row is None:
                continue
            name, price = row
            if found.setdefault(name, price) != price:
                clashes.add(name)
        if not page.get("NextToken"):
            break
        token = {"NextToken": page["NextToken"]}
    return {name: p for name, p in found.items() if name not in clashes}


def _hosting_price(item: dict[str, Any], region: str) -> tuple[str, dict[str, Any]] | None:
    """(instance type, price) of one Price List product, or None where it is not one hourly hosting price."""
    attributes = item.get("product", {}).get("attributes", {})
    name = attributes.get("instanceName", "")
    if attributes.get("component") != "Hosting" or attributes.get("regionCode") != region or not name.startswith(
            "ml."):
        return None
    hourly = [d for term in item.get("terms", {}).get("OnDemand", {}).values()
              for d in term.get("priceDimensions", {}).values() if d.get("unit", "").lower() == "hrs"]
    if len(hourly) != 1:
        return None
    per_unit: dict[str, str] = hourly[0].get("pricePerUnit", {})
    currency = "USD" if "USD" in per_unit else next(iter(per_unit), "")  # CNY in the China regions
    try:
        per_h = float(per_unit[currency])
    except (KeyError, ValueError):
        return None
    date = str(item.get("publicationDate", ""))[:10] or "unknown date"
    return (name, {"per_h": per_h, "currency": currency, "region": region, "date": date}) if per_h > 0 else None
