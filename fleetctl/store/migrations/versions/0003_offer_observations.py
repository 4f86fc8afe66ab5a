"""offer_observations: the spot offers the controller saw, over time (the forecaster's history)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "offer_observations",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("observed_at_utc", sa.String(40), nullable=False, index=True),
        sa.Column("offer_key", sa.String(255), nullable=False, index=True),
        sa.Column("available", sa.Integer, nullable=False),
        sa.Column("usd_per_hour", sa.Float, nullable=True),
        sa.Column("on_demand_usd_per_hour", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("offer_observations")
