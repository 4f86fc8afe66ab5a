"""initial: jobs, nodes, launches, events

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("state", sa.String(32), nullable=False, index=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("submitted_at_utc", sa.String(40), nullable=False),
        sa.Column("updated_at_utc", sa.String(40), nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.String(255), primary_key=True),
        sa.Column("provider", sa.String(32), nullable=False, index=True),
        sa.Column("offer_key", sa.String(512), nullable=False),
        sa.Column("state", sa.String(32), nullable=False, index=True),
        sa.Column("doc", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True, index=True),
        sa.Column("updated_at_utc", sa.String(40), nullable=False),
    )
    op.create_table(
        "launches",
        sa.Column("idempotency_key", sa.String(255), primary_key=True),
        sa.Column("offer_key", sa.String(512), nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("node_ids", sa.Text, nullable=False),
        sa.Column("created_at_utc", sa.String(40), nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at_utc", sa.String(40), nullable=False, index=True),
        sa.Column("kind", sa.String(64), nullable=False, index=True),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for name in ("events", "launches", "nodes", "jobs"):
        op.drop_table(name)
