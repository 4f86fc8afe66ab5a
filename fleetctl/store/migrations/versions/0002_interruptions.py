"""interruptions: reclaim notices, recorded before they are handled

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "interruptions",
        sa.Column("event_id", sa.String(255), primary_key=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("node_id", sa.String(255), nullable=False, index=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("received_at_utc", sa.String(40), nullable=False),
        sa.Column("deadline_utc", sa.String(40), nullable=True),
        sa.Column("handled_at_utc", sa.String(40), nullable=True, index=True),
    )


def downgrade() -> None:
    op.drop_table("interruptions")
