"""Per-region SageMaker facts: which catalog instance types a region offers for hosting, and their prices.

Both come from package data, each row with its source (data/README.md): `offerings.csv` (the SageMaker
hosting instance types per region of the AWS Price List, as cfn-lint ships them) and `prices.csv` (on-demand
prices, with their currency, date and source). A team's own prices (a discount, a private offer) replace the
catalog's from the CSV file that SAGELLM_PRICES names (docs/regions.md).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from sagellm.errors import InputError

PRICES_ENV = "SAGELLM_PRICES"
# The region whose list ranks instance types where a region has no price of its own (`rank_price`).
LIST_REGION = "us-east-1"
# Where offerings.csv comes from (data/README.md has the file path), as messages name it.
OFFERINGS_SOURCE = "the AWS Price List's SageMaker hosting types, as cfn-lint 1.58.0 ships them"
PRICE_COLUMNS = ("instance_type", "region", "per_h", "currency", "date", "source")


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
def _prices(override: str | None) -> dict[tuple[str, str], Price]:
    table = _parse(csv.DictReader(_text("prices.csv").splitlines()), "catalog prices.csv")
    if override:
        path = Path(override).expanduser()
        where = f"{PRICES_ENV}={override}"
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"{where}: cannot read it ({exc.strerror}); name a CSV file with columns "
                             f"{','.join(PRICE_COLUMNS)}") from None
        table |= _parse(csv.DictReader(text.splitlines()), where)
    return table


def price(instance_type: str, region: str) -> Price | None:
    """The region's own price of an instance type (the team's file first), or None where none is known."""
    return _prices(os.environ.get(PRICES_ENV) or None).get((instance_type, region))


def rank_price(instance_type: str, region: str) -> float | None:
    """What orders instance types by cost in a region: its own USD price, else us-east-1's list (regional
    prices differ by a similar factor across types, so the order holds); None where neither is known."""
    for p in (price(instance_type, region), price(instance_type, LIST_REGION)):
        if p is not None and p.currency == "USD":
            return p.per_h
    return None


def offered(instance_type: str, region: str) -> bool | None:
    """Whether a region offers a catalog instance type for hosting; None where the data has no list for it."""
    known = offerings().get(region)
    return None if known is None else instance_type in known
