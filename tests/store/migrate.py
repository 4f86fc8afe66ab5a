"""Store tests' helper: a store taken back to an older schema revision."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from fleetctl.store import MIGRATIONS, Store


def downgrade(store: Store, revision: str) -> None:
    """``store`` as a fleetctl of schema ``revision`` left it (the migrations' own downgrade)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store._engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
