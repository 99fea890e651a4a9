"""LocalAws: moto server on loopback with the sagellm extensions (no CDK CLI here: templates by hand)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from bench_helpers import SAGELLM, free_port, wait_for
from sagellm.aws.local import LocalAws, cannot_listen
from sagellm.emulator.process import port_is_free

# Each test drives the moto server (one per module): over a second each, so `make test-fast` leaves them out.
pytestmark = pytest.mark.slow

TAGS = [{"Key": "sagellm:profile", "Value": "replicas"}]
ROLE = "arn:aws:iam::123456789012:role/sagellm-test"


@pytest.fixture
def aws(server: LocalAws) -> LocalAws:
    server.reset()
    return server


def endpoint_template(instance_type: str = "ml.p4d.24xlarge") -> dict[str, Any]:
    """An inference-component endpoint scaled on copy count: every resource moto lacks or rejects."""
    component_id = {
        "Fn::Join": ["", ["inference-component/", {"Fn::GetAtt": ["Component", "InferenceComponentName"]}]]
    }
    return {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": ROLE,
                    "PrimaryContainer": {"Image": "tgi:latest"},
                    "Tags": TAGS,
                },
            },
            # No ModelName on the variant: the models come as inference components.
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ExecutionRoleArn": ROLE,
                    "Tags": TAGS,
                    "ProductionVariants": [
                        {
                            "VariantName": "AllTraffic",
                            "InstanceType": instance_type,
                            "InitialInstanceCount": 1,
                        }
                    ],
                },
            },
            "Endpoint": {
                "Type": "AWS::SageMaker::Endpoint",
                "Properties": {
                    "EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]},
                    "Tags": TAGS,
                },
            },
            "Component": {
                "Type": "AWS::SageMaker::InferenceComponent",
                "Properties": {
                    "InferenceComponentName": "llama2-13b",
                    "VariantName": "AllTraffic",
                    "Tags": TAGS,
                    "EndpointName": {"Fn::GetAtt": ["Endpoint", "EndpointName"]},
                    "Specification": {
                        "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                        "ComputeResourceRequirements": {
                            "NumberOfAcceleratorDevicesRequired": 2,
                            "MinMemoryRequiredInMb": 1024,
                        },
                    },
                    "RuntimeConfig": {"CopyCount": 4},
                },
            },
            "Target": {
                "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
                "Properties": {
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": component_id,
                    "MinCapacity": 1,
                    "MaxCapacity": 8,
                    "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
                    "RoleARN": ROLE,
                },
            },
            "Policy": {
                "Type": "AWS::ApplicationAutoScaling::ScalingPolicy",
                "Properties": {
                    "PolicyName": "per-copy",
                    "PolicyType": "TargetTrackingScaling",
                    "ScalingTargetId": {"Ref": "Target"},
                    "TargetTrackingScalingPolicyConfiguration": {
                        "TargetValue": 4.0,
                        "PredefinedMetricSpecification": {
                            "PredefinedMetricType": (
                                "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
                            )
                        },
                    },
                },
            },
            "CDKMetadata": {"Type": "AWS::CDK::Metadata", "Properties": {"Analytics": "v2:deflate64:xyz"}},
        },
        "Outputs": {
            "EndpointName": {"Value": {"Fn::GetAtt": ["Endpoint", "EndpointName"]}},
            "ComponentArn": {"Value": {"Ref": "Component"}},
            "PolicyArn": {"Value": {"Fn::GetAtt": ["Policy", "Arn"]}},
        },
    }


def create_stack(aws: LocalAws, name: str, template: dict[str, Any]) -> dict[str, Any]:
    cfn = aws.client("cloudformation")
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template), Tags=TAGS)
    return cfn.describe_stacks(StackName=name)["Stacks"][0]


def test_serves_on_localhost_and_stop_releases_port_and_thread_and_state(aws: LocalAws) -> None:
    port = aws.port
    assert aws.endpoint_url == f"http://localhost:{port}"
    assert aws.client("sts").get_caller_identity()["Account"] == "123456789012"
    create_stack(aws, "first", endpoint_template())

    aws.stop()
    try:
        assert cannot_listen(port) is None  # a reason if the listening socket were still open
        assert not [t for t in threading.enumerate() if t.name == "sagellm-moto"]
    finally:
        aws.start()  # the module's other tests share this server
    assert aws.leftovers() == {}


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
def test_a_stack_reads_its_template_url_on_any_loopback_spelling(aws: LocalAws, host: str) -> None:
    # The CDK CLI uploads the template to the bootstrap bucket, then creates the stack from its URL on the endpoint
    # it was given (path-style for an IP address): moto took "127" of 127.0.0.1 for the bucket (NoSuchBucket).
    # The server listens on 127.0.0.1 only, so [::1] is a URL's spelling here, sent through 127.0.0.1.
    url = f"http://{host if host != '[::1]' else '127.0.0.1'}:{aws.port}"
    s3, cfn = (aws.session().client(service, endpoint_url=url) for service in ("s3", "cloudformation"))
    s3.create_bucket(Bucket="cdk-hnb659fds-assets-123456789012-us-east-1")
    template = {"Resources": {"Model": endpoint_template()["Resources"]["Model"]}}
    s3.put_object(Bucket="cdk-hnb659fds-assets-123456789012-us-east-1", Key="stack.json", Body=json.dumps(template))
    cfn.create_stack(StackName="from-url", TemplateURL=f"http://{host}:{aws.port}/"
                     "cdk-hnb659fds-assets-123456789012-us-east-1/stack.json")
    assert cfn.describe_stacks(StackName="from-url")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
    assert len(aws.client("sagemaker").list_models()["Models"]) == 1
    with pytest.raises(ClientError, match="NoSuchKey"):
        cfn.create_stack(StackName="missing", TemplateURL=f"http://{host}:{aws.port}/"
                         "cdk-hnb659fds-assets-123456789012-us-east-1/missing.json")


def test_refuses_a_second_server_in_the_same_process(aws: LocalAws) -> None:
    second = LocalAws()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            second.start()
    finally:
        second.stop()  # had it started, the next module's server could not


def test_child_env_points_at_server_and_drops_the_users_aws_settings(aws: LocalAws) -> None:
    env = aws.env(
        {"PATH": "/bin", "AWS_PROFILE": "prod", "AWS_SESSION_TOKEN": "real", "CDK_DEFAULT_ACCOUNT": "1"}
    )
    assert env["AWS_ENDPOINT_URL"] == aws.endpoint_url
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    assert not {"AWS_PROFILE", "AWS_SESSION_TOKEN", "CDK_DEFAULT_ACCOUNT"} & env.keys()
    assert env["PATH"] == "/bin"


def test_cloudformation_creates_and_deletes_the_resources_moto_lacks(aws: LocalAws) -> None:
    stack = create_stack(aws, "replicas", endpoint_template())

    assert stack["StackStatus"] == "CREATE_COMPLETE"
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    sm, aas = aws.client("sagemaker"), aws.client("application-autoscaling")
    component = sm.describe_inference_component(InferenceComponentName="llama2-13b")
    assert component["InferenceComponentArn"] == outputs["ComponentArn"]
    assert component["EndpointName"] == outputs["EndpointName"]
    assert component["RuntimeConfig"] == {"DesiredCopyCount": 4, "CurrentCopyCount": 4}
    assert (
        component["Specification"]["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"] == 2
    )
    assert sm.list_tags(ResourceArn=component["InferenceComponentArn"])["Tags"] == TAGS
    [target] = aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["ResourceId"], target["MinCapacity"], target["MaxCapacity"]) == (
        "inference-component/llama2-13b",
        1,
        8,
    )
    [policy] = aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    assert policy["PolicyARN"] == outputs["PolicyArn"]
    assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 4.0
    assert set(aws.leftovers()) == {
        "stacks",
        "endpoints",
        "endpoint_configs",
        "models",
        "inference_components",
        "scalable_targets",
        "scaling_policies",
    }

    aws.client("cloudformation").delete_stack(StackName="replicas")

    assert aws.leftovers() == {}


def test_failed_resource_rolls_back_and_names_itself_in_the_events(aws: LocalAws) -> None:
    stack = create_stack(aws, "broken", endpoint_template(instance_type="ml.bogus.xlarge"))

    assert stack["StackStatus"] == "ROLLBACK_COMPLETE"
    assert "Outputs" not in stack
    events = aws.client("cloudformation").describe_stack_events(StackName="broken")["StackEvents"]
    failed = [e for e in events if e["ResourceStatus"] == "CREATE_FAILED"]
    assert [(e["LogicalResourceId"], e["ResourceType"]) for e in failed] == [
        ("Config", "AWS::SageMaker::EndpointConfig")
    ]
    assert "ml.bogus.xlarge" in failed[0]["ResourceStatusReason"]
    # The model created before the failure is gone; only the empty stack remains, as in CloudFormation.
    assert aws.leftovers() == {"stacks": ["broken"]}
    aws.client("cloudformation").delete_stack(StackName=stack["StackId"])
    aws.client("cloudformation").describe_stacks(StackName=stack["StackId"])  # must not re-create anything
    assert aws.leftovers() == {}


@pytest.mark.parametrize(
    "instance_type", ["ml.g5.12xlarge", "ml.g6e.48xlarge", "ml.p5.48xlarge", "ml.inf2.xlarge"]
)
def test_accepts_newer_instance_types(aws: LocalAws, instance_type: str) -> None:
    sm = aws.client("sagemaker")
    sm.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "InstanceType": instance_type, "InitialInstanceCount": 1}
        ],
    )
    assert (
        sm.describe_endpoint_config(EndpointConfigName="c")["ProductionVariants"][0]["InstanceType"]
        == instance_type
    )


def test_inference_component_api_creates_lists_and_deletes(aws: LocalAws) -> None:
    sm = aws.client("sagemaker")
    sm.create_model(ModelName="m", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": "tgi"})
    sm.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "InstanceType": "ml.g5.12xlarge", "InitialInstanceCount": 1}
        ],
    )
    sm.create_endpoint(EndpointName="e", EndpointConfigName="c")
    spec = {
        "ModelName": "m",
        "ComputeResourceRequirements": {
            "NumberOfAcceleratorDevicesRequired": 1,
            "MinMemoryRequiredInMb": 512,
        },
    }
    with pytest.raises(ClientError, match="Could not find endpoint"):
        sm.create_inference_component(
            InferenceComponentName="x",
            EndpointName="nope",
            VariantName="AllTraffic",
            Specification=spec,
            RuntimeConfig={"CopyCount": 1},
        )

    for name in ("a", "b"):
        sm.create_inference_component(
            InferenceComponentName=name,
            EndpointName="e",
            VariantName="AllTraffic",
            Specification=spec,
            RuntimeConfig={"CopyCount": 2},
        )

    listed = sm.list_inference_components(EndpointNameEquals="e")["InferenceComponents"]
    assert sorted(c["InferenceComponentName"] for c in listed) == ["a", "b"]
    assert {c["InferenceComponentStatus"] for c in listed} == {"InService"}
    assert sm.list_inference_components(EndpointNameEquals="other")["InferenceComponents"] == []
    sm.delete_inference_component(InferenceComponentName="a")
    with pytest.raises(ClientError, match="Could not find inference component"):
        sm.describe_inference_component(InferenceComponentName="a")
    assert [c["InferenceComponentName"] for c in sm.list_inference_components()["InferenceComponents"]] == [
        "b"
    ]


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_local_aws_command_serves_a_bootstrapped_account_until_sigterm_even_with_sigint_ignored(
        tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "local-aws.log"
    with log.open("w") as sink:
        # `trap "" INT; exec`: started like a background job, which ignores SIGINT.
        proc = subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$0" "$@"', SAGELLM, "local-aws", "--port",
                                 str(port)], stdout=sink, stderr=sink, stdin=subprocess.DEVNULL, cwd=tmp_path)
        try:
            wait_for(lambda: "Ctrl-C to stop" in log.read_text() or proc.poll() is not None, 300,
                     "local-aws to be ready", poll_s=0.5)
            assert proc.poll() is None, log.read_text()
            cfn = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1") \
                .client("cloudformation", endpoint_url=f"http://localhost:{port}")
            assert [s["StackName"] for s in cfn.describe_stacks()["Stacks"]] == ["CDKToolkit"]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert f"export AWS_ENDPOINT_URL=http://localhost:{port}" in log.read_text()
    assert "Traceback" not in log.read_text()
    assert port_is_free("127.0.0.1", port)


def _time_wait_port() -> int:
    """A loopback port whose only socket is a closed connection in TIME_WAIT (its server side closed first), as
    after a server there stopped with clients connected."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server side closes first: its end waits in TIME_WAIT on `port`
            client.recv(1)
    return port


def test_a_port_held_only_by_closing_connections_can_be_listened_on_and_a_listener_cannot() -> None:
    port = _time_wait_port()
    # a bind without SO_REUSEADDR, as the port check once probed, is refused there
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))
    assert cannot_listen(port) is None
    # werkzeug's server (socketserver's allow_reuse_address) does listen there, and then the port is taken
    with socket.create_server(("127.0.0.1", port), reuse_port=False) as server:
        assert server.getsockname()[1] == port
        assert cannot_listen(port) == "Address already in use"


def test_local_aws_command_on_a_busy_port_is_bad_input_in_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([SAGELLM, "local-aws", "--port", str(port)], capture_output=True, text=True,
                              timeout=120, check=False)

    assert done.returncode == 2
    assert done.stderr.strip() == f"sagellm: error: --port: {port}: Address already in use; pick a free port"
