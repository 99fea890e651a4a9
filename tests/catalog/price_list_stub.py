"""A Price List client stubbed with botocore's Stubber: GetProducts pages in the service's own response shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.stub import Stubber

from sagellm.catalog import price_list

PUBLISHED = "2026-04-30T18:22:01Z"


def product(instance_type: str, region: str, usd: float, component: str = "Hosting",
            currency: str = "USD") -> str:
    """One PriceList item as GetProducts returns it: a JSON string (shape of botocore's GetProducts example)."""
    sku = f"SKU{abs(hash((instance_type, region, component, usd))) % 10**8:08d}"
    return json.dumps({
        "product": {"productFamily": "ML Instance", "sku": sku, "attributes": {
            "servicecode": "AmazonSageMaker", "regionCode": region, "component": component,
            "instanceName": instance_type, "instanceType": f"{instance_type}-{component.lower()}",
            "usagetype": f"EU-Host:{instance_type}", "operation": "RunInstance"}},
        "serviceCode": "AmazonSageMaker",
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
            "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": f"{usd} per hour for {instance_type}", "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                "pricePerUnit": {currency: f"{usd:.10f}"}}},
            "sku": sku, "effectiveDate": "2026-04-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
            "termAttributes": {}}}},
        "version": "20260430182201",
        "publicationDate": PUBLISHED,
    })


def request(region: str, token: str | None = None) -> dict[str, Any]:
    """The GetProducts parameters sagellm sends for a region's hosting prices."""
    return {"ServiceCode": "AmazonSageMaker", "FormatVersion": "aws_v1", "MaxResults": 100,
            "Filters": [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
                        {"Type": "TERM_MATCH", "Field": "component", "Value": "Hosting"}],
            **({"NextToken": token} if token else {})}


def stubbed(pages: list[tuple[dict[str, Any], list[str]]]) -> tuple[Any, Stubber]:
    """A real pricing client (botocore's service model validates every request and response) answering `pages`:
    (request, PriceList items), each page but the last with a NextToken."""
    client = botocore.session.get_session().create_client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    stub = Stubber(client)
    for n, (params, items) in enumerate(pages):
        more = {"NextToken": f"page-{n + 1}"} if n + 1 < len(pages) else {}
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": items, **more}, params)
    stub.activate()
    return client, stub


def serve(monkeypatch: pytest.MonkeyPatch, cache: Path, region: str, usd: dict[str, float]) -> Stubber:
    """Turn the Price List on over a cache of its own, `region`'s one page of hosting prices stubbed."""
    monkeypatch.setenv(price_list.PRICE_LIST_ENV, "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    client, stub = stubbed([(request(region), [product(t, region, p) for t, p in usd.items()])])
    monkeypatch.setattr(price_list, "client", lambda asked: client)
    price_list._listed.cache_clear()
    return stub
