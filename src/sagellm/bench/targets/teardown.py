"""Teardown that never raises: whatever goes wrong, the run still writes its results and names what may be left."""

from __future__ import annotations

from sagellm.bench.targets.target import Target
from sagellm.results.schema import Teardown


def tear_down(target: Target, keep: bool) -> Teardown:
    """Destroy what the target deployed (unless `keep`); any exception becomes a failed Teardown."""
    if not target.deploys:
        return target.teardown()
    if keep:
        return Teardown(status="kept", detail=f"--keep: endpoint {target.endpoint} is still running and billing; "
                        "`sagellm cleanup` deletes it")
    try:
        return target.teardown()
    except Exception as exc:  # noqa: BLE001 - e.g. the control plane unreachable: say so, keep the results
        left = target.may_be_left()
        return Teardown(status="failed", leftovers=left,
                        detail=f"{type(exc).__name__}: {exc}; may be left: "
                               f"{', '.join(left) or 'nothing known'}; delete with `sagellm cleanup`")
