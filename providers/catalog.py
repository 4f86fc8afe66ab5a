"""GPU offer catalogs of AWS, GCP and Azure: normalisation, reviewed tables, loader.

Three parts, read top to bottom:

1. **Vocabulary.** :func:`normalise_gpu_model` maps any cloud's spelling of a GPU
   ("NVIDIA A100-SXM4-40GB", "Tesla T4", GCP ``a100-80gb``, ``h100-80gb-mega``)
   to one name from :data:`GPU_MODELS`.
2. **Reviewed tables.** Small hand-checked tables, from the clouds' public
   documentation, holding the facts a raw source lacks or gets wrong (GPU memory,
   interconnect, old AWS types, the Azure N-series sizes, Azure region names,
   2022 list prices). ``scripts/build_catalog.py`` combines them with the raw
   price files into the snapshot CSVs in ``providers/data/``.
3. **Loader.** :func:`load_catalog` and :func:`instance_types` read only the
   shipped snapshot (package data), never the raw files.

Every table here is data a reviewer can check line by line against the cited
documentation; keep them small and keep them sorted.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Final, NamedTuple

from fleetctl.model import InstanceType, Interconnect, Market, Offer

# ============================================================================ 1. vocabulary

#: Memory per GPU, GiB, for every normalised GPU model name. The keys ARE the
#: vocabulary: a model name is valid iff it is a key here.
#:
#: Design choice: the numbers are the vendors' nominal sizes (the "80" of
#: "A100 80GB"), not what ``nvidia-smi`` shows (a few % less, e.g. A10G 22.35
#: GiB), so the same model has the same number on every cloud. B200 is the
#: 180 GB per GPU of an HGX B200 board (AWS p6-b200: 8 x 180 = 1,440 GB).
#: K80 and M60 are *one GPU of a dual-GPU card* (12 and 8 GiB), which is also how
#: AWS (p2, g3) and Azure (NC, NV: "one-half of a card") count them.
GPU_MEMORY_GIB: Final[Mapping[str, float]] = MappingProxyType(
    {
        "A10": 24.0,
        "A100-40GB": 40.0,
        "A100-80GB": 80.0,
        "A10G": 24.0,
        "B200": 180.0,
        "H100-80GB": 80.0,
        "H200-141GB": 141.0,
        "K520": 4.0,
        "K80": 12.0,
        "L4": 24.0,
        "L40": 48.0,
        "L40S": 48.0,
        "M60": 8.0,
        "P100": 16.0,
        "P4": 8.0,
        "P40": 24.0,
        "T4": 16.0,
        "T4G": 16.0,
        "V100-16GB": 16.0,
        "V100-32GB": 32.0,
    }
)

#: The normalised GPU model names, sorted: the one vocabulary of catalogs, job
#: specs, job traces, demand series and policies (``fleetctl.policy.GPU_MODELS``
#: is this tuple), so a policy or job can name every model the catalog sells.
GPU_MODELS: Final[tuple[str, ...]] = tuple(sorted(GPU_MEMORY_GIB))

# Chip token (lower case, as it appears in a vendor string) -> normalised name,
# for chips that come in a single memory size.
_SINGLE_SIZE_CHIPS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "a10": "A10",
        "a10g": "A10G",
        "b200": "B200",
        "h200": "H200-141GB",
        "k520": "K520",
        "k80": "K80",
        "l4": "L4",
        "l40": "L40",
        "l40s": "L40S",
        "m60": "M60",
        "p100": "P100",
        "p4": "P4",
        "p40": "P40",
        "t4": "T4",
        "t4g": "T4G",
    }
)
# "a100", "v100m32" (Alibaba style), "h100"; an optional trailing memory size.
_MULTI_SIZE_CHIP = re.compile(r"^(a100|h100|v100)(?:m(\d+))?$")
_MEMORY_TOKEN = re.compile(r"^(\d+)(?:gb|gib|g)$")


def normalise_gpu_model(raw: str, memory_gib: float | None = None) -> str | None:
    """Map a cloud's or driver's GPU name to a name in :data:`GPU_MODELS`.

    ``raw`` may be any common spelling: "NVIDIA A100-SXM4-40GB", "Tesla T4",
    "NVIDIA A10G", GCP accelerator types ("a100", "a100-80gb", "h100-80gb-mega",
    "nvidia-tesla-v100"), Karpenter labels ("a10g", "v100"), Alibaba "V100M32".
    Case and separators do not matter; vendor words (NVIDIA, Tesla, SXM4, PCIe,
    HBM3, mega, ...) are ignored.

    ``memory_gib`` (per GPU) picks the variant of chips sold in several sizes
    when the name itself carries no size; a size in the name wins.

    Returns ``None`` when the string names no NVIDIA GPU we know (e.g.
    "AMD Radeon Pro V520", ""), or a size we have no name for (e.g. H100 NVL
    94 GB).

    Design choice: an A100 without any size is the 40 GB part, because every
    source that omits the size means that one (GCP ``nvidia-tesla-a100`` /
    ``a100``, the first A100 SKUs); a V100 without size is the 16 GB part for
    the same reason (GCP, AWS p3).
    """
    tokens = [t for t in re.split(r"[^a-z0-9]+", raw.lower()) if t]
    chip: str | None = None
    size: int | None = None
    for token in tokens:
        if (m := _MEMORY_TOKEN.fullmatch(token)) is not None:
            size = int(m.group(1))
        elif token in _SINGLE_SIZE_CHIPS and chip is None:
            chip = token
        elif (m := _MULTI_SIZE_CHIP.fullmatch(token)) is not None and chip is None:
            chip = m.group(1)
            if m.group(2) is not None:
                size = int(m.group(2))
    if chip is None:
        return None
    if chip in _SINGLE_SIZE_CHIPS:
        return _SINGLE_SIZE_CHIPS[chip]
    if size is None and memory_gib is not None:
        size = round(memory_gib)
    if chip == "a100":
        if size is None or 38 <= size <= 42:
            return "A100-40GB"
        return "A100-80GB" if 76 <= size <= 82 else None
    if chip == "v100":
        if size is None or 15 <= size <= 17:
            return "V100-16GB"
        return "V100-32GB" if 30 <= size <= 33 else None
    # h100
    if size is None or 76 <= size <= 82:
        return "H100-80GB"
    return None


# ============================================================================ 2. reviewed tables

# ---------------------------------------------------------------- AWS
# Source: AWS EC2 "Accelerated computing instance" specification pages
# (docs.aws.amazon.com/ec2/latest/instancetypes/ac.html and the previous-
# generation page pg.html) and the product pages of each family.


class GpuShape(NamedTuple):
    """vCPUs, nominal memory (GiB) and GPUs of one instance type."""

    vcpus: int
    memory_gib: float
    gpu_model: str
    gpu_count: int


#: AWS GPU types the measured spec file lacks (p2, p3, g2, g3, g3s) or gets
#: wrong (p3dn.24xlarge: measured with 0 GPUs because the driver was missing).
AWS_REVIEWED_SHAPES: Final[Mapping[str, GpuShape]] = MappingProxyType(
    {
        "g2.2xlarge": GpuShape(8, 15.0, "K520", 1),
        "g2.8xlarge": GpuShape(32, 60.0, "K520", 4),
        "g3.16xlarge": GpuShape(64, 488.0, "M60", 4),
        "g3.4xlarge": GpuShape(16, 122.0, "M60", 1),
        "g3.8xlarge": GpuShape(32, 244.0, "M60", 2),
        "g3s.xlarge": GpuShape(4, 30.5, "M60", 1),
        "p2.16xlarge": GpuShape(64, 732.0, "K80", 16),
        "p2.8xlarge": GpuShape(32, 488.0, "K80", 8),
        "p2.xlarge": GpuShape(4, 61.0, "K80", 1),
        "p3.16xlarge": GpuShape(64, 488.0, "V100-16GB", 8),
        "p3.2xlarge": GpuShape(8, 61.0, "V100-16GB", 1),
        "p3.8xlarge": GpuShape(32, 244.0, "V100-16GB", 4),
        "p3dn.24xlarge": GpuShape(96, 768.0, "V100-32GB", 8),
    }
)

#: Nominal memory (GiB) of the AWS GPU types whose vCPUs and GPUs come from the
#: measured file (which reports the MiB the OS sees, 3-5 % below nominal).
AWS_NOMINAL_MEMORY_GIB: Final[Mapping[str, float]] = MappingProxyType(
    {
        "g4dn.12xlarge": 192.0,
        "g4dn.16xlarge": 256.0,
        "g4dn.2xlarge": 32.0,
        "g4dn.4xlarge": 64.0,
        "g4dn.8xlarge": 128.0,
        "g4dn.metal": 384.0,
        "g4dn.xlarge": 16.0,
        "g5.12xlarge": 192.0,
        "g5.16xlarge": 256.0,
        "g5.24xlarge": 384.0,
        "g5.2xlarge": 32.0,
        "g5.48xlarge": 768.0,
        "g5.4xlarge": 64.0,
        "g5.8xlarge": 128.0,
        "g5.xlarge": 16.0,
        "g5g.16xlarge": 128.0,
        "g5g.2xlarge": 16.0,
        "g5g.4xlarge": 32.0,
        "g5g.8xlarge": 64.0,
        "g5g.metal": 128.0,
        "g5g.xlarge": 8.0,
        "g6.12xlarge": 192.0,
        "g6.16xlarge": 256.0,
        "g6.24xlarge": 384.0,
        "g6.2xlarge": 32.0,
        "g6.48xlarge": 768.0,
        "g6.4xlarge": 64.0,
        "g6.8xlarge": 128.0,
        "g6.xlarge": 16.0,
        "g6e.12xlarge": 384.0,
        "g6e.16xlarge": 512.0,
        "g6e.24xlarge": 768.0,
        "g6e.2xlarge": 64.0,
        "g6e.48xlarge": 1536.0,
        "g6e.4xlarge": 128.0,
        "g6e.8xlarge": 256.0,
        "g6e.xlarge": 32.0,
        "gr6.4xlarge": 128.0,
        "gr6.8xlarge": 256.0,
        "p4d.24xlarge": 1152.0,
        "p4de.24xlarge": 1152.0,
        "p5.48xlarge": 2048.0,
        "p6-b200.48xlarge": 2048.0,
    }
)

#: AWS multi-GPU types whose GPUs are SXM parts joined by NVLink/NVSwitch.
AWS_NVLINK_TYPES: Final[frozenset[str]] = frozenset(
    {
        "p3.16xlarge",
        "p3.8xlarge",
        "p3dn.24xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",  # 8 x B200 SXM on NVSwitch (HGX B200)
    }
)

#: AWS families with Graviton (arm64) CPUs among the GPU types.
AWS_ARM64_FAMILIES: Final[frozenset[str]] = frozenset({"g5g"})

#: AWS accelerator families left out on purpose, with the reason. They are not
#: NVIDIA GPUs, so a CUDA job cannot run on them.
AWS_EXCLUDED_FAMILIES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "dl1": "Habana Gaudi accelerators, not GPUs",
        "f1": "Xilinx FPGAs",
        "g4ad": "AMD Radeon Pro V520 GPUs (not NVIDIA/CUDA)",
        "inf1": "AWS Inferentia accelerators",
        "inf2": "AWS Inferentia2 accelerators",
        "trn1": "AWS Trainium accelerators",
        "trn1n": "AWS Trainium accelerators",
        "vt1": "Xilinx U30 video transcoding cards",
    }
)

#: AWS us-east-1 on-demand list prices (USD/h, Linux) at the date of the spot
#: snapshot (2022-05-31), for the types whose list price changed before the
#: date of the on-demand file (2026-07-20). Source: the Karpenter price file
#: history (32.772600 in every generation up to 2025-04-28) and AWS's June 2025
#: P4/P5 price reduction. Types not listed kept their price (checked for
#: p3.2xlarge, g5.xlarge: unchanged in all 37 generations 2023-09..2026-07, and
#: equal to the well-known 2022 list prices for g4dn, p2, p3, p3dn, g3).
AWS_ON_DEMAND_2022_USD: Final[Mapping[str, float]] = MappingProxyType(
    {
        "p4d.24xlarge": 32.7726,
    }
)

#: Regions that get AWS on-demand offers, and the region whose list price they
#: use. Design choice: the on-demand file only has us-east-1 (and GovCloud).
#: Like Karpenter, we reuse the us-east-1 price for us-east-2 and us-west-2,
#: which have had the same list prices as us-east-1 for GPU types; other
#: regions are dearer by varying amounts, so they get spot offers only.
AWS_ON_DEMAND_PRICE_REGION: Final[Mapping[str, str]] = MappingProxyType(
    {
        "us-east-1": "us-east-1",
        "us-east-2": "us-east-1",
        "us-west-2": "us-east-1",
    }
)

# ---------------------------------------------------------------- GCP
# Source: cloud.google.com/compute/docs/gpus and .../accelerator-optimized-machines.

#: GCP machine series whose multi-GPU shapes join their GPUs with NVLink
#: (a2: A100 SXM4 with NVSwitch; a3: H100 SXM5 with NVSwitch). g2 (L4) is PCIe.
GCP_NVLINK_SERIES: Final[frozenset[str]] = frozenset({"a2", "a3"})


class N1GpuLimit(NamedTuple):
    """The largest N1 machine one attachment of ``gpu_count`` GPUs allows."""

    gpu_count: int
    max_vcpus: int
    max_memory_gib: float


#: GPUs that attach to N1 machine types (``guestAccelerators``), by GCP
#: accelerator type: the valid GPU counts and, for each, the largest N1 machine
#: (vCPUs, memory) it may be attached to. Source: cloud.google.com/compute/docs/gpus
#: ("N1 general-purpose machine series" tables of T4, P4, V100 and P100). For P100 x 4
#: the table allows 96 vCPUs / 624 GB in some zones only; we keep the general 64 / 208.
#:
#: Design choice: an N1 + GPU shape is named ``<machine>+<count>x<accelerator>``
#: (``n1-standard-8+4xnvidia-tesla-v100``), one InstanceType per valid
#: combination, so the planner sees a shape like any other. Interconnect is PCIE
#: for all of them: GCE does not document the NVLink topology of attached V100s
#: per count, and claiming less than the truth only makes the planner careful.
#: These shapes are NOT in the snapshot: the price source has no per-GPU SKUs
#: for attached GPUs (``providers/data/README.md``, price rule 5), so no offer
#: can be priced; the GCP adapter still recognises such instances.
GCP_N1_ACCELERATORS: Final[Mapping[str, tuple[N1GpuLimit, ...]]] = MappingProxyType(
    {
        "nvidia-tesla-p100": (N1GpuLimit(1, 16, 104.0), N1GpuLimit(2, 32, 208.0), N1GpuLimit(4, 64, 208.0)),
        "nvidia-tesla-p4": (N1GpuLimit(1, 24, 156.0), N1GpuLimit(2, 48, 312.0), N1GpuLimit(4, 96, 624.0)),
        "nvidia-tesla-t4": (N1GpuLimit(1, 48, 312.0), N1GpuLimit(2, 48, 312.0), N1GpuLimit(4, 96, 624.0)),
        "nvidia-tesla-v100": (
            N1GpuLimit(1, 12, 78.0), N1GpuLimit(2, 24, 156.0), N1GpuLimit(4, 48, 312.0), N1GpuLimit(8, 96, 624.0),
        ),
    }
)

# ---------------------------------------------------------------- Azure
# Source: learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/*
# (NC, NCv2, NCv3, NCasT4_v3, NC A100 v4, ND, NDv2, ND A100 v4, NDm A100 v4,
# NV, NVv3, NVadsA10_v5 size tables). Keys are the size without "Standard_".

#: Azure N-series sizes: vCPUs, memory GiB, GPU model, whole GPUs.
AZURE_SIZES: Final[Mapping[str, GpuShape]] = MappingProxyType(
    {
        # NC (K80, one GPU = half a K80 card)
        "NC6": GpuShape(6, 56.0, "K80", 1),
        "NC12": GpuShape(12, 112.0, "K80", 2),
        "NC24": GpuShape(24, 224.0, "K80", 4),
        "NC24r": GpuShape(24, 224.0, "K80", 4),
        # NCv2 (P100)
        "NC6s_v2": GpuShape(6, 112.0, "P100", 1),
        "NC12s_v2": GpuShape(12, 224.0, "P100", 2),
        "NC24s_v2": GpuShape(24, 448.0, "P100", 4),
        "NC24rs_v2": GpuShape(24, 448.0, "P100", 4),
        # NCv3 (V100 16 GB PCIe)
        "NC6s_v3": GpuShape(6, 112.0, "V100-16GB", 1),
        "NC12s_v3": GpuShape(12, 224.0, "V100-16GB", 2),
        "NC24s_v3": GpuShape(24, 448.0, "V100-16GB", 4),
        "NC24rs_v3": GpuShape(24, 448.0, "V100-16GB", 4),
        # NCasT4_v3
        "NC4as_T4_v3": GpuShape(4, 28.0, "T4", 1),
        "NC8as_T4_v3": GpuShape(8, 56.0, "T4", 1),
        "NC16as_T4_v3": GpuShape(16, 110.0, "T4", 1),
        "NC64as_T4_v3": GpuShape(64, 440.0, "T4", 4),
        # NC A100 v4 (A100 80 GB PCIe)
        "NC24ads_A100_v4": GpuShape(24, 220.0, "A100-80GB", 1),
        "NC48ads_A100_v4": GpuShape(48, 440.0, "A100-80GB", 2),
        "NC96ads_A100_v4": GpuShape(96, 880.0, "A100-80GB", 4),
        # ND (P40)
        "ND6s": GpuShape(6, 112.0, "P40", 1),
        "ND12s": GpuShape(12, 224.0, "P40", 2),
        "ND24s": GpuShape(24, 448.0, "P40", 4),
        "ND24rs": GpuShape(24, 448.0, "P40", 4),
        # NDv2 (V100 32 GB SXM2, NVLink)
        "ND40rs_v2": GpuShape(40, 672.0, "V100-32GB", 8),
        # ND A100 v4 (A100 40 GB SXM4, NVSwitch) and NDm A100 v4 (80 GB)
        "ND96asr_v4": GpuShape(96, 900.0, "A100-40GB", 8),
        "ND96amsr_A100_v4": GpuShape(96, 1900.0, "A100-80GB", 8),
        # NV (M60, one GPU = half an M60 card)
        "NV6": GpuShape(6, 56.0, "M60", 1),
        "NV12": GpuShape(12, 112.0, "M60", 2),
        "NV24": GpuShape(24, 224.0, "M60", 4),
        # NVv3 (M60)
        "NV12s_v3": GpuShape(12, 112.0, "M60", 1),
        "NV24s_v3": GpuShape(24, 224.0, "M60", 2),
        "NV48s_v3": GpuShape(48, 448.0, "M60", 4),
        # NVadsA10_v5: only the whole-GPU sizes
        "NV36ads_A10_v5": GpuShape(36, 440.0, "A10", 1),
        "NV36adms_A10_v5": GpuShape(36, 880.0, "A10", 1),
        "NV72ads_A10_v5": GpuShape(72, 880.0, "A10", 2),
    }
)

#: Azure sizes whose GPUs are joined by NVLink/NVSwitch.
AZURE_NVLINK_SIZES: Final[frozenset[str]] = frozenset({"ND40rs_v2", "ND96asr_v4", "ND96amsr_A100_v4"})

#: Retail-price-sheet spellings that are not ARM size names -> the ARM size.
#: SpotLake lists the ND A100 v4 size twice, as ``ND96asr_v4`` (the ARM name)
#: and ``ND96asr_A100_v4`` (the meter name), with identical prices.
AZURE_SIZE_ALIASES: Final[Mapping[str, str]] = MappingProxyType({"ND96asr_A100_v4": "ND96asr_v4"})

#: Azure N*-sizes in the source that are left out on purpose, with the reason.
#: The build fails on an N* size that is in neither table, so a new size is
#: always reviewed.
AZURE_EXCLUDED_SIZES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "NC8ads_A10_v4": "A10 v4 (preview): GPU fraction per size not confirmed",
        "NC16ads_A10_v4": "A10 v4 (preview): GPU fraction per size not confirmed",
        "NC32ads_A10_v4": "A10 v4 (preview): GPU fraction per size not confirmed",
        "ND40s_v2": "not in Azure's NDv2 size table (only ND40rs_v2); specs unconfirmed",
        "NP10s": "Xilinx FPGA, not a GPU",
        "NP20s": "Xilinx FPGA, not a GPU",
        "NP40s": "Xilinx FPGA, not a GPU",
        "NV4as_v4": "fractional AMD MI25 GPU",
        "NV8as_v4": "fractional AMD MI25 GPU",
        "NV16as_v4": "fractional AMD MI25 GPU",
        "NV32as_v4": "AMD MI25 GPU (not NVIDIA/CUDA)",
        "NV6ads_A10_v5": "fractional A10 (1/6 GPU)",
        "NV12ads_A10_v5": "fractional A10 (1/3 GPU)",
        "NV18ads_A10_v5": "fractional A10 (1/2 GPU)",
        "NV6s_v2": "NVv2 (preview series): specs unconfirmed",
        "NV12s_v2": "NVv2 (preview series): specs unconfirmed",
        "NV24s_v2": "NVv2 (preview series): specs unconfirmed",
    }
)

#: Azure retail-price-sheet region display names -> ARM region names.
AZURE_REGIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "AE Central": "uaecentral",
        "AE North": "uaenorth",
        "AP East": "eastasia",
        "AP Southeast": "southeastasia",
        "AU Central": "australiacentral",
        "AU Central 2": "australiacentral2",
        "AU East": "australiaeast",
        "AU Southeast": "australiasoutheast",
        "BR South": "brazilsouth",
        "BR Southeast": "brazilsoutheast",
        "CA Central": "canadacentral",
        "CA East": "canadaeast",
        "CH North": "switzerlandnorth",
        "CH West": "switzerlandwest",
        "DE North": "germanynorth",
        "DE West Central": "germanywestcentral",
        "EU North": "northeurope",
        "EU West": "westeurope",
        "FR Central": "francecentral",
        "FR South": "francesouth",
        "IN Central": "centralindia",
        "IN South": "southindia",
        "IN West": "westindia",
        "JA East": "japaneast",
        "JA West": "japanwest",
        "KR Central": "koreacentral",
        "KR South": "koreasouth",
        "NO East": "norwayeast",
        "NO West": "norwaywest",
        "QA Central": "qatarcentral",
        "SE Central": "swedencentral",
        "SE South": "swedensouth",
        "UK South": "uksouth",
        "UK West": "ukwest",
        "US Central": "centralus",
        "US East": "eastus",
        "US East 2": "eastus2",
        "US North Central": "northcentralus",
        "US South Central": "southcentralus",
        "US West": "westus",
        "US West 2": "westus2",
        "US West 3": "westus3",
        "US West Central": "westcentralus",
        "ZA North": "southafricanorth",
        "ZA West": "southafricawest",
    }
)

#: Azure display names dropped on purpose: canary/test regions (EUAP, SLV),
#: the non-regional "Global" entry, and sovereign US Gov clouds (separate
#: accounts and endpoints).
AZURE_DROPPED_REGIONS: Final[frozenset[str]] = frozenset(
    {"Central US EUAP", "East US 2 EUAP", "East US SLV", "Global", "US Gov AZ", "US Gov TX", "US Gov Virginia"}
)


# ============================================================================ shape builders


def _interconnect(gpu_count: int, nvlink_capable: bool) -> Interconnect:
    """Design choice: interconnect describes how the GPUs of one machine reach
    *each other*. A single GPU has no peer, so it is PCIE (its host link) even
    when it is an SXM part (p3.2xlarge, a2-highgpu-1g); NVLINK needs >= 2 GPUs."""
    if gpu_count == 0:
        return Interconnect.NONE
    return Interconnect.NVLINK if nvlink_capable and gpu_count >= 2 else Interconnect.PCIE


def _gpu_type(
    provider: str, name: str, vcpus: int, memory_gib: float, gpu_model: str, gpu_count: int,
    *, nvlink_capable: bool, architecture: str = "x86_64",
) -> InstanceType:
    if gpu_model not in GPU_MODELS:
        raise ValueError(f"{provider}/{name}: GPU model {gpu_model!r} is not in the vocabulary")
    if gpu_count < 1:
        raise ValueError(f"{provider}/{name}: a GPU type needs gpu_count >= 1, got {gpu_count}")
    return InstanceType(
        provider=provider,
        name=name,
        vcpus=vcpus,
        memory_gib=float(memory_gib),
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        gpu_memory_gib=GPU_MEMORY_GIB[gpu_model],
        interconnect=_interconnect(gpu_count, nvlink_capable),
        architecture=architecture,
    )


def aws_family(name: str) -> str:
    """``"p4d.24xlarge"`` -> ``"p4d"``."""
    return name.split(".", 1)[0]


def aws_instance_type(name: str, measured: Mapping[str, str] | None) -> InstanceType | None:
    """The AWS GPU InstanceType ``name``, or ``None`` if it is not an NVIDIA GPU type.

    ``measured`` is the row of ``aws_instance_specs_measured.csv`` for ``name``
    (or ``None`` when the file lacks it). Precedence: :data:`AWS_REVIEWED_SHAPES`
    wins over the measured row (which lacks or gets wrong those types); otherwise
    vCPUs, GPU count and model come from the measured row, memory from
    :data:`AWS_NOMINAL_MEMORY_GIB` or else measured MiB / 1024 rounded to 0.1.
    Raises ``ValueError`` when the measured GPU name is not in the vocabulary.
    """
    family = aws_family(name)
    if family in AWS_EXCLUDED_FAMILIES:
        return None
    architecture = "arm64" if family in AWS_ARM64_FAMILIES else "x86_64"
    nvlink = name in AWS_NVLINK_TYPES
    shape = AWS_REVIEWED_SHAPES.get(name)
    if shape is not None:
        return _gpu_type("aws", name, shape.vcpus, shape.memory_gib, shape.gpu_model, shape.gpu_count,
                         nvlink_capable=nvlink, architecture=architecture)
    if measured is None or int(measured["gpu_count"] or 0) == 0:
        return None
    model = normalise_gpu_model(measured["gpu_model"])
    if model is None:
        raise ValueError(f"aws/{name}: unknown measured GPU model {measured['gpu_model']!r}")
    memory = AWS_NOMINAL_MEMORY_GIB.get(name)
    if memory is None:
        memory = round(int(measured["memory_mb_visible_to_os"]) / 1024, 1)
    return _gpu_type("aws", name, int(measured["vcpus"]), memory, model, int(measured["gpu_count"]),
                     nvlink_capable=nvlink, architecture=architecture)


def gcp_instance_type(row: Mapping[str, str]) -> InstanceType | None:
    """The GCP GPU InstanceType of one ``gcp_instance_catalog`` row, or ``None``
    for a machine type without bundled GPUs. Memory is ``memory_gb`` as given
    (Google's "GB" for machine memory are GiB)."""
    if not row["accelerator_type"]:
        return None
    model = normalise_gpu_model(row["accelerator_type"])
    if model is None:
        raise ValueError(f"gcp/{row['machine_type']}: unknown accelerator {row['accelerator_type']!r}")
    return _gpu_type("gcp", row["machine_type"], int(row["vcpus"]), float(row["memory_gb"]), model,
                     int(row["accelerator_count"]), nvlink_capable=row["series"] in GCP_NVLINK_SERIES)


def gcp_n1_gpu_type_name(machine_type: str, accelerator_type: str, gpu_count: int) -> str:
    """``("n1-standard-8", "nvidia-tesla-v100", 4)`` -> ``"n1-standard-8+4xnvidia-tesla-v100"``."""
    return f"{machine_type}+{gpu_count}x{accelerator_type}"


_N1_GPU_TYPE_NAME = re.compile(r"^(n1-[a-z0-9-]+)\+(\d+)x([a-z0-9-]+)$")


def parse_gcp_n1_gpu_type_name(name: str) -> tuple[str, str, int] | None:
    """Inverse of :func:`gcp_n1_gpu_type_name`: ``(machine_type, accelerator_type,
    gpu_count)``, or ``None`` for a name that is not an N1 + GPU shape."""
    m = _N1_GPU_TYPE_NAME.fullmatch(name)
    if m is None:
        return None
    return m.group(1), m.group(3), int(m.group(2))


def gcp_n1_gpu_instance_type(
    machine_type: str, vcpus: int, memory_gib: float, accelerator_type: str, gpu_count: int,
) -> InstanceType | None:
    """The InstanceType of N1 machine ``machine_type`` (``vcpus``, ``memory_gib``)
    with ``gpu_count`` GPUs of ``accelerator_type`` attached, or ``None`` when GCE
    refuses that combination (not an N1 machine, a GPU that does not attach to
    N1, a count the GPU does not come in, or a machine too large for the count:
    :data:`GCP_N1_ACCELERATORS`)."""
    if not machine_type.startswith("n1-"):
        return None
    limits = {limit.gpu_count: limit for limit in GCP_N1_ACCELERATORS.get(accelerator_type, ())}
    limit = limits.get(gpu_count)
    if limit is None or vcpus > limit.max_vcpus or memory_gib > limit.max_memory_gib:
        return None
    model = normalise_gpu_model(accelerator_type)
    if model is None:
        raise ValueError(f"gcp/{accelerator_type}: not in the GPU vocabulary")
    return _gpu_type("gcp", gcp_n1_gpu_type_name(machine_type, accelerator_type, gpu_count), vcpus,
                     memory_gib, model, gpu_count, nvlink_capable=False)


def azure_size(raw_size: str) -> str:
    """The ARM size (without ``Standard_``) for a price-sheet size name."""
    return AZURE_SIZE_ALIASES.get(raw_size, raw_size)


def azure_instance_type(size: str) -> InstanceType | None:
    """The Azure GPU InstanceType ``Standard_<size>``, or ``None`` for a size in
    :data:`AZURE_EXCLUDED_SIZES` or a non-N-series size. Raises ``KeyError`` for
    an N-series size in neither table (it must be reviewed first)."""
    size = azure_size(size)
    if size in AZURE_EXCLUDED_SIZES or not size.startswith("N"):
        return None
    shape = AZURE_SIZES[size]
    return _gpu_type("azure", f"Standard_{size}", shape.vcpus, shape.memory_gib, shape.gpu_model,
                     shape.gpu_count, nvlink_capable=size in AZURE_NVLINK_SIZES)


def azure_region(display_name: str) -> str | None:
    """ARM region name for a price-sheet display name; ``None`` for a region in
    :data:`AZURE_DROPPED_REGIONS`; ``KeyError`` for one in neither table."""
    if display_name in AZURE_DROPPED_REGIONS:
        return None
    return AZURE_REGIONS[display_name]


def round_price(usd_per_hour: float) -> float:
    """Prices are kept to 6 decimals (AWS's own precision), so the snapshot is
    exact in text and every comparison is made on the shipped value."""
    return round(usd_per_hour, 6)


def split_spot_at_or_above_on_demand(offers: Iterable[Offer]) -> tuple[list[Offer], list[Offer]]:
    """Split ``offers`` into (kept, dropped): a spot offer is dropped when an
    on-demand offer of the same (provider, type, region, zone) exists and the
    spot price is >= the on-demand price (a spot price at the on-demand cap
    buys no discount, only interruptions). Order is preserved."""
    offers = list(offers)
    on_demand = {
        (o.provider, o.instance_type.name, o.region, o.zone): o.usd_per_hour
        for o in offers
        if o.market is Market.ON_DEMAND
    }
    kept: list[Offer] = []
    dropped: list[Offer] = []
    for o in offers:
        od = on_demand.get((o.provider, o.instance_type.name, o.region, o.zone))
        if o.market is Market.SPOT and od is not None and o.usd_per_hour >= od:
            dropped.append(o)
        else:
            kept.append(o)
    return kept, dropped


# ============================================================================ snapshot format

INSTANCE_TYPE_COLUMNS: Final[tuple[str, ...]] = (
    "provider", "name", "vcpus", "memory_gib", "gpu_model", "gpu_count", "gpu_memory_gib",
    "interconnect", "architecture",
)
OFFER_COLUMNS: Final[tuple[str, ...]] = ("provider", "instance_type", "region", "zone", "market", "usd_per_hour")


def instance_type_row(t: InstanceType) -> dict[str, str]:
    """The snapshot row of an InstanceType (fixed formatting: GiB to 0.1)."""
    return {
        "provider": t.provider,
        "name": t.name,
        "vcpus": str(t.vcpus),
        "memory_gib": f"{t.memory_gib:.1f}",
        "gpu_model": t.gpu_model or "",
        "gpu_count": str(t.gpu_count),
        "gpu_memory_gib": f"{t.gpu_memory_gib:.1f}",
        "interconnect": t.interconnect.value,
        "architecture": t.architecture,
    }


def offer_row(o: Offer) -> dict[str, str]:
    """The snapshot row of an Offer (fixed formatting: USD to 6 decimals)."""
    return {
        "provider": o.provider,
        "instance_type": o.instance_type.name,
        "region": o.region,
        "zone": o.zone,
        "market": o.market.value,
        "usd_per_hour": f"{o.usd_per_hour:.6f}",
    }


def instance_type_sort_key(t: InstanceType) -> tuple[str, str]:
    return (t.provider, t.name)


def offer_sort_key(o: Offer) -> tuple[str, str, str, str, str]:
    """Row order of ``offers.csv``: provider, type, region, zone, market."""
    return (o.provider, o.instance_type.name, o.region, o.zone, o.market.value)


def render_csv(columns: tuple[str, ...], rows: Iterable[Mapping[str, str]]) -> str:
    """CSV text with a header, ``\\n`` line ends and minimal quoting."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def parse_instance_types(text: str) -> dict[tuple[str, str], InstanceType]:
    """Parse ``instance_types.csv`` text; raises ``ValueError`` on a bad header,
    a duplicate key or a GPU model outside the vocabulary."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != INSTANCE_TYPE_COLUMNS:
        raise ValueError(f"instance_types.csv: unexpected header {reader.fieldnames}")
    types: dict[tuple[str, str], InstanceType] = {}
    for row in reader:
        gpu_model = row["gpu_model"] or None
        if gpu_model is not None and gpu_model not in GPU_MODELS:
            raise ValueError(f"instance_types.csv: {row['provider']}/{row['name']}: unknown GPU {gpu_model!r}")
        t = InstanceType(
            provider=row["provider"],
            name=row["name"],
            vcpus=int(row["vcpus"]),
            memory_gib=float(row["memory_gib"]),
            gpu_model=gpu_model,
            gpu_count=int(row["gpu_count"]),
            gpu_memory_gib=float(row["gpu_memory_gib"]),
            interconnect=Interconnect(row["interconnect"]),
            architecture=row["architecture"],
        )
        key = (t.provider, t.name)
        if key in types:
            raise ValueError(f"instance_types.csv: duplicate {key}")
        types[key] = t
    return types


def parse_offers(text: str, types: Mapping[tuple[str, str], InstanceType]) -> tuple[Offer, ...]:
    """Parse ``offers.csv`` text against ``types``; raises ``ValueError`` on a
    bad header, an unknown instance type, or a non-positive price. Returns the
    offers sorted by :attr:`Offer.key`."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != OFFER_COLUMNS:
        raise ValueError(f"offers.csv: unexpected header {reader.fieldnames}")
    offers: list[Offer] = []
    for row in reader:
        t = types.get((row["provider"], row["instance_type"]))
        if t is None:
            raise ValueError(f"offers.csv: unknown instance type {row['provider']}/{row['instance_type']}")
        price = float(row["usd_per_hour"])
        if not price > 0:
            raise ValueError(f"offers.csv: non-positive price in {row}")
        offers.append(Offer(t, row["region"], row["zone"], Market(row["market"]), price))
    return tuple(sorted(offers, key=lambda o: o.key))


# ============================================================================ 3. loader

DATA_PACKAGE: Final[str] = "providers"
INSTANCE_TYPES_FILE: Final[str] = "data/instance_types.csv"
OFFERS_FILE: Final[str] = "data/offers.csv"


@functools.cache
def _snapshot() -> tuple[tuple[tuple[tuple[str, str], InstanceType], ...], tuple[Offer, ...]]:
    # Design choice: read through importlib.resources so the catalog works from
    # an installed wheel or zip, and never touches the raw data in /work/shared.
    root = resources.files(DATA_PACKAGE)
    types = parse_instance_types(root.joinpath(INSTANCE_TYPES_FILE).read_text(encoding="utf-8"))
    offers = parse_offers(root.joinpath(OFFERS_FILE).read_text(encoding="utf-8"), types)
    return tuple(sorted(types.items())), offers


def load_catalog() -> tuple[Offer, ...]:
    """Every offer of the shipped snapshot, sorted by :attr:`Offer.key`.

    Reads only package data (``providers/data/*.csv``); parsed once per process.
    """
    return _snapshot()[1]


def instance_types() -> dict[tuple[str, str], InstanceType]:
    """Every instance type of the shipped snapshot, keyed by ``(provider, name)``.

    Returns a new dict each call (the values are frozen), so callers may mutate it.
    """
    return dict(_snapshot()[0])
