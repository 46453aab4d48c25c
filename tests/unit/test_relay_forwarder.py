"""The reference Discord relay (relays/discord-gateway/forwarder.py): its pure conversion and
signing, checked against the gateway's own verification and relay adapter.

The forwarder ships apart from the gateway, so it is loaded from its path (it is not a package)
and must import neither discord.py nor hermes_gateway at module level.
"""

from __future__ import annotations

import ast
import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from hermes_gateway.platforms.standard_webhook import verify
from hermes_gateway.services.ingress import HttpRequest, handle_webhook
from tests.fakes import platforms
from tests.fakes.callback_server import FakeCallback
from tests.fakes.services import FakeEnqueue, make_settings

pytest_plugins = ("tests.fakes.callback_server",)

FORWARDER = Path(__file__).resolve().parents[2] / "relays" / "discord-gateway" / "forwarder.py"
BOT_ID = "1100000000000000001"
GUILD = SimpleNamespace(id=1300000000000000001, name="Ops")
ALICE = SimpleNamespace(id=4242, name="alice", global_name="Alice", bot=False)
SECRET = "whsec_" + base64.b64encode(b"relay-signing-secret-for-tests!!").decode()


@pytest.fixture(scope="module")
def forwarder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("discord_gateway_forwarder", FORWARDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def message(**fields: Any) -> SimpleNamespace:
    """A stand-in for a discord.py Message in a guild text channel (channel type 0)."""
    values: dict[str, Any] = {
        "id": 1300000000000000042,
        "content": "deploy?",
        "author": ALICE,
        "guild": GUILD,
        "channel": SimpleNamespace(id=1300000000000000002, name="general", type=SimpleNamespace(value=0)),
        "mentions": [],
        "reference": None,
    }
    values.update(fields)
    return SimpleNamespace(**values)


def _imported(nodes: list[ast.AST]) -> set[str]:
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(str(node.module).split(".")[0])
    return names


def test_the_forwarder_never_imports_the_gateway_and_imports_discord_only_in_main() -> None:
    tree = ast.parse(FORWARDER.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    outside_main = [n for n in ast.walk(tree) if n not in set(ast.walk(main))]

    assert "hermes_gateway" not in _imported(list(ast.walk(tree)))
    assert "discord" not in _imported(outside_main)
    assert "discord" in _imported(list(ast.walk(main)))


def test_its_copy_of_sign_reproduces_the_published_vector(forwarder: ModuleType) -> None:
    signature = forwarder.sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_guild_channel_message_becomes_a_group_message(forwarder: ModuleType) -> None:
    payload = forwarder.relay_payload(message(), bot_user_id=BOT_ID)

    assert payload == {
        "platform": "discord",
        "event_id": "1300000000000000042",
        "text": "deploy?",
        "source": {
            "chat_id": "1300000000000000002",
            "chat_type": "group",
            "user_id": "4242",
            "user_name": "Alice",
            "message_id": "1300000000000000042",
            "is_bot": False,
            "chat_name": "general",
            "scope_id": "1300000000000000001",
        },
        "mentions_bot": False,
        "reply_via": "platform",
    }


@pytest.mark.parametrize("thread_type", [10, 11, 12])
def test_a_thread_message_keeps_its_parent(forwarder: ModuleType, thread_type: int) -> None:
    thread = SimpleNamespace(
        id=1300000000000000007, name="deploys", type=SimpleNamespace(value=thread_type), parent_id=1300000000000000002
    )
    payload = forwarder.relay_payload(message(channel=thread), bot_user_id=BOT_ID)

    source = payload["source"]
    assert (source["chat_type"], source["chat_id"], source["thread_id"]) == (
        "thread",
        "1300000000000000007",
        "1300000000000000007",
    )
    assert source["parent_chat_id"] == "1300000000000000002"
    assert source["scope_id"] == "1300000000000000001"


def test_a_dm_has_no_scope(forwarder: ModuleType) -> None:
    dm = SimpleNamespace(id=1300000000000000099, type=1)  # a plain int type works as well
    payload = forwarder.relay_payload(message(guild=None, channel=dm), bot_user_id=BOT_ID)
    assert payload["source"]["chat_type"] == "dm"
    assert "scope_id" not in payload["source"]
    assert "chat_name" not in payload["source"]


def test_mentions_and_replies_are_carried(forwarder: ModuleType) -> None:
    bot = SimpleNamespace(id=int(BOT_ID))
    reply = SimpleNamespace(message_id=1300000000000000040)
    payload = forwarder.relay_payload(message(mentions=[ALICE, bot], reference=reply), bot_user_id=BOT_ID)
    assert payload["mentions_bot"] is True
    assert payload["reply_to_message_id"] == "1300000000000000040"


def test_the_user_name_falls_back_to_the_username(forwarder: ModuleType) -> None:
    author = SimpleNamespace(id=5, name="bob", global_name=None, bot=False)
    assert forwarder.relay_payload(message(author=author), bot_user_id=BOT_ID)["source"]["user_name"] == "bob"


def test_own_messages_bots_and_empty_text_are_not_forwarded(forwarder: ModuleType) -> None:
    me = SimpleNamespace(id=int(BOT_ID), name="hermes", global_name=None, bot=True)
    other_bot = SimpleNamespace(id=77, name="ci", global_name=None, bot=True)

    assert forwarder.relay_payload(message(author=me), bot_user_id=BOT_ID) is None
    assert forwarder.relay_payload(message(author=me), bot_user_id=BOT_ID, forward_bots=True) is None
    assert forwarder.relay_payload(message(author=other_bot), bot_user_id=BOT_ID) is None
    assert forwarder.relay_payload(message(content=""), bot_user_id=BOT_ID) is None
    assert forwarder.relay_payload(message(content="  \n"), bot_user_id=BOT_ID) is None
    forwarded = forwarder.relay_payload(message(author=other_bot), bot_user_id=BOT_ID, forward_bots=True)
    assert forwarded["source"]["is_bot"] is True


def test_a_signed_request_passes_the_gateways_verification(forwarder: ModuleType) -> None:
    payload = forwarder.relay_payload(message(), bot_user_id=BOT_ID)
    request = forwarder.signed_request("https://gw.example.org/webhooks/relay", SECRET, payload, msg_id="m1", now=1000)

    headers = {k.lower(): v for k, v in request.header_items()}
    verify(SECRET, headers, request.data, now=1000)
    assert json.loads(request.data) == payload
    assert request.get_method() == "POST"


def test_the_gateway_accepts_what_the_forwarder_sends(forwarder: ModuleType) -> None:
    # Given a thread message converted and signed by the forwarder
    thread = SimpleNamespace(id=1300000000000000007, name="deploys", type=SimpleNamespace(value=11), parent_id=2)
    payload = forwarder.relay_payload(
        message(channel=thread, mentions=[SimpleNamespace(id=int(BOT_ID))]), bot_user_id=BOT_ID
    )
    signed = forwarder.signed_request("https://gw.example.org/webhooks/relay", SECRET, payload, msg_id="m1", now=5000)
    request = HttpRequest("POST", "/webhooks/relay", {k.lower(): v for k, v in signed.header_items()}, signed.data)
    settings = make_settings({"RELAY_ENABLED": "true"})
    enqueue = FakeEnqueue()

    # When the gateway receives it
    response = handle_webhook(
        "relay",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, {"RELAY_SIGNING_SECRET": SECRET}, clock=lambda: 5000),
        enqueue_once=enqueue,
        received_at=5000,
    )

    # Then it is one trusted Discord message whose reply goes through Discord's REST API
    assert response.status == 200
    envelope = enqueue.sent[0]
    assert envelope["event_id"] == "relay:discord:1300000000000000042"
    assert envelope["source"]["platform"] == "discord"
    assert envelope["source"]["chat_type"] == "thread"
    assert envelope["facts"] == ["trusted", "mentions_bot"]
    assert envelope["reply_context"] == {}


def test_deliver_posts_once_when_accepted(forwarder: ModuleType, fake_callback: FakeCallback) -> None:
    fake_callback.secret = SECRET
    payload = forwarder.relay_payload(message(), bot_user_id=BOT_ID)

    status = forwarder.deliver(fake_callback.url, SECRET, payload, sleep=lambda _: None)

    assert status == 200
    assert fake_callback.delivered == [payload]


def test_deliver_retries_throttling_and_errors_under_one_webhook_id(
    forwarder: ModuleType, fake_callback: FakeCallback
) -> None:
    fake_callback.secret = SECRET
    fake_callback.answer_next(503, "busy", headers={"Retry-After": "2"})
    fake_callback.answer_next(429, "slow down")
    waits: list[float] = []

    status = forwarder.deliver(
        fake_callback.url, SECRET, forwarder.relay_payload(message(), bot_user_id=BOT_ID), sleep=waits.append
    )

    assert status == 200
    assert len(fake_callback.requests) == 3
    assert all(r.verified for r in fake_callback.requests)
    assert len({r.headers["webhook-id"] for r in fake_callback.requests}) == 1
    assert waits == [2.0, 2.0]  # Retry-After first, then exponential backoff (attempt 2)


def test_deliver_does_not_retry_a_refusal(forwarder: ModuleType, fake_callback: FakeCallback) -> None:
    fake_callback.secret = SECRET
    fake_callback.answer_next(400, {"ok": False})
    status = forwarder.deliver(
        fake_callback.url, SECRET, forwarder.relay_payload(message(), bot_user_id=BOT_ID), sleep=lambda _: None
    )
    assert status == 400
    assert len(fake_callback.requests) == 1


def test_deliver_gives_up_after_the_attempts(forwarder: ModuleType, fake_callback: FakeCallback) -> None:
    url = fake_callback.url
    fake_callback.stop()
    payload = forwarder.relay_payload(message(), bot_user_id=BOT_ID)
    assert forwarder.deliver(url, SECRET, payload, attempts=2, timeout=1.0, sleep=lambda _: None) == 0
