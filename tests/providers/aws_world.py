"""moto's server on 127.0.0.1, and the AWS world fleetctl expects to find there.

``MotoWorld`` creates what the Terraform modules declare (``terraform/modules/
aws-pool`` and ``aws-controller``): subnets tagged with the cluster, one launch
template per GPU pool, the interruption queue and the EventBridge rules that
fill it. The real boto3 client talks to the real moto server over HTTP; moto
delivers ``put_events`` from source ``aws.ec2`` through the rules to the queue,
so a reclaim warning travels the same path as in an account.

Failure injection (``fail_next``) answers chosen calls with an AWS error or an
EC2 Fleet that launched nothing, at the HTTP layer (botocore's ``before-send``
event), so the adapter parses real error responses with the real client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import boto3
import requests
from botocore.awsrequest import AWSResponse
from moto.server import ThreadedMotoServer

from fleetctl.naming import interruption_queue_name, launch_template_name
from providers.aws import EVENT_DETAIL_TYPES, AwsConfig, AwsProvider, boto3_client_factory

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
AMI = "ami-12c6146b"  # one of moto's built-in images
#: moto's us-east-1 zones: us-east-1a = use1-az6, us-east-1c = use1-az2.
ZONES = {"us-east-1a": "use1-az6", "us-east-1c": "use1-az2"}
POOLS = ("a100-40gb", "a100-80gb", "a10g", "h100-80gb", "l4", "t4", "v100-16gb")  # the example policy's


class MotoServer:
    """One moto server per test process; ``reset()`` empties it between tests."""

    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def reset(self) -> None:
        requests.post(f"{self.endpoint}/moto-api/reset", timeout=10).raise_for_status()

    def stop(self) -> None:
        self._server.stop()


@dataclass
class _Injection:
    operation: str
    status: int
    body: bytes
    times: int


@dataclass
class MotoWorld:
    """The cluster's AWS resources in moto, a provider over them, and levers."""

    endpoint: str
    cluster: str = "contract"
    subnets: dict[str, str] = field(default_factory=dict)  # zone id -> subnet id
    queue_url: str = ""
    injections: list[_Injection] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint, **CREDENTIALS)

    def build(self) -> MotoWorld:
        ec2 = self.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        for index, (zone, zone_id) in enumerate(sorted(ZONES.items())):
            subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=zone)["Subnet"]
            ec2.create_tags(Resources=[subnet["SubnetId"]], Tags=[{"Key": "fleetctl:cluster", "Value": self.cluster}])
            self.subnets[zone_id] = subnet["SubnetId"]
        for pool in POOLS:
            ec2.create_launch_template(
                LaunchTemplateName=launch_template_name(self.cluster, pool),
                LaunchTemplateData={"ImageId": AMI, "MetadataOptions": {"HttpTokens": "required"}},
            )
        sqs = self.client("sqs")
        self.queue_url = sqs.create_queue(QueueName=interruption_queue_name(self.cluster))["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"]
        events = self.client("events")
        for index, detail_type in enumerate(EVENT_DETAIL_TYPES):
            name = f"fleetctl-{self.cluster}-{index}"
            events.put_rule(Name=name, EventPattern=json.dumps({"source": ["aws.ec2"], "detail-type": [detail_type]}))
            events.put_targets(Rule=name, Targets=[{"Id": "interruptions", "Arn": queue_arn}])
        return self

    def provider(self, **config: Any) -> AwsProvider:
        factory = boto3_client_factory(endpoint_url=self.endpoint, region_name=REGION, **CREDENTIALS)

        def hooked(service: str, region: str) -> Any:
            client = factory(service, region)
            if not getattr(client, "_fleetctl_hooked", False):
                client.meta.events.register("before-send", self._before_send)
                client.meta.events.register("provide-client-params", self._record)
                client._fleetctl_hooked = True
            return client

        return AwsProvider(AwsConfig(cluster=self.cluster, regions=(REGION,), **config), hooked)

    # ------------------------------------------------------------------ levers

    def put_ec2_event(self, detail_type: str, detail: dict[str, Any], *, at: datetime | None = None) -> None:
        """Put an EC2 event on the default bus, as EC2 itself would."""
        entry = {"Source": "aws.ec2", "DetailType": detail_type, "Detail": json.dumps(detail)}
        if at is not None:
            entry["Time"] = at
        result = self.client("events").put_events(Entries=[entry])
        assert result["FailedEntryCount"] == 0, result

    def reclaim(self, instance_id: str, *, at: datetime | None = None) -> None:
        self.put_ec2_event("EC2 Spot Instance Interruption Warning",
                           {"instance-id": instance_id, "instance-action": "terminate"}, at=at)

    def fail_next(self, operation: str, code: str, message: str = "injected", *, status: int = 400,
                  times: int = 1) -> None:
        """Answer the next ``times`` calls of ``operation`` (e.g. ``CreateFleet``) with an AWS error."""
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
                f"<Message>{message}</Message></Error></Errors><RequestID>injected</RequestID></Response>")
        self.injections.append(_Injection(operation, status, body.encode(), times))

    def empty_fleet_next(self, code: str, message: str = "injected", *, times: int = 1) -> None:
        """Answer the next ``CreateFleet`` like EC2 does when an instant fleet
        got no capacity: HTTP 200, no instances, the reason in ``errorSet``."""
        body = ('<?xml version="1.0" encoding="UTF-8"?><CreateFleetResponse '
                'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>injected</requestId>'
                "<fleetId>fleet-00000000-0000-0000-0000-000000000000</fleetId><errorSet><item>"
                f"<errorCode>{code}</errorCode><errorMessage>{message}</errorMessage><lifecycle>spot</lifecycle>"
                "</item></errorSet><fleetInstanceSet/></CreateFleetResponse>")
        self.injections.append(_Injection("CreateFleet", 200, body.encode(), times))

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body or "")
        for injection in self.injections:
            if injection.times > 0 and f"Action={injection.operation}&" in body + "&":
                injection.times -= 1
                return AWSResponse(request.url, injection.status, {}, _Raw(injection.body))
        return None

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, json.loads(json.dumps(params, default=str))))

    def requests_of(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == operation]


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data

    def read(self, *_: Any) -> bytes:
        return self._data


@contextmanager
def moto_world(server: MotoServer, cluster: str = "contract") -> Iterator[MotoWorld]:
    server.reset()
    yield MotoWorld(server.endpoint, cluster=cluster).build()


NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)
