"""`fleetctl catalog`: list offers from the shipped snapshots."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import TableFormat, console, err_console, fail, one_of
from fleetctl.cli.tables import print_table
from fleetctl.codec import offer_to_dict
from fleetctl.model import CLOUDS, Market, Offer
from fleetctl.render import counted


def _sort_key(o: Offer) -> tuple:
    per_gpu = o.usd_per_gpu_hour
    return (per_gpu is None, per_gpu if per_gpu is not None else o.usd_per_hour, o.key)


def filter_offers(
    offers: tuple[Offer, ...],
    *,
    gpu: list[str] | None = None,
    provider: list[str] | None = None,
    market: list[str] | None = None,
    region: list[str] | None = None,
) -> list[Offer]:
    """Offers matching every given filter (each filter matches any of its values),
    sorted by USD per GPU-hour, cheapest first."""
    result = [
        o
        for o in offers
        if (not gpu or o.instance_type.gpu_model in gpu)
        and (not provider or o.provider in provider)
        and (not market or o.market.value in market)
        and (not region or o.region in region)
    ]
    return sorted(result, key=_sort_key)


def catalog(
    gpu: Annotated[Optional[list[str]], typer.Option(
        "--gpu", help="GPU model, e.g. A100-80GB, any case (repeatable).", metavar="<str>")] = None,
    provider: Annotated[Optional[list[str]], typer.Option(
        "--provider", help="aws, gcp or azure (repeatable).", metavar="<str>")] = None,
    market: Annotated[Optional[list[str]], typer.Option(
        "--market", help="spot or on_demand (repeatable).", metavar="<str>")] = None,
    region: Annotated[Optional[list[str]], typer.Option(
        "--region", help="Region id, e.g. us-east-1, any case (repeatable).", metavar="<str>")] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Show at most this many rows in the table (0: all).")] = 50,
    output: Annotated[TableFormat, typer.Option("--format", help="table or json.", **one_of(TableFormat))] = TableFormat.table,
) -> None:
    """List offers (instance type x region x zone x market, with USD/hour) from the
    shipped catalog snapshots of AWS, GCP and Azure, cheapest per GPU-hour first."""
    from providers.catalog import GPU_MODELS, load_catalog

    by_lower = {m.lower(): m for m in GPU_MODELS}
    gpu = [by_lower.get(g.lower(), g) for g in gpu or []]  # a100-80gb is A100-80GB
    for g in gpu:
        if g not in GPU_MODELS:
            fail(f"--gpu {g!r} is not a known GPU model; known: {', '.join(sorted(GPU_MODELS))}", 2)
    provider = [p.lower() for p in provider or []]
    for p in provider:
        if p not in CLOUDS:
            fail(f"--provider {p!r} is not a provider in the catalog; use one of: {', '.join(CLOUDS)}", 2)
    market = [m.lower().replace("-", "_") for m in market or []]  # on-demand is on_demand
    for m in market:
        if m not in {x.value for x in Market}:
            fail(f"--market {m!r}: use spot or on_demand", 2)
    offers = load_catalog()
    regions = sorted({o.region for o in offers})
    region = [r.lower() for r in region or []]  # US-EAST-1 is us-east-1 (every cloud's ids are lower case)
    for r in region:
        if r not in regions:
            from fleetctl.yamlerrors import did_you_mean

            hint = did_you_mean(r, regions)
            known = "; ".join(f"{c}: {', '.join(sorted({o.region for o in offers if o.provider == c}))}"
                              for c in CLOUDS)
            fail(f"--region {r!r} is not a region in the catalog" + (f" (did you mean {hint!r}?)" if hint else "")
                 + f"; known: {known}", 2)
    for r in region if provider else []:  # a region only other clouds sell in gave an empty table, no word
        clouds = sorted({o.provider for o in offers if o.region == r})
        if not set(clouds) & set(provider):
            err_console.print(f"note: --region {r} is a region of {', '.join(clouds)}, not of --provider "
                              f"{', '.join(provider)}: no offer of those is there", markup=False)
    offers = filter_offers(offers, gpu=gpu, provider=provider, market=market, region=region)
    if output is TableFormat.json:
        docs = []
        for o in offers:
            d = offer_to_dict(o)
            d["usd_per_gpu_hour"] = None if o.usd_per_gpu_hour is None else round(o.usd_per_gpu_hour, 6)
            docs.append(d)
        # Coloured on a terminal only: rich takes FORCE_COLOR (set by many CI runners) for one, and its
        # colours in piped JSON broke `| jq`.
        console.print_json(json.dumps(docs)) if sys.stdout.isatty() else print(json.dumps(docs, indent=2))
        return
    shown = f" (showing {limit})" if limit and len(offers) > limit else ""
    table = Table(title=counted(len(offers), "offer") + shown)
    for col in ("provider", "instance type", "GPUs", "vCPU", "GiB", "region", "zone", "market", "$/h", "$/GPU-h"):
        table.add_column(col, justify="right" if col in {"GPUs", "vCPU", "GiB", "$/h", "$/GPU-h"} else "left")
    for o in offers[: limit or None]:
        it = o.instance_type
        table.add_row(
            o.provider,
            it.name,
            f"{it.gpu_count} x {it.gpu_model}" if it.gpu_count else "-",
            str(it.vcpus),
            f"{it.memory_gib:g}",
            o.region,
            o.zone or "(regional)",
            o.market.value,
            f"{o.usd_per_hour:.4f}",
            f"{o.usd_per_gpu_hour:.4f}" if o.usd_per_gpu_hour is not None else "-",
        )
    print_table(console, table)
