"""Per-region SageMaker facts: which catalog instance types a region offers for hosting, and their prices.

Offerings come from package data (`offerings.csv`: the SageMaker hosting instance types per region of the AWS
Price List, as cfn-lint ships them; data/README.md). A price is, first found: the team's own (a discount, a private
offer: the CSV file SAGELLM_PRICES names), the AWS Price List's for the region (price_list.py: asked when
credentials allow, cached), or the shipped table `prices.csv` (the offline fallback, each row with its date and
source). docs/regions.md says the same for users.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path

from sagellm.catalog import price_list
from sagellm.catalog.price_list import Price
from sagellm.errors import InputError

PRICES_ENV = "SAGELLM_PRICES"
# Where offerings.csv comes from (data/README.md has the file path), as messages name it.
OFFERINGS_SOURCE = "the AWS Price List's SageMaker hosting types, as cfn-lint 1.58.0 ships them"
PRICE_COLUMNS = ("instance_type", "region", "per_h", "currency", "date", "source")


def _text(name: str) -> str:
    return resources.files("sagellm.catalog").joinpath("data", name).read_text()


@cache
def offerings() -> dict[str, frozenset[str]]:
    """Region → the catalog instance types it offers for SageMaker hosting; regions absent are not known."""
    return {r["region"]: frozenset(r["offered"].split()) for r in csv.DictReader(_text("offerings.csv").splitlines())}


def _parse(rows: Iterable[dict[str, str]], where: str) -> dict[tuple[str, str], Price]:
    out = {}
    for n, r in enumerate(rows, 2):
        if missing := [c for c in PRICE_COLUMNS if not (r.get(c) or "").strip()]:
            raise InputError(f"{where} line {n}: no {', '.join(missing)}; every row needs "
                             f"{','.join(PRICE_COLUMNS)}")
        try:
            per_h = float(r["per_h"])
        except ValueError:
            raise InputError(f"{where} line {n}: per_h {r['per_h']!r} is not a number") from None
        if per_h < 0:
            raise InputError(f"{where} line {n}: per_h {per_h} is negative")
        key = (r["instance_type"].strip(), r["region"].strip())
        out[key] = Price(per_h, r["currency"].strip(), key[1], r["date"].strip(), r["source"].strip())
    return out


@cache
def _shipped() -> dict[tuple[str, str], Price]:
    return _parse(csv.DictReader(_text("prices.csv").splitlines()), "catalog prices.csv")


@cache
def _team(override: str) -> dict[tuple[str, str], Price]:
    where = f"{PRICES_ENV}={override}"
    try:
        text = Path(override).expanduser().read_text()
    except OSError as exc:
        raise InputError(f"{where}: cannot read it ({exc.strerror}); name a CSV file with columns "
                         f"{','.join(PRICE_COLUMNS)}") from None
    return _parse(csv.DictReader(text.splitlines()), where)


def price(instance_type: str, region: str) -> Price | None:
    """The region's own price of an instance type: the team's file, the AWS Price List, the shipped table, first
    found; None where none knows one (never another region's)."""

    override = os.environ.get(PRICES_ENV)
    key = (instance_type, region)
    return ((_team(override).get(key) if override else None) or price_list.listed(region).prices.get(instance_type)
            or _shipped().get(key))


def shipped_summary() -> str:
    """What the shipped table holds, in one phrase: its regions and their dates."""
    dates: dict[str, set[str]] = {}
    for (_, region), p in _shipped().items():
        dates.setdefault(region, set()).add(p.date)
    held = "; ".join(f"{r}: {' and '.join(sorted(d))}" for r, d in dates.items())
    return f"the shipped table (prices.csv, {held}; sources in catalog/data/README.md)"


def unknown_why(region: str) -> str:
    """Why a region's price of a type is not known: what the Price List said, and what the shipped table holds."""

    listed = price_list.listed(region)
    if listed.prices:
        return f"{listed.why}, lists none"
    return f"{listed.why}, and {shipped_summary()} has none"


def offered(instance_type: str, region: str) -> bool | None:
    """Whether a region offers a catalog instance type for hosting; None where the data has no list for it."""
    known = offerings().get(region)
    return None if known is None else instance_type in known
