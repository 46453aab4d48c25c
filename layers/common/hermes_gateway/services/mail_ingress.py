"""E-mail's ingress (docs/platforms/email.md): SES's receipts and the sent mails' bounces, handled by
the ingress function beside the webhooks.

A receipt (SES's Lambda action, invoked asynchronously after its S3 action stored the message):
checked to be for this function's rule and address, refused unread when SES's verdicts fail,
then read from the bucket (bounded), normalized (`platforms.email_inbound`) and written to the
inbox once, as a webhook's message is. Whatever is refused or ignored is logged with its reason,
its stored copy deleted, and the invoke succeeds: SES never retries, and a refusal is final. Only
a failure worth another try (S3 or the inbox throttled) raises: Lambda tries the invoke twice
more, then hands the event to the dead letters (resources: the ingress's `dead_letters`).

A bounce, complaint or rejection (the configuration set's event, through EventBridge): the sent
mail's message tag names its outbox row, which becomes `failed` (`delivery:failed`), as a WhatsApp
`failed` status does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.ports import MailStore, MessageTooLarge
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import InvalidIdentifier, TransientError
from hermes_gateway.observability import MetricUnit, correlate, logger, metrics
from hermes_gateway.platforms.email import delivery_of_tag
from hermes_gateway.platforms.email_inbound import NotForUs, Receipt, Skipped
from hermes_gateway.resources import MAIL
from hermes_gateway.services.ingress import DeliveryReport, EnqueueOnce, ReportDelivery, enqueue_message
from hermes_gateway.settings import Settings

PLATFORM = "email"
FEEDBACK_KINDS = {"Bounce": "bounce", "Complaint": "complaint", "Reject": "rejected"}


class MailAdapter(Protocol):
    """E-mail's inbound adapter (`platforms.email.EmailInbound`)."""

    def receipt(self, record: Any, function_arn: str) -> Receipt: ...

    def message(
        self, raw: bytes, receipt: Receipt | None, received_at: float, *, object_key: str
    ) -> InboundMessage | Skipped: ...


def is_receipt(event: Any) -> bool:
    """An invoke with `Records`: what an SES receipt rule sends (a webhook's is an HTTP event). A
    record that is not SES's receipt for this function is refused, one by one."""
    return isinstance(event, dict) and isinstance(event.get("Records"), list)


def is_feedback(event: Any) -> bool:
    """SES's sending events, as EventBridge delivers them (`source` aws.ses)."""
    return isinstance(event, dict) and event.get("source") == "aws.ses" and isinstance(event.get("detail"), dict)


@dataclass(frozen=True)
class MailIngress:
    """What the ingress reads e-mail with: the deployment's settings, e-mail's adapter (None when
    e-mail is off), the stored mail, the inbox and the function's own ARN (a receipt must name it)."""

    settings: Settings
    mail: MailAdapter | None
    store: MailStore | None
    enqueue_once: EnqueueOnce
    function_arn: str

    def receive(self, event: Mapping[str, Any], received_at: float) -> dict[str, Any]:
        """Every record of an SES invoke (SES sends one): each one's outcome ("accepted",
        "duplicate", or "refused:<reason>" / "ignored:<reason>"). Raises TransientError when the
        invoke should be tried again."""
        outcomes = [self._receive(record, received_at) for record in event.get("Records") or ()]
        return {"ok": True, "outcomes": outcomes}

    def _receive(self, record: Any, received_at: float) -> str:
        mail, store = self.mail, self.store
        if self.settings.platform(PLATFORM) is None or mail is None or store is None:
            return _refused("email_not_served")
        try:
            receipt = mail.receipt(record, self.function_arn)
        except NotForUs as exc:
            return _refused(exc.reason)  # not our message: its stored copy (if any) is not ours to delete
        key = MAIL.prefix + receipt.ses_id
        correlate(f"{PLATFORM}:{receipt.ses_id}", None)
        refusal = receipt.refusal()
        if refusal is not None:
            return _discarded(store, key, Skipped(refusal, trust=True))
        try:
            raw = store.read(key, MAIL.max_message_bytes)
        except MessageTooLarge:
            return _discarded(store, key, Skipped("too_large", trust=True))
        if raw is None:
            return _refused("stored_message_missing")  # expired, or deleted by an earlier try
        parsed = mail.message(raw, receipt, received_at, object_key=key)
        if isinstance(parsed, Skipped):
            return _discarded(store, key, parsed)
        try:
            return enqueue_message(PLATFORM, parsed, self.settings, self.enqueue_once)
        except InvalidIdentifier:
            return _discarded(store, key, Skipped("unusable_identifier", trust=True))


def _refused(reason: str) -> str:
    logger.warning("mail refused", extra={"platform": PLATFORM, "reason": reason})
    metrics.add_metric(name="InboundRejectedMail", unit=MetricUnit.Count, value=1)
    return f"refused:{reason}"


def _discarded(store: MailStore, key: str, skipped: Skipped) -> str:
    """A message the gateway will not answer: logged with the reason, and its stored copy deleted
    (a failed delete leaves it to the bucket's lifecycle rule)."""
    try:
        store.delete(key)
    except TransientError:
        logger.info("the refused message's stored copy is left to expire", extra={"platform": PLATFORM})
    if skipped.trust:
        return _refused(skipped.reason)
    logger.info("mail ignored", extra={"platform": PLATFORM, "reason": skipped.reason})
    metrics.add_metric(name="InboundIgnored", unit=MetricUnit.Count, value=1)
    return f"ignored:{skipped.reason}"


def record_feedback(event: Mapping[str, Any], *, report: ReportDelivery | None) -> str:
    """A bounce, complaint or rejection of a sent mail: its outbox row marked `failed` ("reported"),
    or why nothing was ("ignored:<reason>"). Raises TransientError when it should be tried again."""
    detail = _object(event.get("detail"))
    kind = FEEDBACK_KINDS.get(str(detail.get("eventType")))
    mail = _object(detail.get("mail"))
    if kind is None or not mail:
        return _feedback_ignored("not_a_bounce_or_complaint")
    values = _object(mail.get("tags")).get(MAIL.delivery_tag)
    delivery_id = delivery_of_tag(str(values[0])) if isinstance(values, list) and values else None
    message_id = mail.get("messageId")
    if not delivery_id or not isinstance(message_id, str) or not message_id:
        return _feedback_ignored("no_outbox_row")
    if report is None:
        return _feedback_ignored("no_outbox")
    report(PLATFORM, DeliveryReport(delivery_id, message_id, feedback_error(kind, detail)))
    return "reported"


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _feedback_ignored(reason: str) -> str:
    logger.info("mail feedback ignored", extra={"platform": PLATFORM, "reason": reason})
    return f"ignored:{reason}"


def feedback_error(kind: str, detail: Mapping[str, Any]) -> str:
    """The outbox row's error: what SES says happened, as codes (never an address or the text)."""
    if kind == "bounce":
        bounce = _object(detail.get("bounce"))
        found = bounce.get("bouncedRecipients")
        recipients = [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []
        status = next((r.get("status") for r in recipients if r.get("status")), "")
        return _codes(kind, bounce.get("bounceType"), bounce.get("bounceSubType"), status)
    if kind == "complaint":
        return _codes(kind, _object(detail.get("complaint")).get("complaintFeedbackType") or "unspecified")
    return _codes(kind, _object(detail.get("reject")).get("reason"))


def _codes(kind: str, *codes: Any) -> str:
    shown = [" ".join(str(c).split())[:60] for c in codes if isinstance(c, str) and c.strip()]
    return " ".join([kind, "/".join(shown)]).strip()
