"""Session API receipts on the idempotency table: a retried request gets its first answer.

Each request id has one item, `session-api#<profile>#<request id>` (Powertools' own records are
`<function>#<hash>`, so the two never meet). A request first *claims* its id with a conditional
put; only the claimant applies the change, then stores the answer (the receipt) conditioned on its
own claim token. A retry finds the receipt and returns it. A claim whose holder died (older than
`stale_after` seconds) may be taken over; the change it may have made is fenced by the session's
revision, so the takeover cannot apply it twice.
"""

from __future__ import annotations

import json
import secrets
from functools import lru_cache
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, UpdateError
from pynamodb.models import Model

from hermes_gateway.adapters.dynamo_errors import condition_failed, throttling_is_transient_everywhere
from hermes_gateway.adapters.models import dynamodb_endpoint, table_meta
from hermes_gateway.domain.receipts import Claim
from hermes_gateway.resources import Bindings

RECEIPT_SECONDS = 24 * 3600  # how long a request id is remembered (then the TTL removes it)
CLAIM_STALE_SECONDS = 30  # longer than the function's timeout: a claim this old has no live holder


class ReceiptModelBase(Model):
    id = UnicodeAttribute(hash_key=True)
    status = UnicodeAttribute()  # claimed | done
    fingerprint = UnicodeAttribute()
    claim_token = UnicodeAttribute(null=True)
    claimed_at = NumberAttribute()
    receipt = UnicodeAttribute(null=True)  # the JSON answer once done
    expiration = NumberAttribute()  # the table's TTL attribute (Powertools' name)


@lru_cache(maxsize=8)
def bind_receipt(table: str, region: str | None, host: str | None = None) -> type[ReceiptModelBase]:
    return type("Receipt", (ReceiptModelBase,), {"Meta": table_meta(table, region, host), "__module__": __name__})


@throttling_is_transient_everywhere
class DynamoReceipts:
    """`ReceiptStore` (domain.receipts) on the idempotency table."""

    def __init__(self, bindings: Bindings, region: str | None = None, stale_after: float = CLAIM_STALE_SECONDS) -> None:
        self.model = bind_receipt(bindings.table("idempotency"), region, dynamodb_endpoint())
        self.stale_after = stale_after

    def claim(self, key: str, fingerprint: str, now: float) -> Claim:
        Receipt = self.model
        token = secrets.token_hex(16)
        item = Receipt(
            key,
            status="claimed",
            fingerprint=fingerprint,
            claim_token=token,
            claimed_at=now,
            expiration=int(now + RECEIPT_SECONDS),
        )
        stale = (Receipt.status == "claimed") & (Receipt.claimed_at < now - self.stale_after)
        # Not a TTL-expired leftover either: DynamoDB deletes expired items only eventually.
        expired = Receipt.expiration < int(now)
        try:
            item.save(condition=Receipt.id.does_not_exist() | stale | expired)
        except PutError as exc:
            if not condition_failed(exc):
                raise
        else:
            return Claim("claimed", token=token)
        try:
            found = Receipt.get(key, consistent_read=True)
        except DoesNotExist:  # removed between the two calls (an abandoned claim): one more try
            return self.claim(key, fingerprint, now)
        if found.fingerprint != fingerprint:
            return Claim("mismatch")
        if found.status == "done" and found.receipt is not None:
            receipt: dict[str, Any] = json.loads(found.receipt)
            return Claim("done", receipt=receipt)
        return Claim("in_progress")

    def complete(self, key: str, token: str, receipt: dict[str, Any], now: float) -> bool:
        Receipt = self.model
        try:
            Receipt(key).update(
                actions=[
                    Receipt.status.set("done"),
                    Receipt.receipt.set(json.dumps(receipt, separators=(",", ":"))),
                    Receipt.claim_token.remove(),
                ],
                condition=(Receipt.status == "claimed") & (Receipt.claim_token == token),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False  # the claim was taken over; that holder's receipt stands
            raise
        return True

    def abandon(self, key: str, token: str) -> None:
        Receipt = self.model
        try:
            Receipt(key).delete(condition=(Receipt.status == "claimed") & (Receipt.claim_token == token))
        except DeleteError as exc:
            if not condition_failed(exc):
                raise
