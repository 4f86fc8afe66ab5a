"""nodes (state, updated_at_utc) index: the nodes gone recently are read
without reading every gone node the store keeps

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

The store keeps every node ever bought (a gone node is a fact a job's history
refers to). The sandbox lists a gone node for an hour after it went
(``Store.nodes_gone_since``: ``state = 'gone' AND updated_at_utc >= ?``); with
only the index on ``state`` that read visited every gone node, so each tick of
a long-running store got slower with its age. No data changes.
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEX = "ix_nodes_state_updated_at_utc"


def upgrade() -> None:
    op.create_index(INDEX, "nodes", ["state", "updated_at_utc"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="nodes")
