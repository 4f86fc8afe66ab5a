"""Names shared by what Terraform declares and what the provider adapters use.

Terraform creates one launch template (AWS), instance template (GCP) or scale
set (Azure) per GPU pool, named from the cluster and the pool; the adapters
launch nodes from it by that name. Both sides call these functions, so the
names cannot drift apart.

A *GPU pool* is one normalised GPU model (``A100-80GB``) in one region: the
unit a platform team allows or forbids in the policy's ``gpu_models``.
"""

from __future__ import annotations

import re
from typing import Final

#: Cluster names: DNS-label-like, short enough for every cloud's resource names.
#: Check with ``fullmatch`` (``$`` also matches before a trailing newline); the
#: ``^...$`` anchors are for the JSON Schema, whose patterns are ECMA regexes.
CLUSTER_NAME: Final[re.Pattern[str]] = re.compile(r"^[a-z][a-z0-9-]{0,22}[a-z0-9]$")

_NOT_NAME = re.compile(r"[^a-z0-9]+")


def pool_name(gpu_model: str) -> str:
    """``"A100-80GB"`` -> ``"a100-80gb"``; ``"V100-16GB"`` -> ``"v100-16gb"``."""
    name = _NOT_NAME.sub("-", gpu_model.lower()).strip("-")
    if not name:
        raise ValueError(f"GPU model {gpu_model!r} gives an empty pool name")
    return name


def launch_template_name(cluster: str, pool: str) -> str:
    """The AWS launch template of one pool (launch template names are per region)."""
    return f"fleetctl-{cluster}-{pool}"


def placement_group_name(cluster: str, pool: str) -> str:
    """The AWS cluster placement group of one pool (terraform/modules/aws-pool), used by gang launches only."""
    return f"fleetctl-{cluster}-{pool}"


def interruption_queue_name(cluster: str) -> str:
    """The SQS queue that EventBridge fills with the EC2 interruption events of one region."""
    return f"fleetctl-{cluster}-interruptions"
