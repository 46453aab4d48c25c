"""`Sweep` on DynamoDB: routes whose reset policy has expired them, from the sparse
`by_policy_deadline` index (only routes whose policy can expire them carry its key), claimed one by
one with a compare-and-swap on the revision that sets `expiry_finalized`.

Idle routes are no longer pruned here: a route's TTL (`expires_at`, pushed on by every message)
lets DynamoDB delete it for free once it has been idle `sessions.route_max_idle_days`, and the
key's next session closes the one it left open (`DynamoRoutes._orphan`).
"""

from __future__ import annotations

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import ConditionFailed, Update, condition
from hermes_gateway.adapters.session_tables import SessionTables
from hermes_gateway.domain.sessions import SessionEntry


class DynamoSweep:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables

    def due_for_expiry(self, now: float, limit: int = 100) -> list[SessionEntry]:
        found = []
        for shard in range(ri.POLICY_SHARDS):
            key = condition(None, "{policy_shard} = {:s} AND {policy_deadline} < {:now}", s=str(shard), now=now)
            for n, item in enumerate(self.t.routes.query(key, index="by_policy_deadline", limit=limit)):
                if n >= limit:
                    break
                if not item.get("expiry_finalized"):
                    found.append(item)
        found.sort(key=lambda item: float(item["policy_deadline"]))
        return [ri.entry(item) for item in found[:limit]]

    def claim_expiry(self, entry: SessionEntry, now: float) -> SessionEntry | None:
        update = (
            Update().set_many({"expiry_finalized": True, "updated_at": now}).remove("policy_shard", "policy_deadline")
        )
        update.increment("revision")
        when = condition(
            update,
            "{revision} = {:rev} AND (attribute_not_exists({expiry_finalized}) OR {expiry_finalized} = {:no})",
            rev=entry.revision,
            no=False,
        )
        try:
            fresh = self.t.routes.update({"session_key": entry.session_key}, update, when, returns="ALL_NEW")
        except ConditionFailed:
            return None
        return ri.entry(fresh or {})

    def release_expiry_claim(self, entry: SessionEntry, now: float) -> bool:
        last = entry.last_activity_at if entry.last_activity_at is not None else entry.updated_at
        update = Update().set_many(
            {
                "expiry_finalized": False,
                **ri.activity(entry.session_key, entry.platform, entry.chat_type, last, self.t.rules),
                "updated_at": now,
            }
        )
        update.increment("revision")
        when = condition(update, "{revision} = {:rev} AND {expiry_finalized} = {:yes}", rev=entry.revision, yes=True)
        try:
            self.t.routes.update({"session_key": entry.session_key}, update, when)
        except ConditionFailed:
            return False
        return True
