"""fixed-width times: every stored time to the microsecond (``...:30.000000Z``)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

The time columns are text, compared and ordered as text (``since``/``until``
bounds, prune cuts, the order of launches, cancel requests and offer
observations). Before it, a time on a whole second was written without a
fraction ("...:30Z"), and "...:30Z" sorts after "...:30.5Z": a node gone at
a whole second counted as gone since half a second later, and a prune cut
could keep or delete a row up to a second off. From this revision the store
writes every time with six fractional digits; this migration rewrites the
times written the short way. Values are the same instants; reads parse
either form. Downgrading writes the whole-second ones the short way again.
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: every column that holds a stored time (fleetctl/store/tables.py)
TIME_COLUMNS = (
    ("jobs", "submitted_at_utc"), ("jobs", "updated_at_utc"),
    ("nodes", "updated_at_utc"),
    ("launches", "created_at_utc"),
    ("events", "at_utc"),
    ("interruptions", "received_at_utc"), ("interruptions", "deadline_utc"), ("interruptions", "handled_at_utc"),
    ("offer_observations", "observed_at_utc"),
    ("job_cancellations", "requested_at_utc"), ("job_cancellations", "handled_at_utc"),
    ("job_tombstones", "finished_at_utc"),
)


def upgrade() -> None:
    # "YYYY-MM-DDTHH:MM:SSZ" (20 characters) is the only short form fleetctl wrote: isoformat() gives six
    # digits whenever the fraction is not zero. substr, || and length are the same in SQLite and PostgreSQL.
    for table, column in TIME_COLUMNS:
        op.execute(f"UPDATE {table} SET {column} = substr({column}, 1, 19) || '.000000Z' "
                   f"WHERE length({column}) = 20 AND {column} LIKE '%Z'")


def downgrade() -> None:
    for table, column in TIME_COLUMNS:
        op.execute(f"UPDATE {table} SET {column} = substr({column}, 1, 19) || 'Z' "
                   f"WHERE length({column}) = 27 AND {column} LIKE '%.000000Z'")
