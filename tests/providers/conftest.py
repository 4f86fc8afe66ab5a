"""Fixtures shared by the provider tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def local_zone_five_hours_west(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is UTC-5 for the test (a POSIX TZ: no tz database needed), so a time
    without an offset read as local time would show."""
    monkeypatch.setenv("TZ", "EST5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
