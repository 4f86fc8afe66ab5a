"""Tests of the shipped GPU offer snapshot and of its build.

The snapshot tests read only package data (``providers/data/*.csv``); the
rebuild test needs the raw data folder and is skipped without it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from fleetctl.model import Interconnect, Market, Offer
from providers import catalog
from providers.catalog import GPU_MEMORY_GIB, GPU_MODELS, instance_types, load_catalog, normalise_gpu_model

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared" / "data"  # the build script's default --shared
DATA = REPO_ROOT / "providers" / "data"
PROVIDERS = ("aws", "gcp", "azure")


# ----------------------------------------------------------------------------- well-known facts


@pytest.mark.parametrize(
    ("provider", "name", "gpu_model", "gpu_count"),
    [
        ("aws", "p4d.24xlarge", "A100-40GB", 8),
        ("aws", "p3.2xlarge", "V100-16GB", 1),
        ("aws", "g5.xlarge", "A10G", 1),
        ("gcp", "a2-ultragpu-8g", "A100-80GB", 8),
        ("gcp", "g2-standard-4", "L4", 1),
        ("azure", "Standard_ND96amsr_A100_v4", "A100-80GB", 8),
        ("azure", "Standard_NC4as_T4_v3", "T4", 1),
    ],
)
def test_well_known_gpu_shapes(provider: str, name: str, gpu_model: str, gpu_count: int) -> None:
    t = instance_types()[(provider, name)]
    assert (t.gpu_model, t.gpu_count) == (gpu_model, gpu_count)
    assert t.gpu_memory_gib == GPU_MEMORY_GIB[gpu_model]
    # ... and the type is actually sold somewhere.
    assert any(o.instance_type == t for o in load_catalog())


def test_well_known_vcpus_memory_and_interconnect() -> None:
    types = instance_types()
    p4d = types[("aws", "p4d.24xlarge")]
    assert (p4d.vcpus, p4d.memory_gib, p4d.interconnect) == (96, 1152.0, Interconnect.NVLINK)
    g5 = types[("aws", "g5.xlarge")]
    assert (g5.vcpus, g5.memory_gib, g5.interconnect) == (4, 16.0, Interconnect.PCIE)
    p3dn = types[("aws", "p3dn.24xlarge")]  # the measured file says 0 GPUs: reviewed table wins
    assert (p3dn.gpu_model, p3dn.gpu_count, p3dn.interconnect) == ("V100-32GB", 8, Interconnect.NVLINK)
    assert types[("aws", "p3.2xlarge")].interconnect is Interconnect.PCIE  # one GPU has no peer
    assert types[("aws", "p3.8xlarge")].interconnect is Interconnect.NVLINK
    # 8 x B200 SXM on NVSwitch (HGX B200), 2 TiB; before 2026-11-28 the snapshot said pcie, and 1996.0 GiB (the
    # memory the OS sees), as for g6.xlarge 15.0 (nominally 16) and the other g6, g6e, gr6, p4de and p5 types
    b200 = types[("aws", "p6-b200.48xlarge")]
    assert (b200.vcpus, b200.memory_gib, b200.interconnect) == (192, 2048.0, Interconnect.NVLINK)
    assert [types[("aws", n)].memory_gib for n in ("g6.xlarge", "g6e.xlarge", "gr6.4xlarge", "p4de.24xlarge",
                                                    "p5.48xlarge")] == [16.0, 32.0, 128.0, 1152.0, 2048.0]
    assert types[("aws", "g5g.xlarge")].architecture == "arm64"
    assert types[("gcp", "a3-highgpu-8g")].interconnect is Interconnect.NVLINK
    assert types[("gcp", "g2-standard-96")].interconnect is Interconnect.PCIE
    assert types[("azure", "Standard_ND96amsr_A100_v4")].interconnect is Interconnect.NVLINK
    assert types[("azure", "Standard_NC96ads_A100_v4")].interconnect is Interconnect.PCIE


# ----------------------------------------------------------------------------- vocabulary


@pytest.mark.parametrize(
    ("raw", "memory_gib", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", None, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", None, "A100-80GB"),
        ("a100", None, "A100-40GB"),
        ("a100", 80, "A100-80GB"),
        ("a100-80gb", None, "A100-80GB"),
        ("h100-80gb", None, "H100-80GB"),
        ("h100-80gb-mega", None, "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", None, "H100-80GB"),
        ("h200", None, "H200-141GB"),
        ("b200", None, "B200"),
        ("Tesla T4", None, "T4"),
        ("NVIDIA T4G", None, "T4G"),
        ("NVIDIA A10G", None, "A10G"),
        ("NVIDIA A10", None, "A10"),
        ("nvidia-l4", None, "L4"),
        ("NVIDIA L40S", None, "L40S"),
        ("Tesla V100-SXM2-16GB", None, "V100-16GB"),
        ("Tesla V100-SXM2-32GB", None, "V100-32GB"),
        ("v100", 32, "V100-32GB"),
        ("V100M32", None, "V100-32GB"),
        ("nvidia-tesla-p100", None, "P100"),
        ("nvidia-tesla-p4", None, "P4"),
        ("Tesla P40", None, "P40"),
        ("Tesla K80", None, "K80"),
        ("Tesla M60", None, "M60"),
        # A size in the name wins over memory_gib; without one, the memory picks the part.
        ("a100-80gb", 40, "A100-80GB"),
        ("Tesla V100-SXM2-32GB", 16, "V100-32GB"),
        ("A100", 40.0, "A100-40GB"),  # DescribeInstanceTypes: 40,960 MiB per GPU
        ("V100", 16.0, "V100-16GB"),
        ("H100", 80.0, "H100-80GB"),
        ("NVIDIA H100 PCIe", None, "H100-80GB"),  # no size at all: the 80 GB part
        # A size no part of that chip comes in has no name.
        ("a100", 60, None),
        ("a100", 24, None),
        ("v100", 24, None),
        ("v100", 8, None),
        ("h100", 40, None),
        ("AMD Radeon Pro V520", None, None),
        ("", None, None),
        ("h100 nvl", 94, None),
    ],
)
def test_normalise_gpu_model(raw: str, memory_gib: float | None, expected: str | None) -> None:
    assert normalise_gpu_model(raw, memory_gib) == expected
    assert expected is None or expected in GPU_MODELS


def test_every_snapshot_gpu_model_is_in_the_vocabulary() -> None:
    types = instance_types()
    assert len(types) >= 60
    for t in types.values():
        assert t.gpu_model in GPU_MODELS, t
        assert t.gpu_count >= 1, t
        assert t.gpu_memory_gib == GPU_MEMORY_GIB[t.gpu_model], t
        assert t.interconnect in (Interconnect.NVLINK, Interconnect.PCIE), t
        # A normalised name is a fixed point of the normaliser.
        assert normalise_gpu_model(t.gpu_model, t.gpu_memory_gib) == t.gpu_model


def test_unreviewed_inputs_fail_closed() -> None:
    """A size, region or GPU no reviewed table covers must stop the build."""
    with pytest.raises(KeyError):
        catalog.azure_instance_type("NC999x_Z9_v9")
    with pytest.raises(KeyError):
        catalog.azure_region("Mars Central")
    assert catalog.azure_region("US Gov Virginia") is None
    assert catalog.azure_instance_type("NV6ads_A10_v5") is None  # fractional GPU
    with pytest.raises(ValueError, match="^aws/zz1.xlarge: unknown measured GPU model 'Mystery GPU 9000'$"):
        catalog.aws_instance_type("zz1.xlarge", {"vcpus": "4", "memory_mb_visible_to_os": "15000",
                                                 "gpu_count": "1", "gpu_model": "Mystery GPU 9000"})
    assert catalog.aws_instance_type("g4ad.xlarge", None) is None  # AMD, excluded
    # excluded even where a measured row names its GPU (the measured file has 0 for the AMD V520)
    assert catalog.aws_instance_type("g4ad.xlarge", {"vcpus": "4", "memory_mb_visible_to_os": "15354",
                                                     "gpu_count": "1", "gpu_model": "AMD Radeon Pro V520"}) is None
    # a CPU type: 0 GPUs, or the cell left empty
    for count in ("0", ""):
        assert catalog.aws_instance_type("m5.large", {"vcpus": "2", "memory_mb_visible_to_os": "7811",
                                                      "gpu_count": count, "gpu_model": ""}) is None
    # a measured GPU type without a nominal memory (a type newer than the table): the MiB the OS sees / 1024, to
    # 0.1 GiB (15,359 -> 15.0); g6.xlarge, the example here before 2026-11-28, has its nominal 16 in the table now
    g7 = catalog.aws_instance_type("g7.xlarge", {"vcpus": "4", "memory_mb_visible_to_os": "15359",
                                                 "gpu_count": "1", "gpu_model": "NVIDIA L4"})
    assert g7 is not None and (g7.vcpus, g7.memory_gib, g7.gpu_model, g7.gpu_count) == (4, 15.0, "L4", 1)


def test_shape_builders_refuse_what_no_table_names() -> None:
    """A GCP row whose accelerator has no vocabulary name (a4x: 4 x GB200) is a
    ValueError naming the machine type and the accelerator; a GPU type needs a
    vocabulary model and at least one GPU; a non-N-series Azure size is not a
    GPU size (None), unlike an unreviewed N-series one (KeyError, above)."""
    a4x = {"machine_type": "a4x-highgpu-4g", "series": "a4x", "vcpus": "140", "memory_gb": "884",
           "accelerator_type": "nvidia-gb200", "accelerator_count": "4"}
    with pytest.raises(ValueError, match=r"^gcp/a4x-highgpu-4g: unknown accelerator 'nvidia-gb200'$"):
        catalog.gcp_instance_type(a4x)
    g2 = {"machine_type": "g2-standard-4", "series": "g2", "vcpus": "4", "memory_gb": "16",
          "accelerator_type": "nvidia-l4", "accelerator_count": "0"}
    with pytest.raises(ValueError, match=r"^gcp/g2-standard-4: a GPU type needs gpu_count >= 1, got 0$"):
        catalog.gcp_instance_type(g2)
    with pytest.raises(ValueError, match=r"^aws/x\.large: GPU model 'A100' is not in the vocabulary$"):
        catalog._gpu_type("aws", "x.large", 4, 16.0, "A100", 1, nvlink_capable=False)
    one = catalog._gpu_type("aws", "x.large", 4, 16.0, "A100-40GB", 1, nvlink_capable=True)
    assert (one.gpu_count, one.interconnect) == (1, Interconnect.PCIE)
    assert catalog.azure_instance_type("D4s_v5") is None
    assert catalog.azure_instance_type("HB120rs_v3") is None


@pytest.mark.parametrize(
    ("machine", "vcpus", "memory_gib", "accelerator", "count", "allowed"),
    [
        # At the table's limits exactly: 1 x P100 up to 16 vCPUs / 104 GB, 8 x V100 up to 96 / 624.
        ("n1-highmem-16", 16, 104.0, "nvidia-tesla-p100", 1, True),
        ("n1-highmem-96", 96, 624.0, "nvidia-tesla-v100", 8, True),
        ("n1-highmem-96", 96, 624.0, "nvidia-tesla-t4", 4, True),
        # vCPUs within the limit, memory over it: megamem (1,433.6 GB) takes no GPU.
        ("n1-megamem-96", 96, 1433.6, "nvidia-tesla-v100", 8, False),
        ("n1-highmem-32", 32, 208.0, "nvidia-tesla-p100", 2, True),
        ("n1-highmem-32", 32, 208.0, "nvidia-tesla-v100", 2, False),  # 2 x V100: at most 24 vCPUs
    ],
)
def test_n1_gpu_limits_hold_at_their_edges(machine: str, vcpus: int, memory_gib: float, accelerator: str,
                                           count: int, allowed: bool) -> None:
    t = catalog.gcp_n1_gpu_instance_type(machine, vcpus, memory_gib, accelerator, count)
    assert (t is not None) is allowed
    if t is not None:
        assert (t.name, t.vcpus, t.memory_gib, t.gpu_count) == (f"{machine}+{count}x{accelerator}", vcpus,
                                                                memory_gib, count)


def test_spot_at_the_on_demand_price_is_dropped() -> None:
    t = instance_types()[("aws", "p3.2xlarge")]
    od = Offer(t, "us-east-1", "use1-az1", Market.ON_DEMAND, 3.06)
    at_cap = Offer(t, "us-east-1", "use1-az1", Market.SPOT, 3.06)
    cheaper = Offer(t, "us-east-1", "use1-az2", Market.SPOT, 0.918)
    other_zone_od = Offer(t, "us-east-1", "use1-az2", Market.ON_DEMAND, 3.06)
    unknown_od = Offer(t, "eu-west-2", "euw2-az2", Market.SPOT, 5.0)
    kept, dropped = catalog.split_spot_at_or_above_on_demand([od, at_cap, cheaper, other_zone_od, unknown_od])
    assert dropped == [at_cap]
    assert kept == [od, cheaper, other_zone_od, unknown_od]


# ----------------------------------------------------------------------------- offers and prices


def _by_domain(offers: tuple[Offer, ...]) -> dict[tuple[str, str, str, str], dict[Market, float]]:
    out: dict[tuple[str, str, str, str], dict[Market, float]] = defaultdict(dict)
    for o in offers:
        key = (o.provider, o.instance_type.name, o.region, o.zone)
        assert o.market not in out[key], f"duplicate offer {o.key}"
        out[key][o.market] = o.usd_per_hour
    return out


def test_spot_is_strictly_cheaper_than_on_demand_where_both_are_known() -> None:
    pairs = [m for m in _by_domain(load_catalog()).values() if len(m) == 2]
    assert len(pairs) > 1000  # the check below must cover many offers, not a handful
    for provider in PROVIDERS:
        assert any(o.provider == provider for o in load_catalog())
    for markets in pairs:
        assert 0 < markets[Market.SPOT] < markets[Market.ON_DEMAND], markets
    providers_with_pairs = {k[0] for k, m in _by_domain(load_catalog()).items() if len(m) == 2}
    assert providers_with_pairs == set(PROVIDERS)


@pytest.mark.parametrize("provider", ["gcp", "azure"])
def test_a100_80gb_has_spot_and_on_demand(provider: str) -> None:
    markets = {
        o.market for o in load_catalog() if o.provider == provider and o.instance_type.gpu_model == "A100-80GB"
    }
    assert markets == {Market.SPOT, Market.ON_DEMAND}


def test_aws_a100_80gb_is_on_demand_only_a_documented_gap() -> None:
    """The 2022 AWS spot file predates p4de (8 x A100-80GB), so AWS offers it on
    demand only (regional, zone left to the provider). Fail loudly when a
    snapshot gains an AWS A100-80GB spot price, so the test above is extended."""
    aws = [o for o in load_catalog() if o.provider == "aws" and o.instance_type.gpu_model == "A100-80GB"]
    assert {o.market for o in aws} == {Market.ON_DEMAND}
    assert {o.instance_type.name for o in aws} == {"p4de.24xlarge"} and all(o.zone == "" for o in aws)
    assert {o.region for o in aws} == {"us-east-1", "us-east-2", "us-west-2"}
    assert any(o.provider == "aws" and o.instance_type.gpu_model == "A100-40GB" and o.market is m
               for o in load_catalog() for m in Market)


def test_offer_shapes_per_provider() -> None:
    offers = load_catalog()
    assert list(offers) == sorted(offers, key=lambda o: o.key)
    assert len({o.key for o in offers}) == len(offers)
    for o in offers:
        if o.provider == "aws":
            if o.market is Market.SPOT or o.zone:
                assert re.fullmatch(r"[a-z]+[0-9]-az[0-9]+", o.zone), o.key  # AZ ID, e.g. use1-az4
            if o.market is Market.ON_DEMAND:
                assert o.region in catalog.AWS_ON_DEMAND_PRICE_REGION, o.key
        else:
            assert o.zone == "", o.key
        if o.provider == "azure":
            assert o.instance_type.name.startswith("Standard_"), o.key
            assert o.region in set(catalog.AZURE_REGIONS.values()), o.key
    # us-east-2 and us-west-2 reuse the us-east-1 on-demand price.
    od = {(o.instance_type.name, o.region): o.usd_per_hour for o in offers
          if o.provider == "aws" and o.market is Market.ON_DEMAND}
    assert od[("p3.2xlarge", "us-east-1")] == 3.06
    assert od[("p3.2xlarge", "us-east-2")] == od[("p3.2xlarge", "us-west-2")] == 3.06
    assert od[("p4d.24xlarge", "us-east-1")] == 21.957642


def test_p4d_spot_is_rescaled_to_the_2026_list_price() -> None:
    spot = sorted(o.usd_per_hour for o in load_catalog()
                  if o.instance_type.name == "p4d.24xlarge" and o.market is Market.SPOT)
    assert spot, "p4d.24xlarge must have spot offers"
    ratio = 21.957642 / 32.7726
    # The cheapest 2022 p4d spot price was 9.8318 (use1-az1).
    assert spot[0] == pytest.approx(9.8318 * ratio, abs=1e-6)
    assert max(spot) < 21.957642


def test_dropped_regions_and_excluded_sizes_are_absent() -> None:
    offers = load_catalog()
    regions = {o.region for o in offers if o.provider == "azure"}
    assert not regions & {"usgovvirginia", "usgovarizona", "usgovtexas"}
    assert {"eastus", "eastus2", "westeurope"} <= regions
    names = {o.instance_type.name for o in offers}
    for size in catalog.AZURE_EXCLUDED_SIZES:
        assert f"Standard_{size}" not in names
    assert "Standard_ND96asr_A100_v4" not in names  # folded into the ARM name
    assert "Standard_ND96asr_v4" in names
    assert not any(o.provider == "aws" and catalog.aws_family(o.instance_type.name) in catalog.AWS_EXCLUDED_FAMILIES
                   for o in offers)
    assert not any(o.region.startswith("us-gov") for o in offers)


def test_instance_types_returns_a_fresh_dict() -> None:
    a = instance_types()
    a.clear()
    assert instance_types()


# ----------------------------------------------------------------------------- data files


TYPES_HEADER = "provider,name,vcpus,memory_gib,gpu_model,gpu_count,gpu_memory_gib,interconnect,architecture\n"
G5 = "aws,g5.xlarge,4,16.0,A10G,1,24.0,pcie,x86_64\n"
OFFERS_HEADER = "provider,instance_type,region,zone,market,usd_per_hour\n"


def test_snapshot_text_parses_to_the_model_and_refuses_what_it_cannot_hold() -> None:
    types = catalog.parse_instance_types(TYPES_HEADER + G5 + "aws,m5.large,2,8.0,,0,0.0,none,arm64\n")
    g5, m5 = types[("aws", "g5.xlarge")], types[("aws", "m5.large")]
    assert (g5.vcpus, g5.memory_gib, g5.gpu_model, g5.gpu_count, g5.gpu_memory_gib, g5.interconnect,
            g5.architecture) == (4, 16.0, "A10G", 1, 24.0, Interconnect.PCIE, "x86_64")
    assert (m5.gpu_model, m5.gpu_count, m5.interconnect, m5.architecture) == (None, 0, Interconnect.NONE, "arm64")
    with pytest.raises(ValueError, match="^instance_types.csv: unexpected header"):
        catalog.parse_instance_types(TYPES_HEADER.replace("vcpus", "cpus") + G5)
    with pytest.raises(ValueError, match="^instance_types.csv: unexpected header None$"):
        catalog.parse_instance_types("")
    with pytest.raises(ValueError, match=r"^instance_types.csv: duplicate \('aws', 'g5.xlarge'\)$"):
        catalog.parse_instance_types(TYPES_HEADER + G5 + G5)
    with pytest.raises(ValueError, match="^instance_types.csv: aws/g5.xlarge: unknown GPU 'A10-G'$"):
        catalog.parse_instance_types(TYPES_HEADER + G5.replace("A10G", "A10-G"))
    # offers: sorted by key, each a known type at a positive price
    offers = catalog.parse_offers(
        OFFERS_HEADER + "aws,g5.xlarge,us-east-1,use1-az2,spot,0.412300\n"
        "aws,g5.xlarge,us-east-1,,on_demand,1.006000\n" + "aws,g5.xlarge,us-east-1,use1-az1,spot,0.000001\n", types)
    assert [(o.key, o.usd_per_hour) for o in offers] == [
        ("aws/us-east-1/*/g5.xlarge/on_demand", 1.006), ("aws/us-east-1/use1-az1/g5.xlarge/spot", 0.000001),
        ("aws/us-east-1/use1-az2/g5.xlarge/spot", 0.4123)]
    assert all(o.instance_type is g5 for o in offers)
    with pytest.raises(ValueError, match="^offers.csv: unexpected header"):
        catalog.parse_offers(OFFERS_HEADER.replace("zone", "az"), types)
    with pytest.raises(ValueError, match="^offers.csv: unexpected header None$"):
        catalog.parse_offers("", types)
    with pytest.raises(ValueError, match="^offers.csv: unknown instance type gcp/g5.xlarge$"):
        catalog.parse_offers(OFFERS_HEADER + "gcp,g5.xlarge,us-east-1,,spot,0.4\n", types)
    for price in ("0.000000", "-0.5", "nan"):
        with pytest.raises(ValueError, match="^offers.csv: non-positive price in"):
            catalog.parse_offers(OFFERS_HEADER + f"aws,g5.xlarge,us-east-1,,spot,{price}\n", types)


def test_snapshot_rows_are_written_with_fixed_formatting() -> None:
    t = instance_types()[("aws", "g3s.xlarge")]  # 30.5 GiB, M60 8 GiB
    row = catalog.instance_type_row(t)
    assert row == {"provider": "aws", "name": "g3s.xlarge", "vcpus": "4", "memory_gib": "30.5", "gpu_model": "M60",
                   "gpu_count": "1", "gpu_memory_gib": "8.0", "interconnect": "pcie", "architecture": "x86_64"}
    cpu = Offer(catalog.InstanceType("aws", "m5.large", 2, 8.0), "us-east-1", "", Market.ON_DEMAND, 0.096)
    assert catalog.instance_type_row(cpu.instance_type)["gpu_model"] == ""
    assert catalog.offer_row(cpu) == {"provider": "aws", "instance_type": "m5.large", "region": "us-east-1",
                                      "zone": "", "market": "on_demand", "usd_per_hour": "0.096000"}
    text = catalog.render_csv(catalog.OFFER_COLUMNS, [catalog.offer_row(cpu)])
    assert text == OFFERS_HEADER + "aws,m5.large,us-east-1,,on_demand,0.096000\n"
    # a price is kept to 6 decimals: 9.8318 (p4d's 2022 spot in use1-az1) x 21.957642 / 32.7726 (= 0.67)
    assert catalog.round_price(9.8318 * 21.957642 / 32.7726) == 6.587306
    assert catalog.round_price(0.0000004) == 0.0 and catalog.round_price(0.0000005000001) == 0.000001


def test_snapshot_is_small() -> None:
    total = sum(p.stat().st_size for p in DATA.glob("*.csv"))
    assert 0 < total < 2_000_000


def test_snapshot_loads_without_the_raw_data() -> None:
    """In a fresh interpreter, refuse every file access under the raw data
    folder (an audit hook), then load the catalog from package data."""
    code = textwrap.dedent(
        f"""
        import sys
        FORBIDDEN = ("/shared/data", {str(SHARED)!r})

        def hook(event, args):
            if event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
                path = str(args[0])
                if any(f in path for f in FORBIDDEN):
                    raise PermissionError("catalog touched raw data: " + path)

        sys.addaudithook(hook)
        from providers.catalog import instance_types, load_catalog
        offers = load_catalog()
        types = instance_types()
        assert len(offers) > 1000 and len(types) > 60
        assert types[("aws", "p4d.24xlarge")].gpu_count == 8
        print(len(offers))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) == len(load_catalog())


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"raw data folder {SHARED} is absent")
def test_build_reproduces_the_shipped_snapshot(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "build_catalog.py"), "--shared", str(SHARED), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for name in ("instance_types.csv", "offers.csv"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), f"{name} is stale: rebuild it"
    # The counts in the README are the ones this build printed.
    assert result.stdout and result.stdout in (DATA / "README.md").read_text(encoding="utf-8")
