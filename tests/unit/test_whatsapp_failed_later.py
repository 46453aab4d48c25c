"""A WhatsApp message the Cloud API accepted and later reported `failed`: every message is sent
with its outbox row in `biz_opaque_callback_data`, which Meta echoes in the message's status
webhooks; a `failed` status marks that row failed with Meta's error code and title, publishes
delivery:failed and counts DeliveryFailedLater. No index, no extra write per message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.whatsapp import SIGNATURE_HEADER, WhatsAppSender, meta_signature, parse_notification
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver, record_failed_later
from hermes_gateway.services.ingress import (
    Accepted,
    DeliveryReport,
    HttpRequest,
    HttpResponse,
    Ignored,
    handle_webhook,
)
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, FakeEvents, FakeOutbox, make_settings
from tests.fakes.whatsapp_server import FakeWhatsApp

APP_SECRET = "whatsapp-app-secret-for-tests"
NOW = 1_764_400_000.0
ENV = {"WHATSAPP_ENABLED": "true", "WHATSAPP_PHONE_NUMBER_ID": "123456123"}


def failed_status(wamid: str = "wamid.fake-1", reference: str | None = "reply-abc#1", **fields: Any) -> dict[str, Any]:
    """A `failed` status as the Cloud API sends it (status messages webhook reference)."""
    status: dict[str, Any] = {
        "id": wamid,
        "status": "failed",
        "timestamp": "1750857384",
        "recipient_id": "16315551181",
        "errors": [
            {
                "code": 131026,
                "title": "Message undeliverable",
                "message": "Message undeliverable",
                "error_data": {"details": "Message Undeliverable."},
            }
        ],
        **fields,
    }
    if reference is not None:
        status["biz_opaque_callback_data"] = reference
    return status


def notification(*statuses: dict[str, Any]) -> dict[str, Any]:
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "16505551111", "phone_number_id": "123456123"},
        "statuses": list(statuses),
    }
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": "WABA", "changes": [{"value": value, "field": "messages"}]}],
    }


def post(payload: Any) -> HttpRequest:
    body = json.dumps(payload).encode()
    headers = {"content-type": "application/json", SIGNATURE_HEADER: meta_signature(APP_SECRET, body)}
    return HttpRequest(method="POST", path="/webhooks/whatsapp", headers=headers, body=body)


class Recorder:
    """`report_delivery` as the ingress is given it, on a fake outbox and event sink."""

    def __init__(self, outbox: FakeOutbox) -> None:
        self.outbox = outbox
        self.events = FakeEvents()

    def __call__(self, platform: str, report: DeliveryReport) -> None:
        record_failed_later(
            platform,
            report.delivery_id,
            report.platform_message_id,
            report.error,
            outbox=self.outbox,
            events=self.events,
            now=NOW,
        )


def webhook(payload: Any, recorder: Recorder | None, enqueue: FakeEnqueue | None = None) -> HttpResponse:
    settings = make_settings(ENV)
    return handle_webhook(
        "whatsapp",
        post(payload),
        settings=settings,
        adapters=platforms.adapters(settings, {"WHATSAPP_APP_SECRET": APP_SECRET}),
        enqueue_once=enqueue or FakeEnqueue(),
        received_at=NOW,
        report_delivery=recorder,
    )


def claimed_row(outbox: FakeOutbox, claimed_at: float, delivery_id: str = "reply-abc#1") -> None:
    """A chunk a worker has claimed for sending (and not recorded since)."""
    outbox.record_claimed(
        delivery_id,
        platform="whatsapp",
        chat_id="16315551181",
        thread_id=None,
        text="the reply",
        turn_id="t1",
        chunk=1,
        chunks=1,
        now=claimed_at,
    )


def sent_row(outbox: FakeOutbox, delivery_id: str = "reply-abc#1", wamid: str = "wamid.fake-1") -> None:
    claimed_row(outbox, NOW - 30, delivery_id)
    outbox.mark(delivery_id, "sent", NOW - 29, platform_message_id=wamid)


# --- sending: the outbox row travels with the message --------------------------------------------


@pytest.fixture
def fake_whatsapp() -> Iterator[FakeWhatsApp]:
    with FakeWhatsApp() as fake:
        yield fake


def test_every_chunk_is_sent_with_its_outbox_row_as_callback_data(fake_whatsapp: FakeWhatsApp) -> None:
    sender = WhatsAppSender(fake_whatsapp.base_url, fake_whatsapp.token, "123456123", timeout=2.0)
    outbox = FakeOutbox()
    job = DeliveryJob.from_dict(
        {"delivery_id": "reply-abc", "text": "x" * 5000, "target": {"platform": "whatsapp", "chat_id": "16315551181"}}
    )
    deliver(job, DeliveryDeps(outbox=outbox, sender_for=lambda platform, via: sender, now=lambda: NOW))
    assert [body["biz_opaque_callback_data"] for body in fake_whatsapp.sent] == ["reply-abc#1", "reply-abc#2"]
    assert sorted(outbox.entries) == ["reply-abc#1", "reply-abc#2"]


# --- the status webhook -------------------------------------------------------------------------


def test_a_failed_status_of_a_gateway_message_is_a_delivery_report() -> None:
    parsed = parse_notification(notification(failed_status()), received_at=NOW)
    assert parsed == Accepted(
        items=(
            DeliveryReport(
                delivery_id="reply-abc#1",
                platform_message_id="wamid.fake-1",
                error="whatsapp 131026 Message undeliverable",
            ),
        )
    )


def test_other_statuses_and_failures_of_messages_sent_elsewhere_stay_ignored() -> None:
    delivered = {"id": "wamid.fake-1", "status": "delivered", "biz_opaque_callback_data": "reply-abc#1"}
    parsed = parse_notification(notification(delivered, failed_status(reference=None)), received_at=NOW)
    assert parsed == Accepted(items=(Ignored("message_status"), Ignored("failed_status_of_another_sender")))


def test_a_failed_status_marks_the_outbox_row_failed_and_publishes_delivery_failed() -> None:
    # Given a reply the gateway sent, recorded `sent` with Meta's message id
    outbox = FakeOutbox()
    sent_row(outbox)
    recorder = Recorder(outbox)
    # When Meta reports it failed
    response = webhook(notification(failed_status()), recorder)
    # Then the request is acknowledged, the row is failed with Meta's code and title (no text)
    assert response.status == 200
    row = outbox.entries["reply-abc#1"]
    assert (row.status, row.error) == ("failed", "failed later: whatsapp 131026 Message undeliverable")
    assert row.platform_message_id == "wamid.fake-1"
    # And delivery:failed is published for it
    assert recorder.events.emitted == [
        (
            "delivery:failed",
            {
                "platform": "whatsapp",
                "delivery_id": "reply-abc#1",
                "reason": "failed_later",
                "error": "whatsapp 131026 Message undeliverable",
            },
        )
    ]


def test_a_repeated_report_is_recorded_once() -> None:
    outbox = FakeOutbox()
    sent_row(outbox)
    recorder = Recorder(outbox)
    assert webhook(notification(failed_status()), recorder).status == 200
    assert webhook(notification(failed_status()), recorder).status == 200  # Meta delivers at least once
    assert len(recorder.events.emitted) == 1


@pytest.mark.parametrize(
    ("stored", "report"),
    [
        (None, failed_status()),  # no such row (another deployment's, or long expired)
        ("reply-abc#1", failed_status(wamid="wamid.other")),  # the row holds another message
    ],
)
def test_a_report_for_no_sent_message_of_ours_changes_nothing(stored: str | None, report: dict[str, Any]) -> None:
    outbox = FakeOutbox()
    if stored:
        sent_row(outbox, stored)
    recorder = Recorder(outbox)
    assert webhook(notification(report), recorder).status == 200
    assert [e.status for e in outbox.entries.values()] == (["sent"] if stored else [])
    assert recorder.events.emitted == []


def test_a_row_of_another_platform_is_never_marked() -> None:
    outbox = FakeOutbox()
    sent_row(outbox)
    marked = record_failed_later("line", "reply-abc#1", "wamid.fake-1", "x", outbox=outbox, events=None, now=NOW)
    assert not marked and outbox.entries["reply-abc#1"].status == "sent"


def test_a_report_that_overtakes_the_send_being_recorded_is_asked_for_again() -> None:
    # Given the worker has the chunk claimed (it is still recording Meta's answer)
    outbox = FakeOutbox()
    claimed_row(outbox, NOW)
    recorder = Recorder(outbox)
    enqueue = FakeEnqueue()
    # When the failed status arrives: 503, so Meta sends it again once the row says `sent`
    response = webhook(notification(failed_status()), recorder, enqueue)
    assert (response.status, response.headers.get("retry-after")) == (503, "5")
    assert outbox.entries["reply-abc#1"].status == "sending"
    with pytest.raises(TransientError):
        recorder("whatsapp", DeliveryReport("reply-abc#1", "wamid.fake-1", "x"))


def test_a_row_left_unknown_is_marked_failed() -> None:
    # (a worker stopped mid-send: the report settles what the outbox could not know)
    outbox = FakeOutbox()
    claimed_row(outbox, NOW - 120)
    assert outbox.settle_stale("reply-abc#1", NOW - 50)
    assert record_failed_later("whatsapp", "reply-abc#1", "wamid.x", "e", outbox=outbox, events=None, now=NOW)
    assert outbox.entries["reply-abc#1"].status == "failed"


def test_without_a_recorder_a_report_is_acknowledged_and_ignored() -> None:
    assert webhook(notification(failed_status()), None).status == 200
