"""job_tombstones: a finished job's id, final state and spec, kept when
``prune --finished-older-than-days`` deletes the job, so its id is never reused

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

Before it, a pruned job's id could be submitted again and ran again (a cron
re-submitting yesterday's file re-ran its work). ``Store.prune_finished``
writes a row here for each job it deletes, in the same transaction, and
``Store.add_jobs`` reads it as it reads a stored job. No data changes: jobs
pruned before this revision left nothing to keep. Downgrading drops the
table, and with it the guard on the ids of the jobs pruned since.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_tombstones",
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("finished_at_utc", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_tombstones")
