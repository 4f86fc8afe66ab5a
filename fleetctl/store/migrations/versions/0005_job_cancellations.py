"""job_cancellations: `fleetctl jobs cancel` requests, carried out by the next
reconcile tick (which stops a running job through the runtime)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_cancellations",
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("requested_at_utc", sa.String(40), nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("handled_at_utc", sa.String(40), nullable=True, index=True),
    )


def downgrade() -> None:
    op.drop_table("job_cancellations")
