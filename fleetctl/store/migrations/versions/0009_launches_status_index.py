"""launches status index: the launch intents still open are read without
reading every launch the store keeps

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

Each tick settles the launch intents a controller that died left open
(``Store.open_launches``: ``status IN ('pending', 'unknown')``); the store
keeps every launch ever made, so without an index that read would visit them
all and each tick of a long-running store would get slower with its age. No
data changes.
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

INDEX = "ix_launches_status"


def upgrade() -> None:
    op.create_index(INDEX, "launches", ["status"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="launches")
