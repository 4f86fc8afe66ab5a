"""SQLAlchemy tables of the state store.

Design choice: timestamps are stored as ISO-8601 UTC text and value objects as
JSON text. Both read back identically on SQLite and PostgreSQL, and the
columns the controller filters on (state, provider, idempotency key) are real
indexed columns.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", String(255), primary_key=True),
    Column("state", String(32), nullable=False, index=True),
    Column("spec", Text, nullable=False),  # JSON of the Job (codec.job_to_dict)
    Column("submitted_at_utc", String(40), nullable=False),
    Column("updated_at_utc", String(40), nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("node_id", String(255), primary_key=True),
    Column("provider", String(32), nullable=False, index=True),
    Column("offer_key", String(512), nullable=False),
    Column("state", String(32), nullable=False, index=True),
    Column("doc", Text, nullable=False),  # JSON of the Node (codec.node_to_dict)
    Column("idempotency_key", String(255), nullable=True, index=True),
    Column("updated_at_utc", String(40), nullable=False),
    # the nodes gone since a time (Store.nodes_gone_since), not every gone node kept (migration 0008)
    Index("ix_nodes_state_updated_at_utc", "state", "updated_at_utc"),
)

launches = Table(
    "launches",
    metadata,
    # Intent is written before the effect: a launch row exists before the
    # provider is called, so a crashed apply retries with the same key.
    Column("idempotency_key", String(255), primary_key=True),
    Column("offer_key", String(512), nullable=False),
    Column("count", Integer, nullable=False),
    # pending | done | partial | failed | unknown (no answer) | abandoned (open, never answered, nothing bought
    # under the key: controller.settle_launches); indexed for the open ones (migration 0009)
    Column("status", String(32), nullable=False, index=True),
    Column("node_ids", Text, nullable=False, default="[]"),
    Column("created_at_utc", String(40), nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at_utc", String(40), nullable=False, index=True),
    Column("kind", String(64), nullable=False, index=True),
    Column("subject", String(255), nullable=False, default=""),
    Column("payload", Text, nullable=False, default="{}"),
)

interruptions = Table(
    "interruptions",
    metadata,
    # A reclaim notice is written here when received and marked handled only
    # after its node is drained and its jobs requeued (acknowledge after handling).
    Column("event_id", String(255), primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("node_id", String(255), nullable=False, index=True),
    Column("kind", String(32), nullable=False),
    Column("received_at_utc", String(40), nullable=False),
    Column("deadline_utc", String(40), nullable=True),
    Column("handled_at_utc", String(40), nullable=True, index=True),
)

offer_observations = Table(
    "offer_observations",
    metadata,
    # What the controller saw of each spot offer at each observation: listed
    # (available = 1) or not any more (0), and its price; the interruption
    # forecaster's history of the market (forecasting/, docs/forecasting.md).
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("observed_at_utc", String(40), nullable=False, index=True),
    Column("offer_key", String(255), nullable=False, index=True),
    Column("available", Integer, nullable=False),
    Column("usd_per_hour", Float, nullable=True),
    Column("on_demand_usd_per_hour", Float, nullable=True),
)

offer_latest = Table(
    "offer_latest",
    metadata,
    # Each offer's last row of offer_observations, kept in the same transaction,
    # so recording a pass compares against one row per offer (migration 0004).
    Column("offer_key", String(255), primary_key=True),
    Column("available", Integer, nullable=False),
    Column("usd_per_hour", Float, nullable=True),
)

job_cancellations = Table(
    "job_cancellations",
    metadata,
    # A cancel request is its own row, not a field of the job: a tick that read
    # the job before the request and writes it back afterwards cannot lose it.
    # The next tick carries it out (stops a running job) and marks it handled.
    Column("job_id", String(255), primary_key=True),
    Column("requested_at_utc", String(40), nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("handled_at_utc", String(40), nullable=True, index=True),
)

leases = Table(
    "leases",
    metadata,
    # Mutual exclusion between processes acting on this store (migration 0006).
    # Times are the wall clock (Unix seconds), not a plan's `now`: a lease is
    # about live processes, and expires so a dead one does not hold it.
    Column("name", String(64), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("acquired_at_unix", Float, nullable=False),
    Column("expires_at_unix", Float, nullable=False),
)

job_tombstones = Table(
    "job_tombstones",
    metadata,
    # What is left of a finished job that `Store.prune_finished` deleted (migration 0010): its id, final
    # state and submitted spec (codec.job_spec_dict: no runtime fields, no node ids), so the id is never
    # reused: re-submitting the same spec stays a no-op and a changed one is refused, naming what changed.
    Column("job_id", String(255), primary_key=True),
    Column("state", String(32), nullable=False),
    Column("spec", Text, nullable=False),
    Column("finished_at_utc", String(40), nullable=False),  # the job's last write (jobs.updated_at_utc)
)
