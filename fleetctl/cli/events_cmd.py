"""`fleetctl events`: the store's audit log, what the controller did and why
(``fleetctl.audit.EVENT_KINDS``), as `kubectl get events` shows a cluster's."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from fleetctl.audit import EVENT_KINDS, HISTORY_KINDS
from fleetctl.cli.common import WHEN_HELP, StateOption, TableFormat, console, fail, one_of, open_store, parse_when, utcnow, \
    utf8_or_exit, comma_list
from fleetctl.cli.tables import print_table
from fleetctl.render import counted


def details(payload: Any) -> str:
    """An entry's payload as ``key=value`` pairs (lists joined by commas)."""
    if not isinstance(payload, dict):
        return json.dumps(payload)
    parts = []
    for key, value in sorted(payload.items()):
        if value is None or value == [] or value == "":
            continue
        shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


def events(
    since: Annotated[str, typer.Option(
        "--since", help=f"Start of the window (included): {WHEN_HELP}.", metavar="WHEN")] = "24h",
    until: Annotated[Optional[str], typer.Option(
        "--until", help="End of the window (excluded), as --since. Default: now.", metavar="WHEN",
        show_default=False)] = None,
    kind: Annotated[Optional[list[str]], typer.Option(
        "--kind", help="Only entries of this kind (repeatable, or comma-separated): " + ", ".join(EVENT_KINDS) + ". Without it, "
                       "every kind but the forecasters' per-pass history (" + ", ".join(HISTORY_KINDS) + ").",
        metavar="KIND", show_default=False)] = None,
    about: Annotated[Optional[str], typer.Option(
        "--for", help="Only the entries about this job or node: its subject, or named in its details (a "
                      "launch's nodes, a preemption's job).", metavar="ID", show_default=False)] = None,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=1_000_000,
        help="At most this many entries, the newest (it says so when older ones of the window are left out).")] = 500,
    output: Annotated[TableFormat, typer.Option(
        "--format", help='table, or json: {"format_version": 1, "events": [{"seq", "at_utc", "kind", "subject", '
                         '"payload"}], "more": BOOL}, oldest first.', **one_of(TableFormat))] = TableFormat.table,
    state: StateOption = None,
) -> None:
    """Show the audit log: what the controller did, to what, when and why.

    Launches, terminations, bindings, starts, completions, preemptions, migrations,
    reclaim notices and requeues, cancels, each with its reason; oldest first, the
    newest --limit of the window. `--for JOB` gives one job's history, `--for NODE` one
    node's. The log keeps what `fleetctl prune` keeps (docs/retention.md); the kinds
    and their details: docs/events.md."""
    kind = comma_list(kind)
    unknown = sorted(set(kind) - set(EVENT_KINDS))
    if unknown:
        fail(f"--kind {', '.join(unknown)}: no such kind; the kinds are: {', '.join(EVENT_KINDS)}", 2)
    if about is not None:
        [about] = utf8_or_exit("--for", (about,))
    now = utcnow()
    start = parse_when("--since", since, now)
    end = parse_when("--until", until, now) if until is not None else None
    if end is not None and end <= start:
        fail(f"--until {until} is not after --since {since}", 2)
    store = open_store(state, must_exist=True, read_only=True)
    try:
        kinds = kind or [k for k in EVENT_KINDS if k not in HISTORY_KINDS]
        entries, more = store.audit_log(kinds=kinds, since=start, until=end, about=about, limit=limit)
    finally:
        store.close()
    if output is TableFormat.json:
        print(json.dumps({"format_version": 1, "events": list(entries), "more": more}, indent=2))
        return
    if more:
        console.print(f"older entries of the window are left out: the newest {limit} are shown (--limit, --since)",
                      markup=False, highlight=False)
    table = Table(title=counted(len(entries), "entry", "entries") if not more
                  else f"the newest {counted(limit, 'entry', 'entries')}")
    for col in ("time (UTC)", "kind", "subject", "details"):
        table.add_column(col, overflow="fold")
    for e in entries:
        # Text, not markup: a --reason or a posted node id may hold "[...]" (a closing tag crashed the table)
        table.add_row(e["at_utc"], e["kind"], Text(e["subject"] or "-"), Text(details(e["payload"])))
    print_table(console, table)
