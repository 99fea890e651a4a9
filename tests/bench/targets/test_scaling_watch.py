"""A SageMaker endpoint's scaling as its control plane shows it: botocore's Stubber checks every call and reply
against the service models, so the names and fields are the real API's (moto accepting them would prove nothing)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sagellm.bench.targets.scaling_watch import COMPONENT_COPIES, ScalingWatch
from sagellm.clock import REAL, Clock

ENDPOINT, COMPONENT = "ep", "ep-llama"


def clients() -> tuple[Any, Any]:
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    return session.client("sagemaker"), session.client("application-autoscaling")


def endpoint(desired: int, current: int) -> dict[str, Any]:
    return {"EndpointName": ENDPOINT, "EndpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{ENDPOINT}",
            "EndpointStatus": "InService", "CreationTime": datetime(2026, 1, 1, tzinfo=UTC),
            "LastModifiedTime": datetime(2026, 1, 1, tzinfo=UTC),
            "ProductionVariants": [{"VariantName": "AllTraffic", "DesiredInstanceCount": desired,
                                    "CurrentInstanceCount": current}]}


def component(desired: int, current: int) -> dict[str, Any]:
    return {"InferenceComponentName": COMPONENT,
            "InferenceComponentArn": f"arn:aws:sagemaker:us-east-1:123456789012:inference-component/{COMPONENT}",
            "EndpointName": ENDPOINT, "EndpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{ENDPOINT}",
            "CreationTime": datetime(2026, 1, 1, tzinfo=UTC), "LastModifiedTime": datetime(2026, 1, 1, tzinfo=UTC),
            "InferenceComponentStatus": "InService",
            "RuntimeConfig": {"DesiredCopyCount": desired, "CurrentCopyCount": current}}


def test_copies_and_instances_are_sampled_and_scaling_activities_placed_on_the_watchs_clock() -> None:
    sm, aas = clients()
    watch = ScalingWatch(sm, aas, ENDPOINT, COMPONENT, clock=REAL)
    watch.origin = 1_000.0  # the watch's clock: seconds since then
    with Stubber(sm) as sm_stub, Stubber(aas) as aas_stub:
        for (d_inst, c_inst), (d_copy, c_copy) in [((1, 1), (1, 1)), ((1, 1), (1, 1)), ((2, 1), (2, 1)),
                                                    ((2, 2), (2, 2))]:
            sm_stub.add_response("describe_endpoint", endpoint(d_inst, c_inst), {"EndpointName": ENDPOINT})
            sm_stub.add_response("describe_inference_component", component(d_copy, c_copy),
                                 {"InferenceComponentName": COMPONENT})
        activity = {"ActivityId": "a1", "ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{COMPONENT}",
                    "ScalableDimension": COMPONENT_COPIES, "Description": "Setting desired copy count to 2.",
                    "Cause": "monitor alarm TargetTracking-… in state ALARM triggered policy sagellm-target-tracking",
                    "StartTime": datetime.fromtimestamp(1_250.0, UTC), "StatusCode": "Successful"}
        earlier = {**activity, "ActivityId": "a0", "StartTime": datetime.fromtimestamp(900.0, UTC)}
        aas_stub.add_response("describe_scaling_activities", {"ScalingActivities": [activity, earlier]},
                              {"ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{COMPONENT}",
                               "ScalableDimension": COMPONENT_COPIES})
        for wall in (1_010.0, 1_020.0, 1_260.0):
            watch.sample(wall)
        state = watch.state(1_500.0)
        sm_stub.assert_no_pending_responses()
        aas_stub.assert_no_pending_responses()
    assert state["observed"] is True and (state["desired"], state["in_service"], state["instances"]) == (2, 2, 2)
    # A sample only where something changed; the activity from before the watch is another run's.
    assert [(e["t_s"], e["kind"], e["desired"], e["in_service"], e["instances"]) for e in state["events"]] == [
        (10.0, "observed", 1, 1, 1), (250.0, "activity", 1, 1, 1), (260.0, "observed", 2, 1, 1),
        (500.0, "observed", 2, 2, 2)]
    assert state["events"][1]["detail"] == "Successful: Setting desired copy count to 2."


def test_a_failing_control_plane_skips_a_sample_and_never_fails_the_bench() -> None:
    sm, aas = clients()
    watch = ScalingWatch(sm, aas, ENDPOINT, None)
    with Stubber(sm) as sm_stub, Stubber(aas) as aas_stub:
        sm_stub.add_client_error("describe_endpoint", "ThrottlingException", http_status_code=400)
        sm_stub.add_response("describe_endpoint", endpoint(2, 1), {"EndpointName": ENDPOINT})
        aas_stub.add_client_error("describe_scaling_activities", "AccessDeniedException")
        watch.sample()
        assert watch.events == []
        state = watch.state()
    # An instance-based variant: its instances are the capacity (no separate instance count).
    assert (state["desired"], state["in_service"], state["instances"]) == (2, 1, None)
    assert [e["kind"] for e in state["events"]] == ["observed"]


@pytest.mark.parametrize("scale", [1.0, 0.01])
def test_the_watchs_clock_is_on_the_records_time_scale(scale: float) -> None:
    sm, aas = clients()
    watch = ScalingWatch(sm, aas, ENDPOINT, COMPONENT, clock=Clock(scale))
    assert watch.now_s(watch.origin + 3.0) == pytest.approx(3.0 / scale)
