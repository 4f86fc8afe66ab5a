"""The AWS adapter beyond the shared contract: the real boto3 client against
moto's server (catalog, fleets, tags, SQS and EventBridge), errors injected at
the HTTP layer, and botocore's Stubber for the one answer moto cannot give
(spot price history: moto returns a constant 0.00001 dated 2006 and ignores
``InstanceTypes``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fleetctl.model import Interconnect, InterruptionKind, Market, NodeState, Offer
from providers.aws import (
    API_CALLS,
    AwsConfig,
    AwsProvider,
    _state,
    event_to_interruption,
    instance_type_from_api,
    launch_token,
    parse_event,
    translate_code,
)
from providers.base import (
    UNKNOWN_LAUNCH_TIME,
    InsufficientCapacity,
    LaunchRequest,
    NodeNotFound,
    ProviderError,
    QuotaExceeded,
    Throttled,
    UnknownInstanceType,
)
from providers.catalog import instance_types as snapshot_types
from providers.retry import ThrottleRetry
from tests.providers.aws_world import AMI, CREDENTIALS, REGION, MotoWorld, _Injection, moto_world

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)
EC2_XMLNS = 'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"'


@pytest.fixture
def world(moto_server: Any) -> Iterator[MotoWorld]:
    with moto_world(moto_server) as w:
        yield w


@pytest.fixture
def provider(world: MotoWorld) -> AwsProvider:
    return world.provider()


def spot(provider: AwsProvider, type_name: str = "g5.xlarge", zone: str = "use1-az2") -> Offer:
    return next(o for o in provider.offers(NOW)
                if o.instance_type.name == type_name and o.market is Market.SPOT and o.zone == zone)


def on_demand(provider: AwsProvider, type_name: str = "g4dn.xlarge") -> Offer:
    return next(o for o in provider.offers(NOW) if o.instance_type.name == type_name and o.market is Market.ON_DEMAND)


def queue_depth(world: MotoWorld) -> int:
    attrs = world.client("sqs").get_queue_attributes(
        QueueUrl=world.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


# ---------------------------------------------------------------- catalog and prices


def test_gpu_types_from_describe_instance_types_normalise_like_the_snapshot(provider: AwsProvider) -> None:
    listed = {t.name: t for t in provider.instance_types(NOW)}
    shipped = {name: t for (cloud, name), t in snapshot_types().items() if cloud == "aws"}
    common = sorted(set(listed) & set(shipped))
    assert len(common) >= 20, common  # g4dn, g5, g5g, p4d, ... are in both
    for name in common:
        a, b = listed[name], shipped[name]
        assert (a.vcpus, a.gpu_model, a.gpu_count, a.gpu_memory_gib, a.interconnect, a.architecture) == (
            b.vcpus, b.gpu_model, b.gpu_count, b.gpu_memory_gib, b.interconnect, b.architecture), name
        # The API gives nominal memory; the snapshot has nominal memory only for
        # the types in AWS_NOMINAL_MEMORY_GIB and the OS-visible MiB (3-7 % less)
        # for the rest (g6.xlarge: 15.0 vs 16 GiB).
        assert b.memory_gib <= a.memory_gib <= b.memory_gib * 1.08, name


def test_cpu_shapes_are_in_the_catalog_and_other_accelerators_are_not() -> None:
    cpu = {"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192}}
    amd = {**cpu, "InstanceType": "g4ad.xlarge",
           "GpuInfo": {"Gpus": [{"Name": "Radeon Pro V520", "Manufacturer": "AMD", "Count": 1,
                                 "MemoryInfo": {"SizeInMiB": 8192}}]}}
    inferentia = {**cpu, "InstanceType": "inf1.xlarge",
                  "InferenceAcceleratorInfo": {"Accelerators": [{"Count": 1, "Name": "Inferentia"}]}}
    m5 = instance_type_from_api(cpu)
    assert m5 is not None and (m5.vcpus, m5.memory_gib, m5.gpu_model, m5.gpu_count) == (2, 8.0, None, 0)
    assert instance_type_from_api(amd) is None and instance_type_from_api(inferentia) is None


def ec2_type(name: str, vcpus: int, mib: int, *gpus: tuple[str, str, int, int],
             archs: tuple[str, ...] = ("x86_64",), **extra: Any) -> dict[str, Any]:
    """One DescribeInstanceTypes entry as EC2 writes it; each GPU is (name, manufacturer, count, MiB)."""
    info: dict[str, Any] = {"InstanceType": name, "VCpuInfo": {"DefaultVCpus": vcpus},
                            "MemoryInfo": {"SizeInMiB": mib},
                            "ProcessorInfo": {"SupportedArchitectures": list(archs)}, **extra}
    if gpus:
        info["GpuInfo"] = {"Gpus": [{"Name": g, "Manufacturer": m, "Count": n, "MemoryInfo": {"SizeInMiB": size}}
                                    for g, m, n, size in gpus],
                           "TotalGpuMemoryInMiB": sum(n * size for _, _, n, size in gpus)}
    return info


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        # name, vCPUs, memory GiB (MiB / 1024 to 0.1), GPU model, count, GiB per GPU, interconnect, architecture
        (ec2_type("p4d.24xlarge", 96, 1179648, ("A100", "NVIDIA", 8, 40960)),
         ("p4d.24xlarge", 96, 1152.0, "A100-40GB", 8, 40.0, Interconnect.NVLINK, "x86_64")),
        # The name says only "A100": the 80 GiB per GPU picks the 80 GB part.
        (ec2_type("p4de.24xlarge", 96, 1179648, ("A100", "NVIDIA", 8, 81920)),
         ("p4de.24xlarge", 96, 1152.0, "A100-80GB", 8, 80.0, Interconnect.NVLINK, "x86_64")),
        (ec2_type("p5.48xlarge", 192, 2097152, ("H100", "NVIDIA", 8, 81920)),
         ("p5.48xlarge", 192, 2048.0, "H100-80GB", 8, 80.0, Interconnect.NVLINK, "x86_64")),
        # One H100 has no peer: PCIe.
        (ec2_type("p5.4xlarge", 16, 262144, ("H100", "NVIDIA", 1, 81920)),
         ("p5.4xlarge", 16, 256.0, "H100-80GB", 1, 80.0, Interconnect.PCIE, "x86_64")),
        (ec2_type("g5g.xlarge", 4, 8192, ("T4g", "NVIDIA", 1, 16384), archs=("arm64",)),
         ("g5g.xlarge", 4, 8.0, "T4G", 1, 16.0, Interconnect.PCIE, "arm64")),
        # GPU memory is the nominal 24 GiB of an L4, not the 22,888 MiB EC2 reports.
        (ec2_type("g6.12xlarge", 48, 196608, ("L4", "NVIDIA", 4, 22888)),
         ("g6.12xlarge", 48, 192.0, "L4", 4, 24.0, Interconnect.PCIE, "x86_64")),
        # 31,232 MiB is 30.5 GiB; i386 beside x86_64 is x86_64.
        (ec2_type("g3s.xlarge", 4, 31232, ("M60", "NVIDIA", 1, 8192), archs=("i386", "x86_64")),
         ("g3s.xlarge", 4, 30.5, "M60", 1, 8.0, Interconnect.PCIE, "x86_64")),
        # Two GPU entries of one NVIDIA model are counted together.
        (ec2_type("p3.8xlarge", 32, 249856, ("V100", "NVIDIA", 2, 16384), ("V100", "NVIDIA", 2, 16384)),
         ("p3.8xlarge", 32, 244.0, "V100-16GB", 4, 16.0, Interconnect.NVLINK, "x86_64")),
        # A listing without SupportedArchitectures is x86_64.
        ({"InstanceType": "g4dn.xlarge", "VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384},
          "GpuInfo": {"Gpus": [{"Name": "T4", "Manufacturer": "NVIDIA", "Count": 1,
                                "MemoryInfo": {"SizeInMiB": 16384}}]}},
         ("g4dn.xlarge", 4, 16.0, "T4", 1, 16.0, Interconnect.PCIE, "x86_64")),
    ],
    ids=lambda v: v["InstanceType"] if isinstance(v, dict) else "",
)
def test_describe_instance_types_entries_normalise_by_hand(info: dict[str, Any], expected: tuple) -> None:
    t = instance_type_from_api(info)
    assert t is not None and t.provider == "aws"
    assert (t.name, t.vcpus, t.memory_gib, t.gpu_model, t.gpu_count, t.gpu_memory_gib, t.interconnect,
            t.architecture) == expected


def test_describe_instance_types_entries_fleetctl_cannot_sell_are_none_or_cpu() -> None:
    # A GPU outside the vocabulary (B300, RTX PRO 4500), an NVIDIA GPU beside another maker's, other accelerators.
    assert instance_type_from_api(ec2_type("p6-b300.48xlarge", 192, 4194304, ("B300", "NVIDIA", 8, 275040))) is None
    assert instance_type_from_api(ec2_type("g7.2xlarge", 8, 32768, ("RTX PRO 4500", "NVIDIA", 1, 32768))) is None
    assert instance_type_from_api(ec2_type("x.mixed", 8, 32768, ("T4", "NVIDIA", 1, 16384),
                                           ("Radeon Pro V520", "AMD", 1, 8192))) is None
    for key in ("InferenceAcceleratorInfo", "FpgaInfo", "NeuronInfo", "MediaAcceleratorInfo"):
        assert instance_type_from_api(ec2_type("vt1.3xlarge", 12, 24576, **{key: {"Accelerators": [{}]}})) is None
    # A fraction of an L4 (g6f.large: Count 0, an eighth of the GPU's 24 GiB): no whole GPU to count, and no CPU shape
    # either (before: L4 with 0 GPUs, listed among the instance types)
    eighth = {"Name": "L4", "Manufacturer": "NVIDIA", "Count": 0, "MemoryInfo": {"SizeInMiB": 3072},
              "GpuPartitionSize": 0.125}
    assert instance_type_from_api({**ec2_type("g6f.large", 2, 8192), "GpuInfo": {"Gpus": [eighth]}}) is None
    # An accelerator field that is present but empty is no accelerator: a CPU shape, arm64 if it may be.
    cpu = instance_type_from_api(ec2_type("m6g.large", 2, 8192, archs=("arm64",), NeuronInfo={}))
    assert cpu is not None
    assert (cpu.vcpus, cpu.memory_gib, cpu.gpu_model, cpu.gpu_count, cpu.gpu_memory_gib, cpu.interconnect,
            cpu.architecture) == (2, 8.0, None, 0, 0.0, Interconnect.NONE, "arm64")
    # a GPU listed without its memory: the name alone decides (an A100 without a size is the 40 GB part)
    bare = instance_type_from_api({**ec2_type("p4d.24xlarge", 96, 1179648),
                                   "GpuInfo": {"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8}]}})
    assert bare is not None and (bare.gpu_model, bare.gpu_count) == ("A100-40GB", 8)
    # memory to 0.1 GiB: m1.medium's 3,840 MiB (3.75 GiB) is 3.8
    m1 = instance_type_from_api(ec2_type("m1.medium", 1, 3840))
    assert m1 is not None and m1.memory_gib == 3.8
    with pytest.raises(ValueError, match=r"^g5\.xlarge: no VCpuInfo\.DefaultVCpus$"):
        instance_type_from_api({"InstanceType": "g5.xlarge", "MemoryInfo": {"SizeInMiB": 16384}})
    with pytest.raises(ValueError, match=r"^g5\.xlarge: no MemoryInfo\.SizeInMiB$"):
        instance_type_from_api({"InstanceType": "g5.xlarge", "VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {}})
    with pytest.raises(ValueError, match=r"^no InstanceType$"):
        instance_type_from_api({"VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384}})


def test_the_catalog_lists_cpu_shapes_but_only_gpu_shapes_are_sold(provider: AwsProvider) -> None:
    listed = {t.name: t for t in provider.instance_types(NOW)}
    assert listed["m5.large"].gpu_count == 0 and listed["m5.large"].memory_gib == 8.0
    assert listed["m6g.large"].architecture == "arm64"
    assert "inf1.xlarge" not in listed and "g4ad.xlarge" not in listed
    assert all(o.instance_type.gpu_count > 0 for o in provider.offers(NOW))


def test_offers_only_in_zones_the_cluster_has_subnets_in(provider: AwsProvider, world: MotoWorld) -> None:
    zones = {o.zone for o in provider.offers(NOW) if o.zone}
    assert zones == set(world.subnets)  # use1-az2 and use1-az6; the snapshot also prices az4 and az5


def test_spot_prices_come_from_the_api_newest_per_zone_with_the_snapshot_as_fallback() -> None:
    ec2 = boto3.client("ec2", region_name=REGION, **CREDENTIALS)
    stub = Stubber(ec2)
    stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        {"AvailabilityZone": "us-east-1c", "InstanceType": "g5.xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "0.41", "Timestamp": NOW - timedelta(hours=2)},
        {"AvailabilityZone": "us-east-1c", "InstanceType": "g5.xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "0.44", "Timestamp": NOW - timedelta(minutes=10)},
        {"AvailabilityZone": "us-east-1a", "InstanceType": "g5.xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "0.01", "Timestamp": NOW - timedelta(days=30)},  # stale: outside the lookback
    ]}, {"InstanceTypes": ["g5.xlarge"], "ProductDescriptions": ["Linux/UNIX"],
         "StartTime": NOW - timedelta(hours=6), "EndTime": NOW})
    stub.activate()
    provider = AwsProvider(AwsConfig(cluster="c", regions=(REGION,)), lambda service, region: ec2)
    a10g = instance_type_from_api({"InstanceType": "g5.xlarge", "VCpuInfo": {"DefaultVCpus": 4},
                                   "MemoryInfo": {"SizeInMiB": 16384},
                                   "GpuInfo": {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1,
                                                         "MemoryInfo": {"SizeInMiB": 22888}}]}})
    assert a10g is not None
    offers = {o.key: o.usd_per_hour for o in provider._priced_offers(
        REGION, {"g5.xlarge": a10g}, {"us-east-1a": "use1-az6", "us-east-1c": "use1-az2"}, NOW)}
    stub.assert_no_pending_responses()
    assert offers["aws/us-east-1/use1-az2/g5.xlarge/spot"] == 0.44  # the newest API price
    assert offers["aws/us-east-1/use1-az6/g5.xlarge/spot"] == 0.3701  # stale API price -> snapshot
    assert offers["aws/us-east-1/use1-az6/g5.xlarge/on_demand"] == 1.006  # on-demand: the snapshot


G5_XML = ("<item><instanceType>g5.xlarge</instanceType>{vcpus}<memoryInfo><sizeInMiB>16384</sizeInMiB></memoryInfo>"
          "<gpuInfo><gpus><item><name>A10G</name><manufacturer>NVIDIA</manufacturer><count>{count}</count>"
          "<memoryInfo><sizeInMiB>22888</sizeInMiB></memoryInfo></item></gpus></gpuInfo></item>")
G5_VCPUS = "<vCpuInfo><defaultVCpus>4</defaultVCpus></vCpuInfo>"


def answer_instance_types(world: MotoWorld, *, vcpus: str = G5_VCPUS, count: str = "1") -> None:
    """The next DescribeInstanceTypes lists g5.xlarge alone, as EC2 writes it (with the parts given)."""
    body = (f"<DescribeInstanceTypesResponse {EC2_XMLNS}><requestId>r</requestId><instanceTypeSet>"
            f"{G5_XML.format(vcpus=vcpus, count=count)}</instanceTypeSet></DescribeInstanceTypesResponse>")
    world.injections.append(_Injection("DescribeInstanceTypes", 200, body.encode(), 1))


def answer_spot_price(world: MotoWorld, price: str, at: str = "2025-01-06T11:50:00.000Z") -> None:
    """The next DescribeSpotPriceHistory: one g5.xlarge price in us-east-1c (use1-az2)."""
    body = (f"<DescribeSpotPriceHistoryResponse {EC2_XMLNS}><requestId>r</requestId><spotPriceHistorySet><item>"
            "<instanceType>g5.xlarge</instanceType><productDescription>Linux/UNIX</productDescription>"
            f"<spotPrice>{price}</spotPrice><timestamp>{at}</timestamp><availabilityZone>us-east-1c"
            "</availabilityZone></item></spotPriceHistorySet></DescribeSpotPriceHistoryResponse>")
    world.injections.append(_Injection("DescribeSpotPriceHistory", 200, body.encode(), 1))


def g5_spot_price(provider: AwsProvider) -> float:
    return next(o.usd_per_hour for o in provider.offers(NOW) if o.key == "aws/us-east-1/use1-az2/g5.xlarge/spot")


@pytest.mark.parametrize(("vcpus", "count", "error"), [
    ("", "1", "DescribeInstanceTypes in us-east-1 lists an instance type this fleetctl cannot read: g5.xlarge: "
              "no VCpuInfo.DefaultVCpus"),
    (G5_VCPUS, "two", "describe_instance_types in us-east-1 answered something this fleetctl cannot read: "
                      "ValueError: invalid literal"),
], ids=["no-vcpus", "gpu-count-not-a-number"])
def test_an_instance_type_ec2_did_not_fill_in_is_one_clear_error(world: MotoWorld, vcpus: str, count: str,
                                                                 error: str) -> None:
    answer_instance_types(world, vcpus=vcpus, count=count)
    with pytest.raises(ProviderError, match=error):
        world.provider().offers(NOW)


@pytest.mark.parametrize("price", ["Infinity", "NaN", "-0.5", "0"])
def test_a_spot_price_that_is_no_price_falls_back_to_the_snapshot(world: MotoWorld, price: str) -> None:
    answer_instance_types(world)
    answer_spot_price(world, price)
    assert g5_spot_price(world.provider()) == 0.3387  # the snapshot's, not inf USD/h


def test_a_spot_price_without_a_zone_offset_is_utc(world: MotoWorld) -> None:
    answer_instance_types(world)
    answer_spot_price(world, "0.41", at="2025-01-06T11:50:00")  # a naive time failed comparing with now
    assert g5_spot_price(world.provider()) == 0.41


@pytest.mark.parametrize(("price", "at", "error"), [
    ("abc", "2025-01-06T11:50:00.000Z", r"a spot price of us-east-1 \(g5.xlarge in us-east-1c\) has SpotPrice "
                                         r"'abc', which is not a number"),
    ("", "2025-01-06T11:50:00.000Z", r"a spot price of us-east-1 \(g5.xlarge in us-east-1c\) has no SpotPrice"),
    ("0.41", "yesterday", "describe_spot_price_history in us-east-1 answered something this fleetctl cannot "
                          "read: ValueError: Invalid timestamp"),
], ids=["price-not-a-number", "price-empty", "time-not-a-time"])
def test_a_spot_price_ec2_did_not_fill_in_is_one_clear_error(world: MotoWorld, price: str, at: str,
                                                             error: str) -> None:
    answer_instance_types(world)
    answer_spot_price(world, price, at)
    with pytest.raises(ProviderError, match=error):
        world.provider().offers(NOW)


def test_a_subnet_without_its_zone_is_one_clear_error(world: MotoWorld) -> None:
    body = (f"<DescribeSubnetsResponse {EC2_XMLNS}><requestId>r</requestId><subnetSet><item>"
            "<subnetId>subnet-0123456789abcdef0</subnetId><availabilityZone>us-east-1a</availabilityZone>"
            "</item></subnetSet></DescribeSubnetsResponse>")
    world.injections.append(_Injection("DescribeSubnets", 200, body.encode(), 1))
    with pytest.raises(ProviderError, match="subnet subnet-0123456789abcdef0 of us-east-1 has no AvailabilityZoneId"):
        world.provider().offers(NOW)


# ---------------------------------------------------------------- launch


def test_spot_launch_is_an_instant_fleet_with_the_chosen_override(provider: AwsProvider,
                                                                  world: MotoWorld) -> None:
    offer = spot(provider)
    result = provider.launch(LaunchRequest(offer, 2, "plan-1/launch-0"), NOW)
    assert result.fulfilled and result.error is None
    [request] = world.requests_of("CreateFleet")
    token = launch_token("contract", "plan-1/launch-0")
    assert request["Type"] == "instant" and request["ClientToken"] == token
    assert request["LaunchTemplateConfigs"] == [{
        "LaunchTemplateSpecification": {"LaunchTemplateName": "fleetctl-contract-a10g", "Version": "$Latest"},
        "Overrides": [{"InstanceType": "g5.xlarge", "SubnetId": world.subnets["use1-az2"]}],
    }]
    assert request["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 2, "DefaultTargetCapacityType": "spot", "SpotTargetCapacity": 2}
    assert request["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized", "MinTargetCapacity": 2,
                                      "SingleAvailabilityZone": True, "SingleInstanceType": True}
    # what moto made of it: spot instances in the chosen zone, tagged as fleetctl's
    reservations = world.client("ec2").describe_instances(
        InstanceIds=[n.node_id for n in result.nodes])["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert {i["InstanceLifecycle"] for i in instances} == {"spot"}
    assert {i["Placement"]["AvailabilityZone"] for i in instances} == {"us-east-1c"}
    tags = {t["Key"]: t["Value"] for t in instances[0]["Tags"]}
    assert tags["fleetctl:cluster"] == "contract" and tags["fleetctl:launch"] == token
    assert tags["fleetctl:offer"] == offer.key


def test_a_gang_launch_goes_into_the_pools_placement_group_and_other_launches_do_not(world: MotoWorld) -> None:
    """A cluster placement group holds one zone: only a gang's nodes (one
    launch, one zone) are put in it, and only where the policy made one."""
    provider = world.provider(placement_group_regions=frozenset({"us-east-1"}))
    gang = provider.launch(LaunchRequest(spot(provider), 2, "gang", together=True), NOW)
    single = provider.launch(LaunchRequest(spot(provider, zone="use1-az6"), 2, "two-jobs"), NOW)
    assert gang.fulfilled and single.fulfilled
    first, second = world.requests_of("CreateFleet")
    assert [o.get("Placement") for o in first["LaunchTemplateConfigs"][0]["Overrides"]] == [
        {"GroupName": "fleetctl-contract-a10g"}]
    assert [o.get("Placement") for o in second["LaunchTemplateConfigs"][0]["Overrides"]] == [None]
    elsewhere = world.provider()  # no placement group in the policy
    elsewhere.launch(LaunchRequest(spot(elsewhere), 2, "gang-2", together=True), NOW)
    assert world.requests_of("CreateFleet")[-1]["LaunchTemplateConfigs"][0]["Overrides"][0].get("Placement") is None


def test_regional_on_demand_launch_may_use_every_zone_but_stays_in_one(provider: AwsProvider,
                                                                       world: MotoWorld) -> None:
    offer = on_demand(provider)
    assert offer.zone == ""
    result = provider.launch(LaunchRequest(offer, 1, "od-1"), NOW)
    assert result.fulfilled
    [request] = world.requests_of("CreateFleet")
    assert {o["SubnetId"] for o in request["LaunchTemplateConfigs"][0]["Overrides"]} == set(world.subnets.values())
    assert request["OnDemandOptions"]["SingleAvailabilityZone"] is True
    assert "SpotOptions" not in request
    [node] = provider.nodes(NOW)
    assert node.offer == offer and node.state is NodeState.READY


def test_a_node_carries_the_zone_id_ec2_put_it_in_also_from_a_regional_offer(provider: AwsProvider,
                                                                            world: MotoWorld) -> None:
    """Node.zone is the zone id (the offers' zone namespace): a spot offer's
    own, and for a regional on-demand offer the one EC2 picked, read from the
    fleet's answer at launch and from the instance's placement when listed."""
    [od] = provider.launch(LaunchRequest(on_demand(provider), 1, "od-1"), NOW).nodes
    [instance] = [i for r in world.client("ec2").describe_instances(InstanceIds=[od.node_id])["Reservations"]
                  for i in r["Instances"]]
    [picked] = [z for z, subnet in world.subnets.items() if subnet == instance["SubnetId"]]
    assert od.offer.zone == "" and od.zone == picked
    [sp] = provider.launch(LaunchRequest(spot(provider, zone="use1-az6"), 1, "spot-1"), NOW).nodes
    assert sp.zone == "use1-az6"
    assert {n.node_id: n.zone for n in provider.nodes(NOW)} == {od.node_id: picked, sp.node_id: "use1-az6"}
    assert {n.node_id: n.placement_domain for n in provider.nodes(NOW)} == {
        od.node_id: ("aws", "us-east-1", picked), sp.node_id: ("aws", "us-east-1", "use1-az6")}


def test_a_retried_launch_after_a_crash_finds_the_first_instances(world: MotoWorld) -> None:
    first = world.provider().launch(LaunchRequest(spot(world.provider()), 2, "k"), NOW)
    restarted = world.provider()  # a new process: nothing in memory
    again = restarted.launch(LaunchRequest(spot(restarted), 2, "k"), NOW)
    assert {n.node_id for n in again.nodes} == {n.node_id for n in first.nodes}
    assert len(world.requests_of("CreateFleet")) == 1


def test_partial_fulfilment_is_reported_not_hidden(provider: AwsProvider, world: MotoWorld) -> None:
    body = ('<?xml version="1.0" encoding="UTF-8"?><CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/'
            '2016-11-15/"><requestId>r</requestId><fleetId>fleet-1</fleetId><errorSet><item>'
            "<errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>only 1</errorMessage>"
            "<lifecycle>spot</lifecycle></item></errorSet><fleetInstanceSet><item><instanceIds>"
            "<item>i-0123456789abcdef0</item></instanceIds><instanceType>g5.xlarge</instanceType>"
            "<lifecycle>spot</lifecycle></item></fleetInstanceSet></CreateFleetResponse>")
    world.injections.append(_Injection("CreateFleet", 200, body.encode(), 1))
    result = provider.launch(LaunchRequest(spot(provider), 3, "partial"), NOW)
    assert not result.fulfilled and [n.node_id for n in result.nodes] == ["i-0123456789abcdef0"]
    assert result.error is not None and "1 of 3" in result.error and "InsufficientInstanceCapacity" in result.error


@pytest.mark.parametrize(("code", "error"), [
    ("InsufficientInstanceCapacity", InsufficientCapacity),
    ("MaxSpotInstanceCountExceeded", QuotaExceeded),
    ("VcpuLimitExceeded", QuotaExceeded),
    ("InstanceLimitExceeded", QuotaExceeded),
    ("RequestLimitExceeded", Throttled),
    ("Throttling", Throttled),
    ("InvalidInstanceType", UnknownInstanceType),
    ("Unsupported", UnknownInstanceType),
    ("AuthFailure", ProviderError),
])
def test_error_codes_translate_to_typed_errors(code: str, error: type[ProviderError]) -> None:
    translated = translate_code(code, "message")
    assert type(translated) is error and code in str(translated)


def test_an_http_error_from_ec2_is_translated(provider: AwsProvider, world: MotoWorld) -> None:
    offer = spot(provider)
    world.fail_next("CreateFleet", "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded")
    with pytest.raises(QuotaExceeded, match="MaxSpotInstanceCountExceeded"):
        provider.launch(LaunchRequest(offer, 1, "quota"), NOW)
    world.empty_fleet_next("InsufficientInstanceCapacity")
    with pytest.raises(InsufficientCapacity):
        provider.launch(LaunchRequest(offer, 1, "capacity"), NOW)
    assert provider.nodes(NOW) == ()


@pytest.mark.parametrize(("message", "said"), [("", "errors without an error code$"),
                                               ("something broke", "errors without an error code: something broke$")])
def test_a_fleet_error_without_a_code_says_what_is_known(provider: AwsProvider, world: MotoWorld, message: str,
                                                         said: str) -> None:
    world.empty_fleet_next("", message)
    with pytest.raises(ProviderError, match=r"aws/us-east-1/use1-az2/g5.xlarge/spot: CreateFleet \(EC2 Fleet "
                                            r"fleet-0+-0+-0+-0+-0+\) returned no instances and " + said) as raised:
        provider.launch(LaunchRequest(spot(provider), 1, "no-code"), NOW)
    assert type(raised.value) is ProviderError
    assert provider.nodes(NOW) == ()


def test_throttling_is_retried_with_bounded_jittered_backoff(provider: AwsProvider, world: MotoWorld) -> None:
    offer = spot(provider)
    sleeps: list[float] = []
    wrapped = ThrottleRetry(provider, attempts=4, base_delay_seconds=0.5, max_delay_seconds=1.0, sleep=sleeps.append)
    world.fail_next("CreateFleet", "RequestLimitExceeded", "Request limit exceeded.", status=503, times=2)
    result = wrapped.launch(LaunchRequest(offer, 1, "throttled"), NOW)
    assert result.fulfilled and len(sleeps) == 2 and all(0 <= s <= 1.0 for s in sleeps)
    world.fail_next("DescribeInstances", "Throttling", "Rate exceeded", status=400, times=4)
    with pytest.raises(Throttled):
        wrapped.nodes(NOW)
    assert len(sleeps) == 2 + 3


def test_unknown_and_unoffered_types_are_refused_before_any_call(provider: AwsProvider, world: MotoWorld) -> None:
    real = spot(provider)
    fake = Offer(real.instance_type.__class__("aws", "p9.huge", 8, 64.0, "H100-80GB", 1, 80.0), REGION,
                 "use1-az2", Market.SPOT, 1.0)
    with pytest.raises(UnknownInstanceType):
        provider.launch(LaunchRequest(fake, 1, "x"), NOW)
    with pytest.raises(UnknownInstanceType):
        provider.launch(LaunchRequest(Offer(real.instance_type, "eu-west-1", "euw1-az1", Market.SPOT, 1.0), 1,
                                      "y"), NOW)
    assert world.requests_of("CreateFleet") == []


# ---------------------------------------------------------------- nodes and terminate


def test_nodes_are_only_this_clusters_instances(provider: AwsProvider, world: MotoWorld) -> None:
    ec2 = world.client("ec2")
    ec2.run_instances(ImageId=AMI, InstanceType="g5.xlarge", MinCount=1, MaxCount=1)  # someone else's
    other = ec2.run_instances(ImageId=AMI, InstanceType="g5.xlarge", MinCount=1, MaxCount=1, TagSpecifications=[
        {"ResourceType": "instance", "Tags": [{"Key": "fleetctl:cluster", "Value": "contract-2"}]}])
    [mine] = provider.launch(LaunchRequest(spot(provider), 1, "mine"), NOW).nodes
    assert [n.node_id for n in provider.nodes(NOW)] == [mine.node_id]
    with pytest.raises(NodeNotFound):  # never terminate what fleetctl did not buy
        provider.terminate(other["Instances"][0]["InstanceId"], NOW)
    with pytest.raises(NodeNotFound, match="is not an EC2 instance id"):
        provider.terminate(mine.node_id + "\n", NOW)
    provider.terminate(mine.node_id, NOW)
    [gone] = provider.nodes(NOW)
    assert gone.state in (NodeState.TERMINATING, NodeState.GONE)
    provider.terminate("i-0123456789abcdef0", NOW)  # long gone (or never listed): success
    assert len(world.requests_of("TerminateInstances")) == 1


def describe_instances_page(*instance_ids: str, next_token: str = "", cluster: str = "contract",
                            extra: str = "") -> bytes:
    """One DescribeInstances answer as EC2 sends it: running g5.xlarge instances of ``cluster``."""
    items = "".join(
        f"<item><instanceId>{i}</instanceId><instanceType>g5.xlarge</instanceType>"
        "<instanceState><code>16</code><name>running</name></instanceState>"
        f"{extra}<tagSet><item><key>fleetctl:cluster</key><value>{cluster}</value></item></tagSet></item>"
        for i in instance_ids)
    token = f"<nextToken>{next_token}</nextToken>" if next_token else ""
    return (f"<DescribeInstancesResponse {EC2_XMLNS}><requestId>r</requestId><reservationSet><item>"
            f"<reservationId>r-1</reservationId><instancesSet>{items}</instancesSet></item></reservationSet>"
            f"{token}</DescribeInstancesResponse>").encode()


def test_a_page_token_given_twice_is_an_error_not_an_endless_listing(provider: AwsProvider,
                                                                     world: MotoWorld) -> None:
    provider.offers(NOW)  # catalog, zones and prices cached: only DescribeInstances is answered below
    before = len(world.requests_of("DescribeInstances"))
    world.injections.append(_Injection("DescribeInstances", 200, describe_instances_page(
        "i-0123456789abcdef0", next_token="same"), 50))
    with pytest.raises(ProviderError, match="describe_instances in us-east-1 gave the page token 'same' a second "
                                            "time, after 2 pages"):
        provider.nodes(NOW)
    assert len(world.requests_of("DescribeInstances")) - before == 2


def test_an_instance_listed_twice_is_one_node_and_can_be_terminated(provider: AwsProvider,
                                                                    world: MotoWorld) -> None:
    [node] = provider.launch(LaunchRequest(spot(provider), 1, "twice"), NOW).nodes
    world.injections.append(_Injection("DescribeInstances", 200, describe_instances_page(
        node.node_id, next_token="page-2"), 1))
    world.injections.append(_Injection("DescribeInstances", 200, describe_instances_page(node.node_id), 1))
    assert [n.node_id for n in provider.nodes(NOW)] == [node.node_id]
    world.injections.append(_Injection("DescribeInstances", 200, describe_instances_page(node.node_id, node.node_id),
                                       1))
    provider.terminate(node.node_id, NOW)
    assert world.requests_of("TerminateInstances") == [{"InstanceIds": [node.node_id]}]


def test_an_instance_ec2_did_not_fill_in_is_read_safely_or_refused(provider: AwsProvider, world: MotoWorld,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """No type: a one-line error. No state: launching, not gone (as an
    unknown state; gone would requeue its jobs and buy again while it runs).
    A launch time without an offset is UTC; none is unknown; one that is not a time is an error (botocore
    refuses the whole answer before the adapter sees the instance)."""
    provider.offers(NOW)  # catalog, zones and prices cached: only DescribeInstances is answered below
    running = "<instanceState><code>16</code><name>running</name></instanceState>"
    some_id = "i-0123456789abcdef0"

    def listing(item: str) -> None:
        body = (f"<DescribeInstancesResponse {EC2_XMLNS}><requestId>r</requestId><reservationSet><item>"
                f"<reservationId>r-1</reservationId><instancesSet><item><instanceId>{some_id}</instanceId>{item}"
                "<tagSet><item><key>fleetctl:cluster</key><value>contract</value></item></tagSet></item>"
                "</instancesSet></item></reservationSet></DescribeInstancesResponse>")
        world.injections.append(_Injection("DescribeInstances", 200, body.encode(), 1))

    listing(running)
    with pytest.raises(ProviderError, match=f"instance {some_id} in us-east-1 has no InstanceType"):
        provider.nodes(NOW)
    listing("<instanceType>g5.xlarge</instanceType>")
    with caplog.at_level(logging.WARNING, logger="providers.aws"):
        [node] = provider.nodes(NOW)
    assert node.state is NodeState.LAUNCHING and "has state None, unknown to this fleetctl" in caplog.text
    # No launch time: unknown, as on GCP and Azure (it was now: a launch on every poll, so the
    # scale-up cooldown never ran out while the instance lived), and not ready since an unknown time.
    assert node.launched_at_utc == UNKNOWN_LAUNCH_TIME
    listing(f"<instanceType>g5.xlarge</instanceType>{running}")
    [ready] = provider.nodes(NOW)
    assert (ready.state, ready.launched_at_utc, ready.ready_at_utc) == (NodeState.READY, UNKNOWN_LAUNCH_TIME, None)
    listing(f"<instanceType>g5.xlarge</instanceType>{running}<launchTime>2025-01-06T11:00:00</launchTime>")
    assert provider.nodes(NOW)[0].launched_at_utc == NOW - timedelta(hours=1)
    listing(f"<instanceType>g5.xlarge</instanceType>{running}<launchTime>yesterday</launchTime>")
    with pytest.raises(ProviderError, match="describe_instances in us-east-1 answered something this fleetctl "
                                            "cannot read: ValueError: Invalid timestamp"):
        provider.nodes(NOW)


# ---------------------------------------------------------------- interruption events


def ec2_event(detail_type: str, detail: dict[str, Any], time: str = "2025-01-06T12:00:05Z") -> dict[str, Any]:
    """An EventBridge event as EC2 sends it (the documented example's fields)."""
    return {"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": detail_type,
            "source": "aws.ec2", "account": "123456789012", "time": time, "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{detail.get('instance-id')}"],
            "detail": detail}


@pytest.mark.parametrize(
    ("detail_type", "detail", "at", "expected"),
    [
        # kind, received (UTC), deadline: a spot warning's is two minutes after its time
        ("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}, "2025-01-06T12:00:05Z",
         (InterruptionKind.RECLAIM_WARNING, datetime(2025, 1, 6, 12, 0, 5, tzinfo=timezone.utc),
          datetime(2025, 1, 6, 12, 2, 5, tzinfo=timezone.utc))),
        ("EC2 Spot Instance Interruption Warning", {"instance-action": "stop"}, "2025-01-06T14:00:05+02:00",
         (InterruptionKind.RECLAIM_WARNING, datetime(2025, 1, 6, 12, 0, 5, tzinfo=timezone.utc),
          datetime(2025, 1, 6, 12, 2, 5, tzinfo=timezone.utc))),
        ("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}, "2025-01-06T23:59:00",
         (InterruptionKind.RECLAIM_WARNING, datetime(2025, 1, 6, 23, 59, tzinfo=timezone.utc),
          datetime(2025, 1, 7, 0, 1, tzinfo=timezone.utc))),
        ("EC2 Instance Rebalance Recommendation", {}, "2025-01-06T12:00:05Z",
         (InterruptionKind.REBALANCE, datetime(2025, 1, 6, 12, 0, 5, tzinfo=timezone.utc), None)),
        *[("EC2 Instance State-change Notification", {"state": state}, "2025-01-06T12:00:05Z",
           (InterruptionKind.TERMINATED, datetime(2025, 1, 6, 12, 0, 5, tzinfo=timezone.utc), None))
          for state in ("shutting-down", "terminated", "stopping", "stopped")],
        *[("EC2 Instance State-change Notification", {"state": state}, "2025-01-06T12:00:05Z", None)
          for state in ("pending", "running")],
    ],
)
@pytest.mark.usefixtures("local_zone_five_hours_west")
def test_ec2_events_become_interruption_events_by_hand(detail_type: str, detail: dict[str, Any], at: str,
                                                        expected: tuple | None) -> None:
    body = json.dumps(ec2_event(detail_type, {"instance-id": "i-0123456789abcdef0", **detail}, at))
    event = event_to_interruption(parse_event(body))
    if expected is None:
        assert event is None
        return
    assert event is not None
    assert (event.event_id, event.provider, event.node_id) == (
        "aws-7bf73129-1428-4cd3-a780-95db273d1602", "aws", "i-0123456789abcdef0")
    assert (event.kind, event.received_at_utc, event.deadline_utc) == expected


def test_an_event_fleetctl_does_not_subscribe_to_or_with_a_bad_time_is_refused() -> None:
    detail = {"instance-id": "i-0123456789abcdef0"}
    with pytest.raises(ValueError, match="^detail-type 'EC2 AMI State Change' is not one fleetctl subscribes to$"):
        event_to_interruption(ec2_event("EC2 AMI State Change", detail))
    with pytest.raises(ValueError, match="^time 'yesterday' is not an ISO 8601 time EC2 could have sent"):
        event_to_interruption(ec2_event("EC2 Instance Rebalance Recommendation", detail, time="yesterday"))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("{not json", r"^not JSON \(Expecting property name enclosed in double quotes at line 1 column 2\)$"),
        ("[1, 2]", "^not a JSON object$"),
        *[(json.dumps({k: v for k, v in ec2_event("EC2 Instance Rebalance Recommendation",
                                                  {"instance-id": "i-0123456789abcdef0"}).items() if k != key}),
           f"^no '{key}' field: not an EventBridge event$") for key in ("id", "detail-type", "time", "detail")],
        (json.dumps(ec2_event("EC2 Instance Rebalance Recommendation", {})), "^detail.instance-id missing$"),
        (json.dumps({**ec2_event("EC2 Instance Rebalance Recommendation", {}), "detail": "i-0123456789abcdef0"}),
         "^detail.instance-id missing$"),
        # EC2 ids are i- and 8 (older) or 17 lower-case hex digits
        (json.dumps(ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-0123abc"})),
         "^detail.instance-id 'i-0123abc' is not an EC2 instance id$"),
        (json.dumps(ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-0123456789abcdef01"})),
         "is not an EC2 instance id$"),
        (json.dumps(ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-0123ABCD"})),
         "is not an EC2 instance id$"),
        (json.dumps(ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": 12345678})),
         "^detail.instance-id 12345678 is not an EC2 instance id$"),
    ],
)
def test_a_message_that_is_not_an_ec2_event_is_refused_saying_why(body: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_event(body)


def test_instance_ids_of_both_lengths_are_ec2_events() -> None:
    for instance_id in ("i-0123abcd", "i-0123456789abcdef0"):
        body = json.dumps(ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": instance_id}))
        assert parse_event(body)["detail"]["instance-id"] == instance_id


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"Code": 0, "Name": "pending"}, NodeState.LAUNCHING),
        ({"Code": 16, "Name": "running"}, NodeState.READY),
        ({"Code": 32, "Name": "shutting-down"}, NodeState.TERMINATING),
        ({"Code": 64, "Name": "stopping"}, NodeState.TERMINATING),
        ({"Code": 80, "Name": "stopped"}, NodeState.GONE),
        ({"Code": 48, "Name": "terminated"}, NodeState.GONE),
        ({"Code": 99, "Name": "hibernating"}, NodeState.LAUNCHING),  # unknown: launching, not gone
        ({"Code": 16}, NodeState.LAUNCHING),
        ("running", NodeState.LAUNCHING),  # not the shape EC2 gives: no state
        (None, NodeState.LAUNCHING),
    ],
)
def test_instance_states_by_hand(state: Any, expected: NodeState) -> None:
    instance = {"InstanceId": "i-0123456789abcdef0"} if state is None else {"InstanceId": "i-0123456789abcdef0",
                                                                             "State": state}
    assert _state(instance, REGION) is expected


def test_each_event_kind_becomes_an_interruption_event(provider: AwsProvider, world: MotoWorld) -> None:
    a, b, c = provider.launch(LaunchRequest(spot(provider), 3, "events"), NOW).nodes
    at = datetime(2025, 1, 6, 12, 0, 5, tzinfo=timezone.utc)
    world.reclaim(a.node_id, at=at)
    world.put_ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": b.node_id}, at=at)
    world.put_ec2_event("EC2 Instance State-change Notification", {"instance-id": c.node_id, "state": "terminated"},
                        at=at)
    events = {e.node_id: e for e in provider.interruption_events(NOW)}
    assert events[a.node_id].kind is InterruptionKind.RECLAIM_WARNING
    assert events[a.node_id].deadline_utc == events[a.node_id].received_at_utc + timedelta(seconds=120)
    assert events[b.node_id].kind is InterruptionKind.REBALANCE and events[b.node_id].deadline_utc is None
    assert events[c.node_id].kind is InterruptionKind.TERMINATED
    assert {e.provider for e in events.values()} == {"aws"}


def test_messages_are_deleted_only_when_acknowledged(provider: AwsProvider, world: MotoWorld) -> None:
    [node] = provider.launch(LaunchRequest(spot(provider), 1, "ack"), NOW).nodes
    world.client("sqs").set_queue_attributes(QueueUrl=world.queue_url, Attributes={"VisibilityTimeout": "0"})
    world.reclaim(node.node_id)
    [event] = provider.interruption_events(NOW)
    assert queue_depth(world) == 1
    restarted = world.provider()  # the controller crashed before handling it: the notice comes back
    assert restarted.interruption_events(NOW) == (event,)
    restarted.acknowledge(event.event_id)
    assert queue_depth(world) == 0
    assert world.provider().interruption_events(NOW) == ()


def test_a_poll_that_fails_after_receiving_keeps_the_messages_for_the_next(provider: AwsProvider,
                                                                          world: MotoWorld) -> None:
    """A received message is invisible in the queue for its visibility timeout
    (30 s here): a poll that failed after receiving it must not hide the notice that long."""
    [node] = provider.launch(LaunchRequest(spot(provider), 1, "kept"), NOW).nodes
    world.reclaim(node.node_id)
    world.fail_next("DescribeInstances", "Throttling", "Rate exceeded")
    with pytest.raises(Throttled):
        provider.interruption_events(NOW)
    [event] = provider.interruption_events(NOW)
    assert (event.node_id, event.kind) == (node.node_id, InterruptionKind.RECLAIM_WARNING)
    provider.acknowledge(event.event_id)
    assert queue_depth(world) == 0
    world.reclaim(node.node_id)  # and through the retry wrapper, within one call
    world.fail_next("DescribeInstances", "Throttling", "Rate exceeded")
    assert [e.node_id for e in ThrottleRetry(provider, sleep=lambda _: None).interruption_events(NOW)] == [
        node.node_id]


def test_other_instances_events_and_garbage_are_dropped(provider: AwsProvider, world: MotoWorld,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    [node] = provider.launch(LaunchRequest(spot(provider), 1, "noise"), NOW).nodes
    someone = world.client("ec2").run_instances(ImageId=AMI, InstanceType="g5.xlarge", MinCount=1, MaxCount=1)
    world.reclaim(someone["Instances"][0]["InstanceId"])
    world.put_ec2_event("EC2 Instance State-change Notification", {"instance-id": node.node_id, "state": "running"})
    world.client("sqs").send_message(QueueUrl=world.queue_url, MessageBody="{not json")
    world.client("sqs").send_message(QueueUrl=world.queue_url, MessageBody=json.dumps({"hello": "world"}))
    with caplog.at_level(logging.ERROR, logger="providers.aws"):
        assert provider.interruption_events(NOW) == ()
    assert queue_depth(world) == 0
    assert "not JSON" in caplog.text and "{not json" in caplog.text and "not an EventBridge event" in caplog.text


@pytest.mark.parametrize("detail, time, logged", [
    # a list: TypeError (unhashable) in the old parser
    ({"instance-id": ["i-0123456789abcdef0"]}, None, "detail.instance-id ['i-0123456789abcdef0'] is not an EC2"),
    # a number beside the real string id: TypeError in sorted()
    ({"instance-id": 123456789}, None, "detail.instance-id 123456789 is not an EC2 instance id"),
    # OverflowError adding the 2-minute notice
    ({"instance-id": "i-0123456789abcdef0"}, "9999-12-31T23:59:59Z", "time '9999-12-31T23:59:59Z' is not an ISO"),
    ({"instance-id": "not-an-instance"}, None, "detail.instance-id 'not-an-instance' is not an EC2 instance id"),
    # Python's $ also matches before a final newline
    ({"instance-id": "i-0123456789abcdef0\n"}, None,
     "detail.instance-id 'i-0123456789abcdef0\\n' is not an EC2 instance id"),
], ids=["id-list", "id-number", "time-overflow", "id-malformed", "id-trailing-newline"])
def test_a_malformed_event_is_dropped_and_does_not_hide_a_real_reclaim(
        provider: AwsProvider, world: MotoWorld, caplog: pytest.LogCaptureFixture,
        detail: dict[str, Any], time: str | None, logged: str) -> None:
    """The queue accepts any message its policy lets in; one malformed event
    must not stop every poll (and so every reclaim) until it expires."""
    [node] = provider.launch(LaunchRequest(spot(provider), 1, "poison"), NOW).nodes
    poison = {"version": "0", "id": "poison-1", "detail-type": "EC2 Spot Instance Interruption Warning",
              "source": "aws.ec2", "time": time or "2025-01-06T12:00:00Z", "detail": detail}
    world.client("sqs").send_message(QueueUrl=world.queue_url, MessageBody=json.dumps(poison))
    world.reclaim(node.node_id)
    with caplog.at_level(logging.ERROR, logger="providers.aws"):
        events = provider.interruption_events(NOW)
    assert [(e.node_id, e.kind) for e in events] == [(node.node_id, InterruptionKind.RECLAIM_WARNING)]
    assert logged in caplog.text
    provider.acknowledge(events[0].event_id)
    assert queue_depth(world) == 0  # the malformed message was deleted, not left to come back


def test_a_missing_queue_says_to_apply_the_controller_module(moto_server: Any) -> None:
    with moto_world(moto_server) as world:
        world.client("sqs").delete_queue(QueueUrl=world.queue_url)
        with pytest.raises(ProviderError, match="Terraform controller module"):
            world.provider().interruption_events(NOW)


def test_api_calls_lists_every_call_the_adapter_makes(provider: AwsProvider, world: MotoWorld) -> None:
    """The IAM policy is rendered from API_CALLS; every call the adapter made
    in a full life cycle must be in it (CreateFleet implies the rest)."""
    [node] = provider.launch(LaunchRequest(spot(provider), 1, "iam"), NOW).nodes
    world.reclaim(node.node_id)
    [event] = provider.interruption_events(NOW)
    provider.acknowledge(event.event_id)
    provider.terminate(node.node_id, NOW)
    provider.nodes(NOW)
    made = {name for name, _ in world.calls}
    service = {"CreateFleet": "ec2", "DescribeAvailabilityZones": "ec2", "DescribeInstanceTypes": "ec2",
               "DescribeInstances": "ec2", "DescribeSpotPriceHistory": "ec2", "DescribeSubnets": "ec2",
               "TerminateInstances": "ec2", "GetQueueUrl": "sqs", "ReceiveMessage": "sqs", "DeleteMessage": "sqs"}
    assert made <= set(service), made - set(service)
    assert {f"{service[name]}:{name}" for name in made} <= set(API_CALLS)


def test_a_configured_subnet_ec2_does_not_know_is_named_as_the_policys(world: MotoWorld) -> None:
    bad = world.provider(subnet_ids={REGION: ("subnet-0deadbeefdeadbeef",)})
    with pytest.raises(ProviderError, match=r"the policy's infrastructure.aws subnet_ids for us-east-1 name a subnet "
                                            r"EC2 does not know \(subnet-0deadbeefdeadbeef\): .*InvalidSubnetID"):
        bad.offers(NOW)  # what every plan and tick asks first
