"""Telegram: webhook secret, update normalization, and the sender against a fake Bot API."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest, PermanentError, TransientError, Unauthorized
from hermes_gateway.platforms.telegram import (
    TELEGRAM_TEXT_LIMIT,
    Ignored,
    RateLimited,
    TargetGone,
    TelegramRejected,
    TelegramSender,
    normalize_update,
    parse_update,
    verify_secret_header,
)
from tests.fakes.telegram_server import (
    BOT_BLOCKED,
    CANT_PARSE_ENTITIES,
    CHAT_NOT_FOUND,
    SERVER_ERROR,
    FakeTelegram,
    too_many_requests,
)

NOW = 1_700_000_000.5
ALICE = {"id": 4242, "is_bot": False, "first_name": "Alice", "last_name": "Liddell", "username": "alice"}


def _update(fields: dict[str, Any], kind: str = "message", update_id: int = 1001) -> dict[str, Any]:
    """An update carrying a private-chat message from Alice, with `fields` added or replaced."""
    body = {"message_id": 7, "date": 1_700_000_000, "chat": {"id": 4242, "type": "private", "first_name": "Alice"}}
    return {"update_id": update_id, kind: {**body, **fields}}


def _parse(update: Any) -> InboundMessage:
    parsed = parse_update(update, bot="main", received_at=NOW)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- secret header ------------------------------------------------------------------------------


def test_secret_header_accepts_the_configured_secret() -> None:
    verify_secret_header({"x-telegram-bot-api-secret-token": "s3cret-_A"}, "s3cret-_A")


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing"),
        ({"x-telegram-bot-api-secret-token": ""}, "missing"),
        ({"x-telegram-bot-api-secret-token": "wrong"}, "does not match"),
        ({"x-telegram-bot-api-secret-token": "s3cret-_"}, "does not match"),
        ({"x-telegram-bot-api-secret-token": "s3cret-_Aé"}, "does not match"),
    ],
)
def test_secret_header_refuses_missing_or_wrong_secret(headers: dict[str, str], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason):
        verify_secret_header(headers, "s3cret-_A")


@pytest.mark.parametrize("expected", [None, ""])
def test_secret_header_refuses_everything_when_no_secret_is_configured(expected: str | None) -> None:
    # Given a deployment without a webhook secret, even a request with some header is refused
    with pytest.raises(Unauthorized, match="not configured"):
        verify_secret_header({"x-telegram-bot-api-secret-token": "anything"}, expected)


# --- normalization ------------------------------------------------------------------------------


def test_private_message_becomes_a_dm() -> None:
    message = _parse(_update({"from": ALICE, "text": "hello"}))

    assert message.text == "hello"
    assert message.event_id == "telegram:main:1001"
    assert message.received_at == NOW
    assert message.reply_to_message_id is None
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.user_id) == ("telegram", "dm", "4242", "4242")
    assert source.user_name == "Alice Liddell"
    assert source.chat_name == "Alice"
    assert source.message_id == "7"
    assert source.thread_id is None
    assert source.is_bot is False
    assert source.description == "DM with Alice Liddell"


def test_user_name_falls_back_to_username() -> None:
    sender = {"id": 5, "is_bot": False, "username": "bob"}
    message = _parse(_update({"from": sender, "text": "hi", "chat": {"id": 5, "type": "private"}}))
    assert message.source.user_name == "bob"
    assert message.source.chat_name == "bob"


@pytest.mark.parametrize("chat_type", ["group", "supergroup"])
def test_group_and_supergroup_become_group(chat_type: str) -> None:
    chat = {"id": -1001234567890, "type": chat_type, "title": "Ops"}
    message = _parse(_update({"from": ALICE, "text": "deploy?", "chat": chat}))

    assert message.source.chat_type == "group"
    assert message.source.chat_id == "-1001234567890"
    assert message.source.chat_name == "Ops"
    assert message.source.user_id == "4242"
    assert message.source.thread_id is None


def test_forum_topic_message_carries_its_thread() -> None:
    # Given a message in forum topic 17585; Telegram points reply_to_message at the topic's root
    chat = {"id": -1009876543210, "type": "supergroup", "title": "Team", "is_forum": True}
    message = _parse(
        _update(
            {
                "from": ALICE,
                "text": "status",
                "chat": chat,
                "message_thread_id": 17585,
                "is_topic_message": True,
                "reply_to_message": {"message_id": 17585, "forum_topic_created": {"name": "Deploys"}},
            }
        )
    )

    assert message.source.thread_id == "17585"
    assert message.source.chat_type == "group"
    assert message.reply_to_message_id is None  # the topic root is not a reply
    assert message.source.description == "group: Team, thread: 17585"


def test_reply_inside_a_forum_topic_keeps_the_replied_message() -> None:
    chat = {"id": -1009876543210, "type": "supergroup", "title": "Team", "is_forum": True}
    update = _update(
        {
            "from": ALICE,
            "text": "+1",
            "chat": chat,
            "message_thread_id": 17585,
            "is_topic_message": True,
            "reply_to_message": {"message_id": 17600},
        }
    )
    message = _parse(update)
    assert message.source.thread_id == "17585"
    assert message.reply_to_message_id == "17600"


def test_reply_in_a_non_forum_group_is_not_a_thread() -> None:
    # Given a reply in an ordinary group: Telegram sets message_thread_id but not is_topic_message
    chat = {"id": -4001, "type": "group", "title": "Friends"}
    update = _update(
        {
            "from": ALICE,
            "text": "agreed",
            "chat": chat,
            "message_thread_id": 88,
            "reply_to_message": {"message_id": 88, "text": "lunch?"},
        }
    )
    message = _parse(update)

    assert message.source.thread_id is None
    assert message.reply_to_message_id == "88"


def test_channel_post_has_no_user_id() -> None:
    # A channel post is written by the channel, not by a person: the router denies it by default
    chat = {"id": -1005550001, "type": "channel", "title": "News"}
    update = _update(
        {"text": "release 1.2", "chat": chat, "sender_chat": chat, "author_signature": "Eve"}, "channel_post"
    )
    message = _parse(update)

    assert message.source.chat_type == "channel"
    assert message.source.chat_id == "-1005550001"
    assert message.source.user_id is None
    assert message.source.user_name == "Eve"
    assert message.source.chat_name == "News"
    assert message.source.is_bot is False


def test_group_message_on_behalf_of_a_chat_has_no_user_id() -> None:
    # Given an anonymous admin: `from` is Telegram's placeholder bot, sender_chat is the group itself
    chat = {"id": -1001112223334, "type": "supergroup", "title": "Ops"}
    placeholder = {"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}
    message = _parse(_update({"from": placeholder, "sender_chat": chat, "text": "hi", "chat": chat}))

    assert message.source.user_id is None
    assert message.source.is_bot is False
    assert message.source.user_name == "Ops"


def test_bot_sender_is_marked() -> None:
    robot = {"id": 777, "is_bot": True, "first_name": "Robo"}
    chat = {"id": -4001, "type": "group", "title": "Friends"}
    message = _parse(_update({"from": robot, "text": "beep", "chat": chat}))
    assert message.source.is_bot is True
    assert message.source.user_id == "777"


def test_caption_is_the_text_of_a_media_message() -> None:
    update = _update({"from": ALICE, "photo": [{"file_id": "x", "width": 1, "height": 1}], "caption": "look"})
    assert _parse(update).text == "look"


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (_update({"from": ALICE, "new_chat_members": [ALICE]}), "no_text"),
        (_update({"from": ALICE, "text": "typo fixed"}, "edited_message"), "edited"),
        (_update({"text": "typo fixed"}, "edited_channel_post"), "edited"),
        ({"update_id": 5, "poll": {"id": "1", "question": "x"}}, "unsupported_update"),
        # a button press whose message is not included: there is no chat to answer in
        ({"update_id": 5, "callback_query": {"id": "1", "from": ALICE, "data": "x"}}, "button_unusable"),
        ({"update_id": 5}, "unsupported_update"),
        (_update({"from": ALICE, "text": "hi", "chat": {"id": 1, "type": "something_new"}}), "unsupported_chat_type"),
    ],
)
def test_updates_without_a_usable_message_are_ignored_with_a_reason(update: dict[str, Any], reason: str) -> None:
    assert parse_update(update, received_at=NOW) == Ignored(reason)  # type: ignore[arg-type]
    assert normalize_update(update, received_at=NOW) is None


def test_normalize_update_returns_the_message() -> None:
    message = normalize_update(_update({"from": ALICE, "text": "hi"}), received_at=NOW)
    assert message is not None
    assert message.event_id == "telegram:default:1001"


def _without(update: dict[str, Any], *path: str) -> dict[str, Any]:
    broken = copy.deepcopy(update)
    target = broken
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return broken


GOOD = _update({"from": ALICE, "text": "hi"})


@pytest.mark.parametrize(
    "update",
    [
        None,
        [],
        "update",
        {},
        {"update_id": "1001", "message": GOOD["message"]},
        {"update_id": True, "message": GOOD["message"]},
        {"update_id": 1, "message": "hello"},
        _without(GOOD, "message", "chat"),
        _without(GOOD, "message", "chat", "id"),
        _without(GOOD, "message", "message_id"),
        {**GOOD, "message": {**GOOD["message"], "chat": {"id": "4242", "type": "private"}}},
        {**GOOD, "message": {**GOOD["message"], "chat": "4242"}},
        {**GOOD, "message": {**GOOD["message"], "from": {"first_name": "no id"}}},
        {**GOOD, "message": {**GOOD["message"], "from": 4242}},
        {**GOOD, "message": {**GOOD["message"], "text": 42}},
    ],
)
def test_malformed_updates_are_bad_requests(update: Any) -> None:
    with pytest.raises(BadRequest):
        parse_update(update, received_at=NOW)


def test_round_trip_through_the_queue_envelope() -> None:
    message = _parse(_update({"from": ALICE, "text": "hi", "reply_to_message": {"message_id": 3}}))
    assert InboundMessage.from_dict(message.to_dict()) == message


# --- sender -------------------------------------------------------------------------------------


@pytest.fixture
def sender(fake_telegram: FakeTelegram) -> TelegramSender:
    return TelegramSender(fake_telegram.base_url, fake_telegram.token, timeout=2.0)


def _assert_no_token(exc: BaseException, token: str) -> None:
    assert token not in str(exc)
    assert token not in repr(exc)
    assert exc.__cause__ is None
    assert exc.__suppress_context__ or exc.__context__ is None


def test_send_text_posts_json_and_returns_the_message_id(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    first = sender.send_text("-1009876543210", "hello", thread_id="17585", parse_mode="HTML")
    second = sender.send_text("4242", "again")

    assert (first, second) == ("1", "2")
    request = fake_telegram.requests[0]
    assert request.http_method == "POST"
    assert request.path == f"/bot{fake_telegram.token}/sendMessage"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "chat_id": -1009876543210,
        "text": "hello",
        "message_thread_id": 17585,
        "parse_mode": "HTML",
    }
    assert fake_telegram.requests[1].json == {"chat_id": 4242, "text": "again"}


def test_channel_username_stays_a_string(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    sender.send_text("@news", "hi")
    assert fake_telegram.calls("sendMessage") == [{"chat_id": "@news", "text": "hi"}]


@pytest.mark.parametrize("status", [429, 200])
def test_flood_control_raises_rate_limited_with_retry_after(
    fake_telegram: FakeTelegram, sender: TelegramSender, status: int
) -> None:
    # Given Telegram answers flood control (as HTTP 429, or inside an otherwise odd answer)
    fake_telegram.answer_next(status, too_many_requests(17))

    with pytest.raises(RateLimited) as caught:
        sender.send_text("4242", "hi")

    assert caught.value.retry_after == 17.0
    assert isinstance(caught.value, TransientError)
    _assert_no_token(caught.value, fake_telegram.token)


def test_429_without_parameters_uses_the_retry_after_header(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.answer_next(429, "slow down", headers={"Retry-After": "3"})
    with pytest.raises(RateLimited) as caught:
        sender.send_text("4242", "hi")
    assert caught.value.retry_after == 3.0


@pytest.mark.parametrize(("status", "body"), [(500, SERVER_ERROR), (502, "<html>bad gateway</html>"), (503, b"")])
def test_server_errors_are_transient(
    fake_telegram: FakeTelegram, sender: TelegramSender, status: int, body: Any
) -> None:
    fake_telegram.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send_text("4242", "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value, fake_telegram.token)


def test_timeout_is_transient(fake_telegram: FakeTelegram) -> None:
    fake_telegram.answer_next(200, {"ok": True, "result": {"message_id": 1}}, delay=1.0)
    sender = TelegramSender(fake_telegram.base_url, fake_telegram.token, timeout=0.2)
    with pytest.raises(TransientError, match="timed out") as caught:
        sender.send_text("4242", "hi")
    _assert_no_token(caught.value, fake_telegram.token)


def test_connection_refused_is_transient(fake_telegram: FakeTelegram) -> None:
    # Given a server that has gone away
    url, token = fake_telegram.base_url, fake_telegram.token
    fake_telegram.stop()
    with pytest.raises(TransientError) as caught:
        TelegramSender(url, token, timeout=1.0).send_text("4242", "hi")
    _assert_no_token(caught.value, token)


def test_unparseable_formatting_is_sent_again_as_plain_text(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.answer_next(400, CANT_PARSE_ENTITIES)

    message_id = sender.send_text("4242", "*bold", parse_mode="MarkdownV2")

    assert message_id == "1"
    bodies = fake_telegram.calls("sendMessage")
    assert bodies[0] == {"chat_id": 4242, "text": "*bold", "parse_mode": "MarkdownV2"}
    assert bodies[1] == {"chat_id": 4242, "text": "*bold"}


def test_plain_text_fallback_happens_once(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    fake_telegram.answer_next(400, CANT_PARSE_ENTITIES, times=2)
    with pytest.raises(TelegramRejected):
        sender.send_text("4242", "*bold", parse_mode="MarkdownV2")
    assert len(fake_telegram.requests) == 2


def test_entity_error_without_parse_mode_is_not_retried(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    fake_telegram.answer_next(400, CANT_PARSE_ENTITIES)
    with pytest.raises(TelegramRejected):
        sender.send_text("4242", "*bold")
    assert len(fake_telegram.requests) == 1


@pytest.mark.parametrize(
    ("status", "body", "description"),
    [
        (403, BOT_BLOCKED, "Forbidden: bot was blocked by the user"),
        (400, CHAT_NOT_FOUND, "Bad Request: chat not found"),
    ],
)
def test_dead_targets_raise_target_gone(
    fake_telegram: FakeTelegram, sender: TelegramSender, status: int, body: dict[str, Any], description: str
) -> None:
    fake_telegram.answer_next(status, body)
    with pytest.raises(TargetGone) as caught:
        sender.send_text("4242", "hi")
    assert isinstance(caught.value, PermanentError)
    assert (caught.value.status, caught.value.description) == (status, description)
    assert caught.value.migrate_to_chat_id is None
    _assert_no_token(caught.value, fake_telegram.token)


def test_group_upgraded_to_supergroup_names_the_new_chat(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    body = {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: group chat was upgraded to a supergroup chat",
        "parameters": {"migrate_to_chat_id": -1001234567890},
    }
    fake_telegram.answer_next(400, body)
    with pytest.raises(TargetGone) as caught:
        sender.send_text("-4001", "hi")
    assert caught.value.migrate_to_chat_id == "-1001234567890"


def test_other_rejections_are_permanent_but_not_gone(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    with pytest.raises(TelegramRejected) as caught:
        sender.send_text("4242", "x" * (TELEGRAM_TEXT_LIMIT + 1))
    assert not isinstance(caught.value, TargetGone)
    assert "message is too long" in str(caught.value)


def test_wrong_token_is_permanent_and_not_echoed(fake_telegram: FakeTelegram) -> None:
    wrong = "999:WRONG-token-that-must-stay-secret"
    with pytest.raises(TelegramRejected) as caught:
        TelegramSender(fake_telegram.base_url, wrong).send_text("4242", "hi")
    assert caught.value.status == 401
    _assert_no_token(caught.value, wrong)


@pytest.mark.parametrize("body", [{"ok": True, "result": True}, "<html>ok</html>"])
def test_a_success_without_message_id_is_permanent(
    fake_telegram: FakeTelegram, sender: TelegramSender, body: Any
) -> None:
    fake_telegram.answer_next(200, body)
    with pytest.raises(PermanentError, match="without a message_id"):
        sender.send_text("4242", "hi")


def test_sender_repr_hides_the_token(fake_telegram: FakeTelegram, sender: TelegramSender) -> None:
    assert fake_telegram.token not in repr(sender)
