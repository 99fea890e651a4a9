"""`sagellm instances`: the instance types the catalog knows."""

from __future__ import annotations

import json

from sagellm.cli.app import app
from sagellm.cli.options import Json, Region


@app.command("instances")
def instances_command(region: Region = "us-east-1", json_out: Json = False) -> None:
    """List the instance types sagellm knows: accelerators, memory, interconnect, and in the region whether SageMaker
    offers each and its on-demand price (with its date and source in --json; docs/regions.md)."""
    from dataclasses import asdict

    from sagellm.catalog import instances

    known = list(instances().values())
    if json_out:
        print(json.dumps([{**asdict(i), "region": region, "offered": i.offered_in(region),
                           "price": asdict(pr) if (pr := i.price(region)) else None} for i in known], indent=2))
        return
    from sagellm.render import print_table

    rows = [[i.instance_type, f"{i.n_accelerators} × {i.accelerator}", f"{i.mem_per_accel_gb:g}",
             i.interconnect, str(i.vcpus), f"{i.host_mem_gib:g}",
             "not offered" if i.offered_in(region) is False else
             f"{p:.2f}" if (p := i.price_per_h(region)) is not None else "–"] for i in known]
    print_table(["instance type", "accelerators", "GB each", "interconnect", "vCPUs", "host GiB", f"$/h {region}"],
                rows, right=("GB each", "vCPUs", "host GiB", f"$/h {region}"))
