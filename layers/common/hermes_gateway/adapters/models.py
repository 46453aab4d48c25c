"""pynamodb models for the routes, sessions and messages tables.

Table names are deployment-specific, so the classes are made per binding by the `bind_*` functions
(pynamodb reads the table name from a class-level `Meta`). The attribute names match
`hermes_gateway.resources`, which the CDK stack and local mode build the tables from.
"""

from __future__ import annotations

import hashlib
import os
from functools import cached_property, lru_cache

from pynamodb.attributes import (
    BinaryAttribute,
    BooleanAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from hermes_gateway.resources import Bindings

LEASE_SHARD = "lease"
# A turn lease on the route item: removed together when it is released or expires.
LEASE_ATTRS = ("lease_token", "lease_turn_id", "lease_started_at", "lease_expires_at", "lease_shard")
ROUTE_SHARDS = 4  # `policy_shard` and `activity_shard` spread their index over this many partitions


class RouteModelBase(Model):
    """The routing entry of one session key (BEHAVIOUR §3)."""

    session_key = UnicodeAttribute(hash_key=True)
    session_id = UnicodeAttribute()
    revision = NumberAttribute(default=1)
    execution_generation = NumberAttribute(default=0)
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    platform = UnicodeAttribute()
    chat_type = UnicodeAttribute()
    display_name = UnicodeAttribute(null=True)
    suspended = BooleanAttribute(default=False)
    resume_pending = BooleanAttribute(default=False)
    resume_reason = UnicodeAttribute(null=True)
    resume_marked_at = NumberAttribute(null=True)
    # The active turn lease. `lease_shard` is set only while a lease is held: it feeds the
    # sparse `by_lease_expiry` index the expiry sweep queries.
    lease_token = UnicodeAttribute(null=True)
    lease_turn_id = UnicodeAttribute(null=True)
    lease_started_at = NumberAttribute(null=True)
    lease_expires_at = NumberAttribute(null=True)
    lease_shard = UnicodeAttribute(null=True)
    # The rest of BEHAVIOUR §3's entry (see domain.sessions.SessionEntry).
    origin = UnicodeAttribute(null=True)  # JSON of the SessionSource that created the session
    last_activity_at = NumberAttribute(null=True)  # the reset policy's clock
    activity_shard = UnicodeAttribute(null=True)  # `by_activity`: idle routes are pruned
    failed_recoveries = NumberAttribute(default=0)
    expiry_finalized = BooleanAttribute(default=False)
    is_fresh_reset = BooleanAttribute(default=False)
    was_auto_reset = BooleanAttribute(default=False)
    auto_reset_reason = UnicodeAttribute(null=True)
    reset_had_activity = BooleanAttribute(default=False)
    prev_session_id = UnicodeAttribute(null=True)
    model_override = UnicodeAttribute(null=True)  # JSON: model, provider, base_url (never a key)
    stop_turn_id = UnicodeAttribute(null=True)
    # Set only while the reset policy can expire the session: the sparse `by_policy_deadline` index.
    policy_shard = UnicodeAttribute(null=True)
    policy_deadline = NumberAttribute(null=True)


class SessionModelBase(Model):
    session_id = UnicodeAttribute(hash_key=True)
    session_key = UnicodeAttribute()
    started_at = NumberAttribute()
    ended_at = NumberAttribute(null=True)
    end_reason = UnicodeAttribute(null=True)
    memory_flushed_at = NumberAttribute(null=True)  # its memory flush turn is over
    title = UnicodeAttribute(null=True)
    source_label = UnicodeAttribute(null=True)
    platform = UnicodeAttribute()
    parent_session_id = UnicodeAttribute(null=True)
    message_count = NumberAttribute(default=0)
    input_tokens = NumberAttribute(default=0)
    output_tokens = NumberAttribute(default=0)
    profile = UnicodeAttribute(null=True)  # the key namespace: `by_profile` (list, search)
    continued_in = UnicodeAttribute(null=True)  # compression's child
    cache_read_tokens = NumberAttribute(default=0)
    cache_write_tokens = NumberAttribute(default=0)
    last_prompt_tokens = NumberAttribute(default=0)
    cost_usd = NumberAttribute(default=0)
    # Turns by cost status; the session's status is derived (domain.cost.session_cost_status).
    estimated_turns = NumberAttribute(default=0)
    unknown_turns = NumberAttribute(default=0)
    included_turns = NumberAttribute(default=0)
    hidden_ranges = UnicodeAttribute(null=True)  # JSON [[lo, hi], ...]: seqs soft-deleted by undo/rewind


class MessageModelBase(Model):
    """A transcript row. Rows with a negative `seq` are de-duplication markers, not messages:
    they share the partition so one transaction writes a row and its marker."""

    session_id = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)
    role = UnicodeAttribute(null=True)
    content = UnicodeAttribute(null=True)
    created_at = NumberAttribute(null=True)
    active = BooleanAttribute(default=True)
    platform_message_id = UnicodeAttribute(null=True)
    turn_id = UnicodeAttribute(null=True)
    sender_name = UnicodeAttribute(null=True)
    dedupe_key = UnicodeAttribute(null=True)
    input_tokens = NumberAttribute(null=True)
    output_tokens = NumberAttribute(null=True)
    # Usage markers (one per turn, at a negative seq) also carry these.
    cache_read_tokens = NumberAttribute(null=True)
    cache_write_tokens = NumberAttribute(null=True)
    prompt_tokens = NumberAttribute(null=True)
    cost_usd = NumberAttribute(null=True)
    cost_status = UnicodeAttribute(null=True)


def dynamodb_endpoint() -> str | None:
    """An endpoint override (local mode's embedded AWS); None means the region's real endpoint."""
    return os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get("AWS_ENDPOINT_URL") or None


def table_meta(table_name: str, region: str | None, host: str | None) -> type:
    attrs: dict[str, object] = {"table_name": table_name}
    if region:
        attrs["region"] = region
    if host:
        attrs["host"] = host
    return type("Meta", (), attrs)


# Bound classes are cached: pynamodb keeps a connection per class, so the endpoint is in the key.
@lru_cache(maxsize=8)
def bind_route(table: str, region: str | None, host: str | None = None) -> type[RouteModelBase]:
    class ByLeaseExpiry(GlobalSecondaryIndex[RouteModelBase]):  # type: ignore[no-untyped-call]
        class Meta:
            index_name = "by_lease_expiry"
            projection = AllProjection()

        lease_shard = UnicodeAttribute(hash_key=True)
        lease_expires_at = NumberAttribute(range_key=True)

    class ByPolicyDeadline(GlobalSecondaryIndex[RouteModelBase]):  # type: ignore[no-untyped-call]
        class Meta:
            index_name = "by_policy_deadline"
            projection = AllProjection()

        policy_shard = UnicodeAttribute(hash_key=True)
        policy_deadline = NumberAttribute(range_key=True)

    class ByActivity(GlobalSecondaryIndex[RouteModelBase]):  # type: ignore[no-untyped-call]
        class Meta:
            index_name = "by_activity"
            projection = AllProjection()

        activity_shard = UnicodeAttribute(hash_key=True)
        last_activity_at = NumberAttribute(range_key=True)

    return type(
        "Route",
        (RouteModelBase,),
        {
            "Meta": table_meta(table, region, host),
            "by_lease_expiry": ByLeaseExpiry(),
            "by_policy_deadline": ByPolicyDeadline(),
            "by_activity": ByActivity(),
            "__module__": __name__,
        },
    )


@lru_cache(maxsize=8)
def bind_session(table: str, region: str | None, host: str | None = None) -> type[SessionModelBase]:
    class ByProfile(GlobalSecondaryIndex[SessionModelBase]):  # type: ignore[no-untyped-call]
        class Meta:
            index_name = "by_profile"
            projection = AllProjection()

        profile = UnicodeAttribute(hash_key=True)
        started_at = NumberAttribute(range_key=True)

    return type(
        "Session",
        (SessionModelBase,),
        {"Meta": table_meta(table, region, host), "by_profile": ByProfile(), "__module__": __name__},
    )


@lru_cache(maxsize=8)
def bind_message(table: str, region: str | None, host: str | None = None) -> type[MessageModelBase]:
    return type("Message", (MessageModelBase,), {"Meta": table_meta(table, region, host), "__module__": __name__})


class BoundModels:
    """The three session tables' models, each bound when first used: a function granted only the
    routes table (the expiry sweep) never needs the other two names."""

    def __init__(self, bindings: Bindings, region: str | None, host: str | None) -> None:
        self._bindings, self._region, self._host = bindings, region, host

    @cached_property
    def route(self) -> type[RouteModelBase]:
        return bind_route(self._bindings.table("routes"), self._region, self._host)

    @cached_property
    def session(self) -> type[SessionModelBase]:
        return bind_session(self._bindings.table("sessions"), self._region, self._host)

    @cached_property
    def message(self) -> type[MessageModelBase]:
        return bind_message(self._bindings.table("messages"), self._region, self._host)


class OutboxModelBase(Model):
    """One reply chunk: written before it is sent, marked sent with the platform's message id."""

    delivery_id = UnicodeAttribute(hash_key=True)
    platform = UnicodeAttribute()
    chat_id = UnicodeAttribute(null=True)
    thread_id = UnicodeAttribute(null=True)
    text = UnicodeAttribute()
    turn_id = UnicodeAttribute(null=True)
    chunk = NumberAttribute(default=1)
    chunks = NumberAttribute(default=1)
    # pending | sending (claimed) | sent | recorded | failed | queued (in a forwarder's mailbox) | ...
    status = UnicodeAttribute(default="pending")
    attempts = NumberAttribute(default=0)
    platform_message_id = UnicodeAttribute(null=True)
    error = UnicodeAttribute(null=True)
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    expires_at = NumberAttribute(null=True)  # TTL
    buttons = UnicodeAttribute(null=True)  # JSON: [{"label", "reply"}], on a message's last chunk
    media = UnicodeAttribute(null=True)  # JSON: [{"key", "name", "kind", "mime"}], on a media part
    # Only while the chunk waits in a forwarder's mailbox (platforms/mailbox.py): which mailbox,
    # since when, and the letter the forwarder sends (JSON, zlib-compressed when that saves a
    # tenth: `letter_z`); they go when it is settled.
    mailbox = UnicodeAttribute(null=True)
    queued_at = NumberAttribute(null=True)
    letter = UnicodeAttribute(null=True)
    letter_z = BinaryAttribute(null=True, legacy_encoding=False)


@lru_cache(maxsize=8)
def bind_outbox(outbox_table: str, region: str | None, host: str | None = None) -> type[OutboxModelBase]:
    class ByMailbox(GlobalSecondaryIndex[OutboxModelBase]):  # type: ignore[no-untyped-call]
        class Meta:
            index_name = "by_mailbox"
            projection = KeysOnlyProjection()

        mailbox = UnicodeAttribute(hash_key=True)
        queued_at = NumberAttribute(range_key=True)

    return type(
        "Outbox",
        (OutboxModelBase,),
        {"Meta": table_meta(outbox_table, region, host), "by_mailbox": ByMailbox(), "__module__": __name__},
    )


def marker_seq(key: str) -> int:
    """The sort key of a marker row in the messages table (a dedupe marker, a title claim, a usage
    record, a paused turn's state): negative, so it never meets a transcript row (48 bits of a hash)."""
    return -(int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) + 1)
