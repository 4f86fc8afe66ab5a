"""The backtest: one job trace, one market, fleetctl and its peers, same simulator.

:func:`run_backtest` simulates (:func:`fleetctl.sim.simulator.simulate`) the
``fleetctl`` planner with the policy as given and each named baseline of
:mod:`fleetctl.sim.baselines`, and :func:`result_document` gives the JSON
(``format_version`` "1")::

    {"format_version": "1", "lower_bound_cost_usd": X,
     "policies": {NAME: {"cost_usd", "useful_gpu_hours", "lost_gpu_hours", "gpu_utilization",
                         "wait_p50_hours", "wait_p95_hours", "deadline_misses", "jobs_total",
                         "jobs_completed", "jobs_lost", "interruptions", "migrations"}}}

**Lower bound.** ``lower_bound_cost_usd`` = sum over jobs of
``duration_hours x workers x gpus_per_worker x c(job)``, where ``c(job)`` is the
lowest USD per GPU-hour of any offer of the market (on-demand at its price;
spot at any price it takes at a tick with capacity, over the market window)
that the policy allows, the job may use (spot only for a spot-eligible job:
its own ``spot_eligible``, else its priority class's) and whose instance type
holds one worker of the job (GPU model, GPU count, vCPUs, memory). It is the cost of the useful
GPU-hours alone at the best price ever seen: no idle time, no launch delay,
no interruptions, no capacity limits. A job no offer holds adds 0 and is
reported by :func:`exclusions`.

Metrics (definitions in :mod:`fleetctl.sim.simulator`); ``wait_p50_hours`` and
``wait_p95_hours`` are percentiles of the per-job wait (linear interpolation);
``deadline_misses`` is a count of jobs. Floats are rounded to 6 decimals so the
JSON is stable. Same inputs and seed, same JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from fleetctl.model import Job, Market as OfferMarket, Offer, Policy
from fleetctl.sim.baselines import PLANNERS, planner_for
from fleetctl.sim.market import Market
from fleetctl.sim.simulator import RiskForecaster, SimConfig, SimResult, simulate

FORMAT_VERSION = "1"
METRIC_KEYS = ("cost_usd", "useful_gpu_hours", "lost_gpu_hours", "gpu_utilization", "wait_p50_hours",
               "wait_p95_hours", "deadline_misses", "jobs_total", "jobs_completed", "jobs_lost", "interruptions",
               "migrations")


@dataclass(frozen=True, slots=True)
class Backtest:
    """Every policy's simulation result, by name (``fleetctl`` first), and the lower bound."""

    results: tuple[tuple[str, SimResult], ...]
    lower_bound_cost_usd: float

    def result(self, name: str) -> SimResult:
        return dict(self.results)[name]


def parse_compare(text: str) -> tuple[str, ...]:
    """``"on-demand,spot-greedy"`` -> the names, ``fleetctl`` first, each once.
    ``ValueError`` for an unknown name."""
    names = ["fleetctl"]
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        planner_for(name)
        if name not in names:
            names.append(name)
    return tuple(names)


def _market_offers(market: Market) -> list[Offer]:
    """Every offer the market ever sells (spot only if it ever has capacity), at every price it takes."""
    out: list[Offer] = []
    for t in market.traces:
        out.append(t.offer_on_demand)
        if any(c > 0 for c in t.capacity):
            # With per-tick prices, only those of ticks with capacity: offer_spot holds the price of tick 0,
            # which could not be paid when tick 0 had none.
            prices = ({t.offer_spot.usd_per_hour} if t.prices is None
                      else {p for p, c in zip(t.prices, t.capacity) if c > 0})
            out.extend(Offer(t.offer_spot.instance_type, t.offer_spot.region, t.offer_spot.zone, OfferMarket.SPOT, p)
                       for p in sorted(prices))
    return out


def _allowed(offer: Offer, policy: Policy) -> str | None:
    """Why ``policy`` excludes ``offer``, or ``None``."""
    it = offer.instance_type
    if policy.providers and offer.provider not in policy.providers:
        return f"provider {offer.provider} is not in the policy's providers ({', '.join(policy.providers)})"
    if policy.regions and offer.region not in policy.regions:
        return f"region {offer.region} is not in the policy's regions ({', '.join(policy.regions)})"
    if it.gpu_model is not None and policy.gpu_models and it.gpu_model not in policy.gpu_models:
        return f"GPU model {it.gpu_model} is not in the policy's gpu_models"
    if offer.market is OfferMarket.SPOT and policy.max_spot_share <= 0:
        return "the policy's max_spot_share is 0 (on-demand only)"
    return None


def _holds(job: Job, offer: Offer) -> bool:
    it = offer.instance_type
    if job.gpus_per_worker > it.gpu_count or job.vcpus_per_worker > it.vcpus or job.memory_gib_per_worker > it.memory_gib:
        return False
    if job.gpus_per_worker and job.gpu_models and it.gpu_model not in job.gpu_models:
        return False
    return not (job.gpus_per_worker and job.gpu_memory_gib_per_gpu > it.gpu_memory_gib)


#: The lines of ``exclusions`` that say nothing can run (the CLI stops there).
NO_OFFER = "the policy excludes every offer of the market: no job can run"
NO_OFFER_IN_BUDGET = "no node fits the policy's budget: no job can run"


def exclusions(market: Market, policy: Policy, jobs: tuple[Job, ...] | list[Job] = ()) -> tuple[str, ...]:
    """Lines for people: the market's offers the policy excludes and why, and
    the jobs no allowed offer can hold."""
    lines = []
    for t in market.traces:
        for offer in (t.offer_spot, t.offer_on_demand):
            why = _allowed(offer, policy)
            if why:
                lines.append(f"excluded {offer.key}: {why}")
    allowed = [o for o in _market_offers(market) if _allowed(o, policy) is None]
    if not allowed:
        lines.append(NO_OFFER)
    elif policy.max_usd_per_hour is not None:
        cheapest = min(allowed, key=lambda o: o.usd_per_hour)
        if cheapest.usd_per_hour > policy.max_usd_per_hour:
            lines.append(f"{NO_OFFER_IN_BUDGET}: budget.max_usd_per_hour {policy.max_usd_per_hour:g} is below "
                         f"the cheapest allowed offer ({cheapest.key}, {cheapest.usd_per_hour:g} USD/h)")
    stuck = [j.job_id for j in jobs if not any(_holds(j, o) for o in allowed)]
    if stuck:
        lines.append(f"{len(stuck)} job(s) fit no allowed offer and cannot run: {', '.join(stuck[:5])}"
                     + (" ..." if len(stuck) > 5 else ""))
    return tuple(lines)


def lower_bound_cost(jobs: tuple[Job, ...] | list[Job], market: Market, policy: Policy) -> float:
    """See the module docstring."""
    offers = [o for o in _market_offers(market) if _allowed(o, policy) is None and o.instance_type.gpu_count > 0]
    total = 0.0
    for j in jobs:
        spot_ok = j.spot_eligible if j.spot_eligible is not None else policy.priority_class(j.priority).spot_eligible
        prices = [o.usd_per_gpu_hour for o in offers if _holds(j, o) and (spot_ok or o.market is OfferMarket.ON_DEMAND)]
        if prices and j.gpus:
            total += j.duration_hours * j.gpus * min(p for p in prices if p is not None)
    return total


def run_backtest(jobs: tuple[Job, ...] | list[Job], market: Market, policy: Policy, names: tuple[str, ...],
                 config: SimConfig = SimConfig(),
                 progress: Callable[[str, float], None] | None = None,
                 forecaster: RiskForecaster | None = None) -> Backtest:
    """Simulate each named policy (``fleetctl`` must be among them).

    ``forecaster`` (interruption risk by offer at a time, from the market up
    to that time) feeds the ``fleetctl`` run only; ``fleetctl-no-forecast`` is
    the same planner without it (the policy's default risk per market)."""
    if "fleetctl" not in names:
        raise ValueError("the backtest always includes fleetctl")
    results = []
    for name in names:
        planner = planner_for(name)
        cb = (lambda f, n=name: progress(n, f)) if progress else None
        results.append((name, simulate(jobs, market, policy, planner=planner, config=config, progress=cb,
                                       forecaster=forecaster if name == "fleetctl" else None)))
    return Backtest(tuple(results), lower_bound_cost(jobs, market, policy))


def percentile(values: tuple[float, ...] | list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def metrics(r: SimResult) -> dict[str, float | int]:
    return {
        "cost_usd": round(r.cost_usd, 6),
        "useful_gpu_hours": round(r.useful_gpu_hours, 6),
        "lost_gpu_hours": round(r.lost_gpu_hours, 6),
        "gpu_utilization": round(r.gpu_utilization, 6),
        "wait_p50_hours": round(percentile(r.wait_hours, 50), 6),
        "wait_p95_hours": round(percentile(r.wait_hours, 95), 6),
        "deadline_misses": r.deadline_misses,
        "jobs_total": r.jobs_total,
        "jobs_completed": r.jobs_completed,
        "jobs_lost": r.jobs_lost,
        "interruptions": r.interruptions,
        "migrations": r.migrations,
    }


def result_document(bt: Backtest) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "lower_bound_cost_usd": round(bt.lower_bound_cost_usd, 6),
        "policies": {name: metrics(r) for name, r in bt.results},
    }


def write_report(bt: Backtest, directory: str) -> str:
    """Write ``backtest.png`` (cumulative cost and running GPUs over time, per
    policy) into ``directory``; returns its path. Needs matplotlib."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for name, r in bt.results:
        ts = [s.at_utc for s in r.samples]
        ax1.step(ts, [s.cost_usd for s in r.samples], where="post", label=name)
        ax2.step(ts, [s.running_gpus for s in r.samples], where="post", label=name)
    ax1.set_ylabel("cumulative cost (USD)")
    ax1.axhline(bt.lower_bound_cost_usd, color="grey", linestyle=":", label="lower bound (total)")
    ax1.legend()
    ax2.set_ylabel("running GPUs")
    ax2.set_xlabel("simulated time (UTC)")
    fig.autofmt_xdate()
    path = os.path.join(directory, "backtest.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["Backtest", "METRIC_KEYS", "PLANNERS", "exclusions", "lower_bound_cost", "parse_compare", "result_document",
           "run_backtest", "write_report"]
