"""Log output of the long-running commands (``daemon``, ``node-watch``).

Two formats, both with times in UTC (ISO 8601, ``Z``), one record a line:

* ``text`` (the default), for a terminal or journald:
  ``2026-11-27T14:29:12.538Z INFO fleetctl.daemon: tick 1: ...``;
* ``json``, for a log pipeline (Loki, Elasticsearch, CloudWatch): one JSON
  object a line with ``time``, ``level``, ``logger`` and ``message``, plus
  ``exception`` (the traceback as text) when the record carries one, and any
  ``extra=`` fields a caller adds. A multi-line message or traceback stays one
  line (JSON escapes the newlines), so a collector never splits a record.
  On a stderr that is not UTF-8 the lines are ASCII (JSON's ``\\u`` escapes).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")

#: Attributes every LogRecord has; the others were added with ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


def utc_time(record: logging.LogRecord) -> str:
    """The record's time as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return utc_time(record)


class JsonFormatter(logging.Formatter):
    """``ascii_only``: escape every character beyond ASCII as JSON does (``\\u00e9``,
    a surrogate pair above U+FFFF), for a stream that cannot encode them: Python's
    stderr would write those as ``\\xe9`` or ``\\U0001f600``, which no JSON parser
    reads. Either way the collector decodes the same strings."""

    def __init__(self, *, ascii_only: bool = False) -> None:
        super().__init__()
        self.ascii_only = ascii_only

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": utc_time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        return json.dumps(entry, default=str, ensure_ascii=self.ascii_only)


def writes_utf8(stream: Any) -> bool:
    """Whether ``stream`` encodes text as UTF-8 (a stream without an encoding is taken to)."""
    import codecs

    encoding = getattr(stream, "encoding", None)
    try:
        return encoding is None or codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


#: Whether this process sends fleetctl's log records somewhere (``configure``: the long-running commands).
_CONFIGURED = False


def configured() -> bool:
    """Whether ``configure`` ran in this process: the one-shot commands do not
    set up logging, so what they must tell the operator they print themselves."""
    return _CONFIGURED


def configure(log_format: str = "text", level: str = "info") -> None:
    """Send the process's log records to stderr in ``log_format`` from ``level``
    up. ``debug`` is fleetctl's own: the libraries beside it (botocore, urllib3,
    the Azure and Google clients, SQLAlchemy) stay at ``info``, since their
    debug output is every HTTP exchange with the cloud, headers and bodies. As
    ``logging.basicConfig`` does, it leaves a process whose logging is set up
    already (a program or test harness that runs the command inside itself) as
    it is."""
    global _CONFIGURED
    _CONFIGURED = True
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(ascii_only=not writes_utf8(handler.stream))
                         if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    wanted = logging.getLevelName(level.upper())
    root.setLevel(max(wanted, logging.INFO))
    logging.getLogger("fleetctl").setLevel(wanted)
