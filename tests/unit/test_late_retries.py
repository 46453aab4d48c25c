"""Replays and late retries: an event older than the inbox remembers its platform's event ids (the
platform's retry window, at least 48 h) cannot be told from a first delivery, so it is acknowledged
and dropped by the time its payload carries, never answered a second time. Each platform's retry
window is data, and the inbox keeps ids that long."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.platforms import catalog
from hermes_gateway.platforms.line import parse_webhook
from hermes_gateway.platforms.mattermost import parse_post
from hermes_gateway.platforms.whatsapp import parse_notification
from hermes_gateway.services.ingress import (
    MIN_DEDUP_WINDOW_SECONDS,
    Accepted,
    Ignored,
    dedup_window_seconds,
    epoch_seconds,
)
from tests.fakes.webhook_signers import line_payload, mattermost_payload, whatsapp_payload

NOW = 1_800_000_000.0
HOUR = 3600.0


def only(parsed: object) -> InboundMessage | Ignored:
    assert isinstance(parsed, Accepted) and len(parsed.items) == 1
    return parsed.items[0]


def whatsapp(sent_at: float) -> InboundMessage | Ignored:
    payload = json.loads(whatsapp_payload(1, "15551234567"))
    payload["entry"][0]["changes"][0]["value"]["messages"][0]["timestamp"] = str(int(sent_at))
    return only(parse_notification(payload, received_at=NOW))


def line(sent_at: float) -> InboundMessage | Ignored:
    payload = json.loads(line_payload(1, "Uline"))
    payload["events"][0]["timestamp"] = int(sent_at * 1000)
    return only(parse_webhook(payload, received_at=NOW))


def mattermost(sent_at: float) -> InboundMessage | Ignored:
    fields = dict(urllib.parse.parse_qsl(mattermost_payload(1, "ch1").decode()))
    return parse_post({**fields, "timestamp": str(int(sent_at))}, received_at=NOW)


@pytest.mark.parametrize("parse", [line, mattermost], ids=["line", "mattermost"])
def test_an_event_older_than_the_deduplication_window_is_acknowledged_and_dropped(parse: object) -> None:
    # Given the same event delivered 47 h after it was sent (its first delivery is still remembered),
    # and again 49 h after (past the 48 h these platforms' ids are kept)
    assert isinstance(parse(NOW - 47 * HOUR), InboundMessage)  # type: ignore[operator]
    late = parse(NOW - 49 * HOUR)  # type: ignore[operator]
    # Then the late one is dropped with its reason (logged by ingress), not answered a second time
    assert late == Ignored("outlived_deduplication")


@pytest.mark.parametrize("parse", [whatsapp, line, mattermost], ids=["whatsapp", "line", "mattermost"])
def test_a_clock_ahead_of_ours_drops_nothing(parse: object) -> None:
    assert isinstance(parse(NOW + HOUR), InboundMessage)  # type: ignore[operator]


def test_the_window_is_the_one_the_inbox_keeps_ids_for() -> None:
    # WhatsApp retries for 7 days: its ids are kept that long, and only a later retry is dropped
    window = dedup_window_seconds("whatsapp")
    assert window == 7 * 24 * 3600
    assert whatsapp(NOW - window) != Ignored("outlived_deduplication")
    assert whatsapp(NOW - window - 1) == Ignored("outlived_deduplication")
    # a platform that never retries still gets the margin; one that retries forever, the longest
    assert dedup_window_seconds("discord") == MIN_DEDUP_WINDOW_SECONDS
    assert dedup_window_seconds("matrix") == 7 * 24 * 3600


@pytest.mark.parametrize(
    ("value", "milliseconds", "seconds"),
    [("1700000000", False, 1_700_000_000.0), (1_700_000_000_500, True, 1_700_000_000.5), ("", False, None),
     ("-5", False, None), ("9" * 400, False, None), (True, False, None), (1.5, False, None), (None, False, None)],
)  # fmt: skip
def test_payload_timestamps_are_read_strictly(value: object, milliseconds: bool, seconds: float | None) -> None:
    assert epoch_seconds(value, milliseconds=milliseconds) == seconds


def test_every_platform_says_how_long_it_may_redeliver() -> None:
    windows = {spec.name: spec.retry_window_seconds for spec in catalog.CATALOG}
    assert windows["whatsapp"] == 7 * 24 * 3600
    assert windows["telegram"] == 24 * 3600
    assert windows["matrix"] is None  # a homeserver resends a transaction until it is answered
    assert all(w is None or (isinstance(w, int) and w >= 0) for w in windows.values())
