"""leases: one controller acts on the store at a time (reconcile --once,
apply and the daemon take the "controller" lease around each pass; it
expires, so a process that died does not hold it for good)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("acquired_at_unix", sa.Float, nullable=False),
        sa.Column("expires_at_unix", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
