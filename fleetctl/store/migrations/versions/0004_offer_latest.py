"""offer_latest: each spot offer's last observation, so recording one pass reads
one row per offer instead of grouping the whole change log

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "offer_latest",
        sa.Column("offer_key", sa.String(255), primary_key=True),
        sa.Column("available", sa.Integer, nullable=False),
        sa.Column("usd_per_hour", sa.Float, nullable=True),
    )
    # Backfill from the change log: the last row of each offer.
    op.execute(
        "INSERT INTO offer_latest (offer_key, available, usd_per_hour) "
        "SELECT o.offer_key, o.available, o.usd_per_hour FROM offer_observations o "
        "WHERE o.seq IN (SELECT MAX(seq) FROM offer_observations GROUP BY offer_key)"
    )


def downgrade() -> None:
    op.drop_table("offer_latest")
