"""WhatsApp's 24-hour customer service window (BEHAVIOUR §6, domain/service_window.py): the route
keeps when the person last wrote, in the write each message makes anyway; a push to someone
outside the window goes as the re-engagement template, or is refused at once with that reason,
which cron and `hermes-gateway send` report; Meta's 131047 is the same refusal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_cli.send import queue_message
from hermes_gateway.domain.service_window import (
    TEMPLATE_PARAMETER_CHARS,
    template_parameter,
    window_applies,
    window_closed,
)
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import ConfigError, OutsideWindow
from hermes_gateway.platforms.whatsapp import WhatsAppSender
from hermes_gateway.services.delivery import DeliveryDeps, last_heard, run_job
from hermes_gateway.services.router import Access, route_message
from tests.fakes.access import FakePairingStore
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.services import FakeDeliveryQueue, FakeDirectory, FakeEvents, FakeOutbox, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores
from tests.fakes.upload_server import FakeApi

NOW = 1_764_400_000.0
DAY = 24 * 3600
PERSON = "15551234567"
TEMPLATE = "hermes_update:en_US"


def token() -> str:
    return "-".join(("wa", "window", "test"))  # assembled here: no secret-shaped literal on disk


# -- the rule --------------------------------------------------------------------------------


def test_the_window_is_a_persons_on_whatsapp_and_lasts_a_day() -> None:
    assert window_applies("whatsapp", PERSON) and window_applies("whatsapp", "+15551234567@s.whatsapp.net")
    assert not window_applies("whatsapp", "120363025246125486@g.us")  # a group
    assert not window_applies("whatsapp", PERSON, "group") and not window_applies("telegram", "99")
    assert not window_closed("whatsapp", NOW - DAY + 60, NOW)
    assert window_closed("whatsapp", NOW - DAY - 60, NOW) and window_closed("whatsapp", None, NOW)
    assert not window_closed("telegram", None, NOW)


def test_a_template_parameter_is_one_line_within_metas_limit() -> None:
    assert template_parameter("Good morning!\n\n\tToday:    rain") == "Good morning! Today: rain"
    long = template_parameter("word " * 1000)
    assert len(long) == TEMPLATE_PARAMETER_CHARS and long.endswith("\u2026")


def test_the_template_setting_is_checked_when_the_settings_load() -> None:
    assert (
        make_settings({"WHATSAPP_REENGAGE_TEMPLATE": TEMPLATE}).platforms["whatsapp"].options["reengage_template"]
        == TEMPLATE
    )
    with pytest.raises(ConfigError, match="name:language"):
        make_settings({"WHATSAPP_REENGAGE_TEMPLATE": "Hermes Update"})


# -- the route keeps when the person last wrote ------------------------------------------------


def _route(text: str, event: str, now: float, platform: str = "whatsapp", stores: Any = None) -> Any:
    stores = stores or memory_stores()
    source = SessionSource(platform, chat_id=PERSON, user_id=PERSON, message_id=event)
    message = InboundMessage(source=source, text=text, event_id=f"{platform}:{event}", received_at=now)
    settings = make_settings({"WHATSAPP_ENABLED": "true", "GATEWAY_ALLOW_ALL_USERS": "true"})
    access = Access(pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=FakeEvents())
    route_message(message, settings=settings, stores=stores, starter=FakeStarter(), access=access, now=now)
    return stores


def test_each_message_sets_when_the_person_last_wrote_in_the_write_it_makes_anyway() -> None:
    stores = _route("hello", "m1", NOW)  # begins a turn
    assert last_heard(stores.routes, "whatsapp", PERSON, "default") == NOW
    _route("and another", "m2", NOW + 5, stores=stores)  # meets the running turn: queued
    assert last_heard(stores.routes, "whatsapp", "+" + PERSON, "default") == NOW + 5
    # the route's activity clock also moves without the person (the session API resets it): not this
    key = f"agent:main:whatsapp:dm:{PERSON}"
    stores.routes.open(SessionSource("whatsapp", chat_id=PERSON), key, NOW + 2 * DAY, force_new=True)
    assert last_heard(stores.routes, "whatsapp", PERSON, "default") == NOW + 5
    telegram = _route("hi", "t1", NOW, platform="telegram")
    entry = telegram.routes.get(f"agent:main:telegram:dm:{PERSON}")
    assert entry is not None and entry.heard_at is None  # a platform without a window: no attribute
    assert last_heard(memory_stores().routes, "whatsapp", PERSON, "default") is None  # no route: never heard


# -- a push outside the window ----------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as fake:
        fake.routes["/555/messages"] = ScriptedAnswer(200, {"messages": [{"id": "wamid.out"}]})
        yield fake


class Jobs:
    def __init__(self) -> None:
        self.records: list[str] = []

    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool:
        self.records.append(status)
        return True


def push(api: FakeApi, heard: float | None, *, template: str = "", kind: str = "push", **job: Any) -> tuple[str, Any]:
    """A cron run's result pushed to the person; its outcome and what was dead-lettered."""
    sender = WhatsAppSender(api.base_url, token(), "555", reengage_template=template)
    jobs, dead, outbox = Jobs(), FakeDeliveryQueue(), FakeOutbox()
    deps = DeliveryDeps(
        outbox=outbox, sender_for=lambda p, via: sender, now=lambda: NOW, jobs=jobs, heard=lambda p, c: heard
    )
    raw = {
        "delivery_id": "cron-j1-100", "kind": kind, "target": {"platform": "whatsapp", "chat_id": PERSON},
        "text": "Your weekly digest:\n\n- rain on Tuesday", "cron": {"job_id": "j0123456789ab", "run_id": "100"},
        **job,
    }  # fmt: skip
    outcome = run_job(raw, lambda profile: deps, dead, None, 5.0)
    return outcome, {"jobs": jobs.records, "dead": dead.bodies, "outbox": outbox.entries}


def test_inside_the_window_a_push_is_sent_as_text(api: FakeApi) -> None:
    outcome, seen = push(api, NOW - 3600, template=TEMPLATE)
    assert outcome == "sent" and seen["jobs"] == ["sent"]
    (sent,) = [r.body for r in api.to("/555/messages")]
    assert sent["type"] == "text"


def test_outside_it_a_push_goes_as_the_reengagement_template(api: FakeApi) -> None:
    outcome, seen = push(api, NOW - 2 * DAY, template=TEMPLATE)
    assert outcome == "sent" and seen["jobs"] == ["sent"]
    (sent,) = [r.body for r in api.to("/555/messages")]
    assert sent["type"] == "template"
    parameter = {"type": "text", "text": "Your weekly digest: - rain on Tuesday"}
    assert sent["template"] == {
        "name": "hermes_update",
        "language": {"code": "en_US"},
        "components": [{"type": "body", "parameters": [parameter]}],
    }
    assert seen["outbox"]["cron-j1-100#t"].status == "sent"


def test_without_a_template_it_is_refused_at_once_and_the_job_says_why(api: FakeApi) -> None:
    outcome, seen = push(api, None)
    assert outcome == "dead_lettered" and seen["jobs"] == ["outside_window"]
    assert api.to("/555/messages") == []  # nothing was sent to Meta to be refused there
    (dead,) = seen["dead"]
    assert "outside_window" in dead["reason"] and "reengage_template" in dead["reason"]


def test_a_reply_is_never_held_to_the_window(api: FakeApi) -> None:
    outcome, _ = push(api, NOW - 3 * DAY, kind="reply")  # it answers a message just received
    assert outcome == "sent" and api.to("/555/messages")[0].body["type"] == "text"


def test_metas_131047_if_it_still_comes_is_the_same_refusal(api: FakeApi) -> None:
    api.routes["/555/messages"] = ScriptedAnswer(
        400, {"error": {"message": "Re-engagement message", "code": 131047, "error_data": {"details": "more than 24h"}}}
    )
    outcome, seen = push(api, NOW - 60)  # the gateway thought the window open
    assert outcome == "dead_lettered" and seen["jobs"] == ["outside_window"]
    assert "24-hour" in seen["dead"][0]["reason"]


# -- hermes-gateway send says so -----------------------------------------------------------


def test_send_refuses_a_person_outside_the_window_unless_a_template_is_set() -> None:
    queue = FakeDeliveryQueue()

    def send(heard: float | None, **env: str) -> Any:
        return queue_message(
            f"whatsapp:{PERSON}", "hello", settings=make_settings(env), directory=FakeDirectory(), queue=queue,
            heard=lambda platform, chat_id: heard, now=NOW,
        )  # fmt: skip

    with pytest.raises(OutsideWindow, match="reengage_template"):
        send(NOW - 2 * DAY)
    assert queue.bodies == []  # nothing queued
    _, _, note = send(NOW - 2 * DAY, WHATSAPP_REENGAGE_TEMPLATE=TEMPLATE)
    assert note == "outside the 24-hour window: sent as the template hermes_update"
    assert send(NOW - 60)[2] is None and len(queue.bodies) == 2
