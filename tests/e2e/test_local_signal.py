"""Signal end to end in local mode: a fake signal-cli (JSON-RPC over a loopback socket, as
`signal-cli daemon --tcp`) emits the fixtures' `receive` notifications; the reference forwarder
(relays/signal-cli/forwarder.py, running as it does deployed: both loops in threads) posts them
signed to local mode's `/webhooks/signal`; ingress, router, turn and delivery run as deployed; the
reply waits in the mailbox, the forwarder collects it, sends it through the fake signal-cli and
reports signal-cli's timestamp, which marks the outbox row sent.

The fixtures are signal-cli's JSON as it is (tests/fixtures/signal/), their timestamps moved to
now: the gateway drops a message older than it remembers event ids.
"""

from __future__ import annotations

import base64
import copy
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main as cli
from tests.e2e.conftest import Client
from tests.fakes.media_server import FakeMediaHost, file
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.signal_cli import ACCOUNT, FIRST_TIMESTAMP, FakeSignalCli, fixture, load_forwarder, run_loops

pytestmark = pytest.mark.e2e
pytest_plugins = ("tests.fakes.openai_server",)

SECRET = "whsec_" + "c2lnbmFsLWUyZS1yZWxheS1zZWNyZXQta2V5LTMyYg=="
ALICE, BOB, CAROL = "+15555550123", "+15555550124", "+15555550125"
GROUP = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
JPEG = b"\xff\xd8\xff\xe0signal-e2e" + bytes(range(256)) * 8 + b"\xff\xd9"
OGG = b"OggS\x00\x02" + b"spoken reply " * 40
CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


def fresh(name: str, *, sender: tuple[str, str] | None = None, text: str | None = None) -> dict[str, Any]:
    """A fixture notification sent now (by `sender`: number and UUID, when given)."""
    notification = copy.deepcopy(fixture(name))
    envelope = notification["params"]["envelope"]
    now = int(time.time() * 1000) + next(_UNIQUE)
    envelope.update(timestamp=now, serverReceivedTimestamp=now + 400, serverDeliveredTimestamp=now + 420)
    envelope["dataMessage"]["timestamp"] = now
    if sender is not None:
        envelope.update(source=sender[0], sourceNumber=sender[0], sourceUuid=sender[1], sourceName="Someone")
    if text is not None:
        envelope["dataMessage"]["message"] = text
    return notification


_UNIQUE = iter(range(1, 1_000_000))


@dataclass
class World:
    client: Client
    signal: FakeSignalCli
    forwarder: Any

    def sent_to(self, count: int, timeout: float = 20.0, **where: Any) -> list[dict[str, Any]]:
        """The `send` requests signal-cli got, once there are `count` (that match `where`)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = [s for s in self.signal.sent if all(s.get(k) == v for k, v in where.items())]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"signal-cli got {self.signal.sent}, not {count} sends to {where}")

    def row_of(self, text: str, status: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            rows = [r for r in self.client.outbox(platform="signal") if r["text"].startswith(text)]
            if rows and rows[-1]["status"] == status:
                return rows[-1]
            time.sleep(0.05)
        raise AssertionError(f"no {status} outbox row starting {text!r}: {self.client.outbox(platform='signal')}")


@pytest.fixture
def world(start_gateway: Callable[..., Client], tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[World]:
    with FakeSignalCli() as signal:
        client = start_gateway(
            SIGNAL_RELAY_SECRET=SECRET, SIGNAL_ACCOUNT=ACCOUNT, SIGNAL_ALLOWED_USERS=ALICE,
            SIGNAL_UNAUTHORIZED_DM="pair", HERMES_LOCAL_STATE=str(tmp_path / "local.json"),
            GATEWAY_PROVIDER="openai", GATEWAY_MODEL="gpt-test", OPENAI_BASE_URL=fake_openai.base_url,
        )  # fmt: skip
        module = load_forwarder("signal_cli_forwarder_e2e")
        config = module.Config(
            relay_url=client.gateway.url + "/webhooks/signal", secret=SECRET, account=ACCOUNT,
            state_dir=tmp_path / "forwarder", signal_cli=signal.address, poll_seconds=0.3, active_poll_seconds=0.1,
        )  # fmt: skip
        forwarder = module.build(config)
        with run_loops(forwarder):
            signal.wait_connected()
            yield World(client, signal, forwarder)


def test_a_dm_is_answered_through_signal_cli_and_marked_sent_with_its_timestamp(
    world: World, fake_openai: FakeOpenAI
) -> None:
    fake_openai.reply_next("Hi Alice, how can I help?")
    message = fresh("receive_dm_text.json")

    world.signal.notify(message)

    (sent,) = world.sent_to(1, recipient=[ALICE])
    timestamp = message["params"]["envelope"]["timestamp"]
    assert sent == {
        "message": "Hi Alice, how can I help?", "recipient": [ALICE], "quoteTimestamp": timestamp, "quoteAuthor": ALICE,
    }  # fmt: skip
    row = world.row_of("Hi Alice", "sent")
    assert row["platform_message_id"] == str(FIRST_TIMESTAMP)  # what the fake signal-cli answered the send
    assert {"method": "sendTyping", "params": {"recipient": [ALICE]}} in [
        {k: r[k] for k in ("method", "params")} for r in world.signal.requests
    ]
    # the model was told who and where, with the ids hashed (BEHAVIOUR §10)
    system = fake_openai.requests[0].json["messages"][0]["content"]
    assert "dm on signal (chat signal:" in system and ALICE not in system


def test_a_group_message_is_answered_in_the_group(world: World, fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_next("Count me in.")

    world.signal.notify(fresh("receive_group_text.json", sender=(ALICE, "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d")))

    (sent,) = world.sent_to(1, groupId=GROUP)
    assert sent["message"] == "Count me in." and sent["quoteAuthor"] == ALICE
    world.row_of("Count me in.", "sent")


def test_a_stranger_gets_a_pairing_code_through_signal_and_is_answered_once_approved(
    world: World, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    carol = (CAROL, "c3d4e5f6-a7b8-4c9d-8e0f-2a3b4c5d6e7f")
    world.signal.notify(fresh("receive_dm_text.json", sender=carol, text="hello?"))

    (code_message,) = world.sent_to(1, recipient=[CAROL])
    code = CODE.search(code_message["message"]).group(1)  # type: ignore[union-attr]
    assert f"hermes-gateway pairing approve signal {code}" in code_message["message"]
    assert not fake_openai.requests  # no model call for a stranger

    assert cli(["pairing", "approve", "signal", code, "--local"]) == 0
    assert f"approved: signal user {CAROL}" in capsys.readouterr().out
    fake_openai.reply_next("Welcome, Carol.")
    world.signal.notify(fresh("receive_dm_text.json", sender=carol, text="now?"))

    assert [s["message"] for s in world.sent_to(2, recipient=[CAROL])][-1] == "Welcome, Carol."


def test_a_group_member_nobody_allowed_is_ignored_silently(world: World, fake_openai: FakeOpenAI) -> None:
    world.signal.notify(fresh("receive_group_text.json"))  # Bob, in the group: not allowed
    fake_openai.reply_next("Hi Alice")
    world.signal.notify(fresh("receive_dm_text.json"))  # then Alice, who is

    world.sent_to(1, recipient=[ALICE])
    time.sleep(0.5)
    assert not [s for s in world.signal.sent if s.get("groupId") or s.get("recipient") == [BOB]]
    assert len(fake_openai.requests) == 1


def test_a_photo_reaches_the_model_and_a_reply_file_reaches_signal_cli_as_an_attachment(
    world: World, fake_openai: FakeOpenAI
) -> None:
    # Given a photo signal-cli downloaded, and a spoken reply the model will name with a MEDIA line
    world.signal.files["x7Qm2Vb9KpL4sN8dW3Zr.jpg"] = JPEG
    with FakeMediaHost() as host:
        host.files["/reply.ogg"] = file(OGG, "audio/ogg")
        fake_openai.reply_next(f"Nice photo.\nMEDIA:{host.url('/reply.ogg')}")

        # When Alice sends the photo, naming where the reply's audio is
        world.signal.notify(fresh("receive_dm_attachment.json", text=f"Look at this {host.url('/reply.ogg')}"))

        # Then the model saw the photo's bytes, and signal-cli sent the audio as an attachment
        (sent,) = world.sent_to(1, recipient=[ALICE])
    user = fake_openai.requests[0].json["messages"][-1]["content"]
    images = [part for part in user if isinstance(part, dict) and part.get("type") == "image_url"]
    assert len(images) == 1 and images[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    (uri,) = sent["attachments"]
    head, _, data = uri.partition(";base64,")
    assert head == "data:audio/ogg;filename=reply.ogg"
    assert base64.b64decode(data) == OGG
    assert sent["message"] == "Nice photo."  # the text is the file's caption, as Signal shows both
    world.row_of("Nice photo.", "sent")
