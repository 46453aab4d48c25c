"""bench/receipts_cost.py: the status notifications it posts are WhatsApp's, signed as Meta signs
them and read by the adapter as status reports; the summary prices a reply at 2 and 3 of them;
run_all merges it."""

from __future__ import annotations

import json

import pytest

from bench.meter import Meter
from bench.receipts_cost import STATUSES, environment, signed_headers, status_notification, summarize
from bench.run_all import receipts_cost_keys
from hermes_gateway.errors import Unauthorized
from hermes_gateway.platforms.whatsapp import parse_notification, verify_signature
from hermes_gateway.services.ingress import Accepted, Ignored


def test_each_notification_is_a_status_report_the_adapter_ignores() -> None:
    for status in STATUSES:
        body = status_notification(7, status)
        parsed = parse_notification(json.loads(body), received_at=1_700_000_000.0)
        assert parsed == Accepted(items=(Ignored("message_status"),)), status
    # a failed one would be a delivery report (it writes the outbox): the bench posts none
    assert "failed" not in STATUSES


def test_the_notifications_are_signed_as_the_adapter_verifies_under_the_runs_app_secret() -> None:
    body = status_notification(1, "sent")
    verify_signature(signed_headers(body), body, environment()["WHATSAPP_APP_SECRET"])
    with pytest.raises(Unauthorized):
        verify_signature(signed_headers(body), body + b" ", environment()["WHATSAPP_APP_SECRET"])


def test_a_reply_costs_two_or_three_receipts() -> None:
    priced = {"cost_per_million_usd": 1.5, "cost_by_service": {}, "per_message": {}, "lambda_by_function": {}}
    report = summarize(priced, Meter(), receipts=30, seconds=1.0)
    assert report["usd_per_million_whatsapp_replies"] == {"sent_and_delivered": 3.0, "sent_delivered_and_read": 4.5}
    assert report["aws_requests_per_receipt"] == 0.0
    assert receipts_cost_keys(report) == {
        "whatsapp_receipts_usd_per_million_replies": report["usd_per_million_whatsapp_replies"]
    }
