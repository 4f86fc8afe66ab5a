"""Alembic environment: runs on the connection the Store hands in."""

from alembic import context

from fleetctl.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - the Store always passes one
    raise RuntimeError("fleetctl migrations run through fleetctl.store.Store")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
