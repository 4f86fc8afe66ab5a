"""Retries live in wrappers, not in adapters (``providers/base.py``).

:class:`ThrottleRetry` wraps any Provider and retries the calls the cloud
throttled, with bounded, jittered exponential backoff. Every adapter raises
``Throttled`` for its cloud's rate-limit answers (AWS ``RequestLimitExceeded``
and ``Throttling``, GCP HTTP 429 / ``rateLimitExceeded``, Azure 429), so one
wrapper serves all of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from fleetctl.model import InterruptionEvent, Node, Offer
from providers.base import LaunchRequest, LaunchResult, Provider, Throttled

T = TypeVar("T")


class ThrottleRetry:
    """Any Provider, with ``Throttled`` calls retried: at most ``attempts``
    tries, waiting a full-jitter exponential backoff between them
    (``uniform(0, min(max_delay, base_delay * 2**try))``). The last
    ``Throttled`` propagates. Every other error passes through at once.

    Safe for ``launch`` because launches are idempotent by key, and for
    ``acknowledge`` because acknowledging twice is acknowledging once.
    ``sleep`` and ``rng`` are injected, so tests neither wait nor depend on luck.

    Design choice: without an ``rng`` the jitter is seeded from the OS
    (``os.urandom``) in each wrapper. A fixed seed gave every controller
    process the same "random" waits, so controllers throttled together
    retried together, which the jitter is there to prevent. Nothing that must
    be reproducible goes through this wrapper: the sandbox, the simulator and
    the backtest use their own providers.
    """

    def __init__(self, inner: Provider, *, attempts: int = 4, base_delay_seconds: float = 0.5,
                 max_delay_seconds: float = 8.0, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        self._inner = inner
        self._attempts = attempts
        self._base = base_delay_seconds
        self._max = max_delay_seconds
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()  # seeded from os.urandom
        self.name = inner.name
        self.capabilities = inner.capabilities

    def _retry(self, fn: Callable[..., T], /, *args: Any) -> T:
        for attempt in range(self._attempts):
            try:
                return fn(*args)
            except Throttled:
                if attempt == self._attempts - 1:
                    raise
                self._sleep(self._rng.uniform(0.0, min(self._max, self._base * 2**attempt)))
        raise AssertionError("unreachable")  # the loop returns or raises

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        return self._retry(self._inner.offers, now)

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        return self._retry(self._inner.nodes, now)

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        return self._retry(self._inner.launch, request, now)

    def terminate(self, node_id: str, now: datetime) -> None:
        self._retry(self._inner.terminate, node_id, now)

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        return self._retry(self._inner.interruption_events, now)

    def acknowledge(self, event_id: str) -> None:
        self._retry(self._inner.acknowledge, event_id)  # idempotent: a second acknowledgement changes nothing

