"""node zone: each stored node says the zone it runs in (Node.zone), backfilled
from the rule the model used before, so an upgraded store keeps its placement
domains

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27

Before this revision ``Node.placement_domain`` took the zone of a node bought
from a regional offer (offer zone ``""``) from a node id ``<zone>/<name>`` (how
the GCP adapter names nodes), else the offer's zone. The zone is now a field
the provider adapters set. Each stored node document (``nodes.doc``, JSON)
without a ``zone`` gets the zone that rule gave: the offer's zone, else the
part of the id before its first ``/``, else ``""`` (unknown). No column
changes: the zone lives in the document, as the rest of the node does.

The rule is written out here rather than imported: a migration must mean the
same thing whatever later versions of the model say.
"""

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_nodes = sa.table("nodes", sa.column("node_id", sa.String), sa.column("doc", sa.Text))


def _zone_by_the_old_rule(node_id: str, doc: dict[str, Any]) -> str:
    offer_zone = (doc.get("offer") or {}).get("zone") or ""
    if offer_zone:
        return offer_zone
    if "/" in node_id:
        return node_id.split("/", 1)[0]
    return ""


def _rewrite(change: Callable[[str, dict[str, Any]], dict[str, Any] | None]) -> None:
    """Each stored node's document through ``change(node_id, doc)``: the new
    document, or None to leave the row as it is."""
    bind = op.get_bind()
    rows = bind.execute(sa.select(_nodes.c.node_id, _nodes.c.doc).order_by(_nodes.c.node_id)).all()
    for node_id, text in rows:
        doc = json.loads(text)
        new = change(node_id, doc)
        if new is not None:
            bind.execute(_nodes.update().where(_nodes.c.node_id == node_id)
                         .values(doc=json.dumps(new, sort_keys=True)))


def upgrade() -> None:
    _rewrite(lambda node_id, doc: None if "zone" in doc else {**doc, "zone": _zone_by_the_old_rule(node_id, doc)})


def downgrade() -> None:
    # Revision 0006 documents have no zone; its fleetctl ignores the key, but
    # a store downgraded and upgraded again is then backfilled the same way.
    _rewrite(lambda node_id, doc: {k: v for k, v in doc.items() if k != "zone"} if "zone" in doc else None)
