"""iMessage through BlueBubbles in local mode: the server's own webhook bodies
(tests/fixtures/bluebubbles/, as they are but for their GUIDs and times) through ingress, router,
turn and delivery, answered through a fake BlueBubbles server's REST API.

One local gateway with BlueBubbles on (its webhook secret, its server password and URL) serves
the module. A DM and a group are answered in their chats, with a tempGuid from the outbox row and
the reply threaded to the user's message (the Private API is on); a photo is fetched from the
server once, with the password, and reaches the model; the server's echoes of the bot's own reply,
a tapback, an edit, a delivery report, typing and read status are acknowledged and answered by
nobody; a request without the secret is refused with nothing enqueued.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import pytest

from hermes_local.runtime import LocalGateway
from tests.e2e.conftest import BASE_ENV, Client
from tests.fakes.bluebubbles_server import FIXTURES, FakeBlueBubbles

pytestmark = pytest.mark.e2e

SECRET = "-".join(("e2e", "bluebubbles", "hook"))  # assembled at run time: no secret-shaped literal
DM_GUID = "iMessage;-;+15555550123"
GROUP_GUID = "iMessage;+;chat512345678901234567"
JPEG = b"\xff\xd8\xff\xe0" + b"imessage" + bytes(range(256)) * 4 + b"\xff\xd9"


@dataclass
class World:
    client: Client
    server: FakeBlueBubbles
    numbers: Iterator[int]

    def post(self, event: dict[str, Any], secret: str | None = SECRET) -> tuple[int, Any]:
        query = "?" + urllib.parse.urlencode({"password": secret}) if secret is not None else ""
        headers = {"content-type": "application/json"}
        return self.client.request("POST", "/webhooks/bluebubbles" + query, json.dumps(event).encode(), headers)

    def event(self, name: str, **data: Any) -> dict[str, Any]:
        """A fixture as the server posts it now: a GUID of its own, sent this moment."""
        event: dict[str, Any] = copy.deepcopy(json.loads((FIXTURES / f"{name}.json").read_text()))
        event["data"].update(guid=f"E2E00000-0000-4000-8000-{next(self.numbers):012d}", **data)
        if "dateCreated" in event["data"]:
            event["data"]["dateCreated"] = int(time.time() * 1000)
        return event

    def replies(self, chat: str, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.time() + timeout
        while len(self.server.posted(chat)) < count and time.time() < deadline:
            time.sleep(0.05)
        return self.server.posted(chat)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server = FakeBlueBubbles(private_api=True).start()
    environ = {
        **BASE_ENV,
        "HERMES_LOCAL_STATE": str(tmp_path_factory.mktemp("bluebubbles") / "local.json"),
        "GATEWAY_ALLOW_ALL_USERS": "true",
        "BLUEBUBBLES_WEBHOOK_SECRET": SECRET,  # turns the platform on in local mode
        "BLUEBUBBLES_PASSWORD": server.password,
        "BLUEBUBBLES_SERVER_URL": server.base_url,
        "BLUEBUBBLES_PRIVATE_API": "true",
    }
    local = LocalGateway(port=0, environ=environ, tick_seconds=3600, poll_wait_seconds=1).start()
    try:
        yield World(Client(local), server, count(1))
    finally:
        local.wait_idle()
        local.stop()
        server.stop()


def test_a_dm_is_answered_in_its_chat_threaded_to_the_message_once(world: World) -> None:
    event = world.event("new_message_dm_text")
    assert world.post(event) == (200, {"ok": True})
    [reply] = world.replies(DM_GUID, 1)
    assert reply["text"] == "Echo: Hello from iMessage"
    assert reply["method"] == "private-api" and reply["selectedMessageGuid"] == event["data"]["guid"]
    assert reply["tempGuid"].startswith("temp-") and len(reply["tempGuid"]) == len("temp-") + 32
    # The outbox row is marked sent with the server's GUID of the message
    [row] = world.client.wait_outbox(1, settled=True, platform="bluebubbles", chat_id=urllib.parse.quote(DM_GUID))
    assert (row["status"], row["platform_message_id"]) == ("sent", reply["guid"])
    # The same event again (the server never retries, but a restarted poller may repeat one)
    assert world.post(event) == (200, {"ok": True, "duplicate": True})
    world.client.gateway.wait_idle()
    assert len(world.server.posted(DM_GUID)) == 1


def test_the_servers_echoes_of_the_reply_and_other_events_are_answered_by_nobody(world: World) -> None:
    before = len(world.server.sent)
    [reply] = world.server.posted(DM_GUID)[-1:] or [None]
    assert reply is not None, "runs after the DM test"
    # The server posts the bot's own message twice: matched to its send (with the tempGuid), then from chat.db
    match = world.event("new_message_from_me_send_match", text=reply["text"], tempGuid=reply["tempGuid"])
    match["data"]["guid"] = reply["guid"]
    echo = world.event("new_message_from_me_echo", text=reply["text"])
    echo["data"]["guid"] = reply["guid"]
    tapback = world.event("new_message_tapback_love", associatedMessageGuid=f"p:0/{reply['guid']}")
    others = [
        world.event("updated_message_edited"),
        world.event("updated_message_delivered_read"),
        json.loads((FIXTURES / "typing_indicator_started.json").read_text()),
        json.loads((FIXTURES / "chat_read_status_changed.json").read_text()),
        json.loads((FIXTURES / "hello_world.json").read_text()),
    ]
    for event in (match, echo, tapback, *others):
        status, body = world.post(event)
        assert status == 200 and "ignored" in body, (event["type"], body)
    world.client.gateway.wait_idle()
    assert len(world.server.sent) == before


def test_a_group_message_is_answered_in_the_group(world: World) -> None:
    assert world.post(world.event("new_message_group_text"))[0] == 200
    [reply] = world.replies(GROUP_GUID, 1)
    assert reply["text"] == "Echo: Who is in for Saturday?"


def test_a_macos_26_dm_is_answered_under_its_own_guid(world: World) -> None:
    assert world.post(world.event("new_message_dm_text_macos26_any_guid", text="from Tahoe"))[0] == 200
    [reply] = world.replies("any;-;+15555550123", 1)
    assert reply["text"] == "Echo: from Tahoe"


def test_a_photo_is_fetched_from_the_server_once_and_reaches_the_model(world: World) -> None:
    event = world.event("new_message_attachment_image")
    attached = event["data"]["attachments"][0]
    attached.update(guid="at_0_E2E-PHOTO", totalBytes=len(JPEG))
    world.server.attachments["at_0_E2E-PHOTO"] = (JPEG, "image/jpeg")
    before = len(world.server.posted(DM_GUID))
    assert world.post(event)[0] == 200
    replies = world.replies(DM_GUID, before + 1)
    # The echo agent says what it was given: the photo's bytes, as the server handed them over
    assert f"[images: image/jpeg {len(JPEG)} bytes]" in replies[-1]["text"]
    assert world.server.downloads["at_0_E2E-PHOTO"] == 1
    [download] = [r for r in world.server.requests if "/attachment/at_0_E2E-PHOTO/download" in r.path]
    assert urllib.parse.parse_qs(download.path.partition("?")[2]) == {"password": [world.server.password]}


@pytest.mark.parametrize("secret", [None, "forged", SECRET.upper()])
def test_a_request_without_the_secret_is_401_and_nothing_is_answered(world: World, secret: str | None) -> None:
    before = len(world.server.sent)
    status, body = world.post(world.event("new_message_dm_text", text="let me in"), secret=secret)
    assert status == 401 and SECRET not in json.dumps(body)
    world.client.gateway.wait_idle()
    assert len(world.server.sent) == before
