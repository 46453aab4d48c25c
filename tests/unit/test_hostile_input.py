"""Hostile input at the edge: every platform adapter, signed and unsigned, straight into
`handle_webhook` (no HTTP, no AWS; the Bot Framework's and Google's keys from loopback fakes).

A hostile body or header is a 4xx decided at ingress, never an exception past the adapter, and
whatever ingress accepts is an envelope every later step can encode (the router reads it back,
hashes its ids into session keys and log lines). The rows of the "Hostile input" issue each have
a test below; the properties then throw random and mutated bodies at each adapter.

Speed is measured by `bench/hostile_input.py`, never asserted here.
"""

from __future__ import annotations

import io
import json
import logging
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_gateway.observability import hash_id, logger
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, handle_webhook, webhook_route
from hermes_gateway.settings import Settings, load_settings
from tests.fakes.jwt import NOW
from tests.fakes.platforms import adapters
from tests.fakes.webhook_signers import (
    EVERY_PLATFORM,
    SECRETS,
    Keys,
    Request,
    Sign,
    accepting_every_platform,
)

HOST = "gateway.test"
SORT_KEY_BYTES = 1024  # DynamoDB's limit on a sort key's value
PARTITION_KEY_BYTES = 2048  # on a partition key's
# The source's ids: keys later on (the routes' key is made of them, the pairing table's holds the user's)
ID_FIELDS = (
    *("chat_id", "user_id", "thread_id", "user_id_alt", "chat_id_alt", "scope_id", "parent_chat_id", "message_id"),
)
PLATFORMS = EVERY_PLATFORM
# What a hostile request may be answered with: accepted or ignored, malformed, unauthenticated,
# not found or wrong method (Matrix routes), too large. Never a 5xx, never an exception.
ANSWERS = frozenset({200, 400, 401, 404, 405, 413})
TIMESTAMP_HEADERS = {
    "discord": "x-signature-timestamp",
    "webhook": "webhook-timestamp",
    "relay": "webhook-timestamp",
    "feishu": "x-lark-request-timestamp",
    "slack": "x-slack-request-timestamp",
}


@dataclass
class Harness:
    """Every platform on, as one deployment; `send` is what the ingress function does with a request."""

    keys: Keys
    settings: Settings
    lookup: Any
    enqueued: list[dict[str, Any]] = field(default_factory=list)

    def signed(self, name: str, body: bytes, *, n: int = 1, forged: bool = False) -> Request:
        return PLATFORMS[name].sign(Sign(self.keys, HOST, NOW, forged), n, body)

    def payload(self, name: str, n: int = 1) -> bytes:
        return PLATFORMS[name].payload(n, PLATFORMS[name].chat)

    def send(self, request: Request) -> HttpResponse:
        path, _, query = request.path.partition("?")
        http = HttpRequest(
            method=request.method,
            path=path,
            headers={**{k.lower(): v for k, v in request.headers.items()}, "host": HOST},
            body=request.body,
            query=dict(urllib.parse.parse_qsl(query)),
            raw_query=query,
        )
        return handle_webhook(
            webhook_route(path)[1],
            http,
            settings=self.settings,
            adapters=self.lookup,
            enqueue_once=self._enqueue,
            received_at=NOW,
        )

    def sent_now(self, request: Request) -> tuple[int, int]:
        before = len(self.enqueued)
        return self.send(request).status, len(self.enqueued) - before

    def _enqueue(self, envelope: dict[str, Any]) -> bool:
        # What the router does with it: read it back as UTF-8 JSON, then hash its ids and key.
        text = json.dumps(envelope, ensure_ascii=False)
        text.encode("utf-8")
        assert json.loads(text) == json.loads(json.dumps(envelope))
        # What DynamoDB accepts as a key: the event id is the inbox's sort key, the session key the
        # routes' partition key, a user id part of the pairing table's (ValidationException beyond)
        assert len(str(envelope["event_id"]).encode()) <= SORT_KEY_BYTES
        assert len(str(envelope["session_key"]).encode()) <= PARTITION_KEY_BYTES // 2
        for name in ID_FIELDS:  # (names and text are values, never keys)
            value = envelope["source"].get(name)
            assert value is None or len(str(value).encode()) <= SORT_KEY_BYTES // 2, name
        self.enqueued.append(envelope)
        return True


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    keys = Keys.generate()
    with accepting_every_platform(keys) as env:
        chosen = load_settings(env=env, config={})
        yield Harness(keys, chosen, adapters(chosen, env, clock=lambda: NOW))


def test_every_platform_accepts_its_well_formed_signed_request(harness: Harness) -> None:
    # The control: each refusal below is the check's, not a broken signer's
    for name in PLATFORMS:
        assert harness.sent_now(harness.signed(name, harness.payload(name))) == (200, 1), name


# --- crashes before any signature check ---------------------------------------------------------


@pytest.mark.parametrize("digits", [400, 5000])
@pytest.mark.parametrize("name", sorted(TIMESTAMP_HEADERS))
def test_an_absurd_timestamp_is_refused_before_any_signature_check(harness: Harness, name: str, digits: int) -> None:
    # Given a request whose signed timestamp header holds 400 or 5,000 digits (no credential needed)
    request = harness.signed(name, harness.payload(name))
    headers = {**request.headers, TIMESTAMP_HEADERS[name]: "9" * digits}
    # Then it is refused as unauthenticated (not an OverflowError or the int-digit limit)
    assert harness.sent_now(replace(request, headers=headers)) == (401, 0)


@pytest.mark.parametrize("forged", [False, True])
def test_a_feishu_body_nested_20000_deep_is_refused(harness: Harness, forged: bool) -> None:
    body = b"[" * 20_000 + b"]" * 20_000
    # signed: authentic, so the body itself is the 400; forged: nothing can be verified
    assert harness.sent_now(harness.signed("feishu", body, forged=forged)) == (401 if forged else 400, 0)


def test_a_mattermost_json_token_with_a_lone_surrogate_is_refused(harness: Harness) -> None:
    body = json.dumps({"token": "\ud800", "post_id": "p1", "channel_id": "c1", "user_id": "u1", "text": "hi"})
    request = Request("POST", "/webhooks/mattermost", body.encode(), {"content-type": "application/json"})
    assert harness.sent_now(request) == (401, 0)


# --- lone surrogates ---------------------------------------------------------------------------

LONE = "\ud800"


def _with(body: bytes, path: tuple[str | int, ...], value: Any) -> bytes:
    """`body` (JSON) with the value at `path` replaced; json.dumps writes a surrogate as `\\ud800`."""
    tree = json.loads(body)
    node = tree
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return json.dumps(tree).encode()


SIGNED_IDS = [
    ("slack", ("event", "ts")),
    ("teams", ("conversation", "id")),
    ("line", ("events", 0, "webhookEventId")),
    ("relay", ("event_id",)),
    ("webhook", ("chat_id",)),
    ("discord", ("channel_id",)),
    ("google_chat", ("message", "name")),
    ("feishu", ("header", "event_id")),
    ("whatsapp", ("entry", 0, "changes", 0, "value", "messages", 0, "id")),
    ("bluebubbles", ("data", "guid")),
    ("bluebubbles", ("data", "chats", 0, "guid")),
]
OTHER_FIELDS = [
    ("telegram", ("message", "text")),
    ("slack", ("event", "text")),
    ("whatsapp", ("entry", 0, "changes", 0, "value", "contacts", 0, "profile", "name")),
    ("discord", ("member", "user", "username")),
    ("webhook", ("user_name",)),
    ("relay", ("source", "user_name")),
    ("line", ("events", 0, "message", "text")),
    ("teams", ("from", "name")),
    ("google_chat", ("user", "displayName")),
    ("feishu", ("event", "sender", "sender_id", "union_id")),
    ("bluebubbles", ("data", "text")),
    ("bluebubbles", ("data", "handle", "address")),
]


@pytest.mark.parametrize(("name", "path"), SIGNED_IDS + OTHER_FIELDS, ids=lambda v: str(v))
def test_a_lone_surrogate_anywhere_in_a_signed_body_is_a_400(harness: Harness, name: str, path: tuple[Any]) -> None:
    # Given a correctly signed body with a lone surrogate in an id (a 500 before) or in any other
    # field (accepted before, then the router failed on it at every retry)
    body = _with(harness.payload(name), path, f"x{LONE}y")
    # Then ingress refuses it once, and nothing reaches the queue
    assert harness.sent_now(harness.signed(name, body)) == (400, 0)


@pytest.mark.parametrize("field_name", ["event_id", "sender", "room_id", "body"])
def test_a_matrix_event_with_a_lone_surrogate_is_ignored_and_the_rest_of_the_transaction_goes_on(
    harness: Harness, field_name: str
) -> None:
    events = json.loads(harness.payload("matrix", 7))["events"]
    bad = dict(events[0])
    if field_name == "body":
        bad["content"] = {**bad["content"], "body": LONE}
    else:
        bad[field_name] = f"{bad[field_name]}{LONE}"
    body = json.dumps({"events": [bad, {**events[0], "event_id": "$fine7"}]}).encode()
    # A 400 would make the homeserver resend the transaction forever: the bad event is ignored instead
    assert harness.sent_now(harness.signed("matrix", body, n=7)) == (200, 1)


def test_a_lone_surrogate_in_a_header_is_a_400(harness: Harness) -> None:
    request = harness.signed("telegram", harness.payload("telegram"))
    headers = {**request.headers, "x-telegram-bot-api-secret-token": LONE}
    assert harness.sent_now(replace(request, headers=headers)) == (400, 0)


def test_a_percent_encoded_surrogate_in_a_form_body_is_refused(harness: Harness) -> None:
    fields = dict(urllib.parse.parse_qsl(harness.payload("mattermost").decode()))
    body = urllib.parse.urlencode(fields).replace("hello", "%ED%A0%80").encode()
    status, enqueued = harness.sent_now(harness.signed("mattermost", body))
    assert (status, enqueued) == (401, 0)  # the token is in the body: an unreadable body carries none


def test_a_log_line_holding_a_lone_surrogate_is_written_and_not_lost(capsys: pytest.CaptureFixture[str]) -> None:
    # Given the gateway's logger writing to a strict UTF-8 stream (as Lambda's stdout is)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(stream)
    try:
        # When a line carries a hostile value (a reason quoting a platform field)
        logger.warning("webhook rejected", extra={"reason": f"bad id {LONE}", "session": hash_id(LONE)})
    finally:
        handler.setStream(previous)
    # Then the line is written, valid JSON that names the value, and nothing went to stderr
    line = json.loads(raw.getvalue().decode("utf-8").strip().splitlines()[-1])
    assert line["reason"] == f"bad id {LONE}"
    assert len(line["session"]) == 12
    assert "Logging error" not in capsys.readouterr().err


# --- ids too long for a key, and values of the wrong shape -----------------------------------------

LONG_ID = "x" * 3000  # DynamoDB takes 1,024 bytes in a sort key, 2,048 in a partition key
EMOJI_ID = "\U0001f600" * 700  # 700 characters, 2,800 bytes


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("line", ("events", 0, "webhookEventId"), LONG_ID),
        ("whatsapp", ("entry", 0, "changes", 0, "value", "messages", 0, "id"), LONG_ID),
        ("teams", ("conversation", "id"), LONG_ID),
        ("slack", ("team_id",), EMOJI_ID),
        ("feishu", ("header", "event_id"), EMOJI_ID),
        ("telegram", ("message", "chat", "id"), EMOJI_ID),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "",
)
def test_an_id_too_long_for_a_key_is_a_400_not_an_inbox_write_that_fails(
    harness: Harness, name: str, path: tuple[Any, ...], value: str
) -> None:
    # Given a correctly signed request whose id is longer than any DynamoDB key (a 500 before: the
    # inbox's PutItem raised ValidationException, and the platform retried it for hours or days)
    request = harness.signed(name, _with(harness.payload(name), path, value))
    # Then it is refused once, with the reason, and nothing is enqueued
    assert harness.sent_now(request) == (400, 0)


def test_a_twilio_message_sid_too_long_for_a_key_is_a_400(harness: Harness) -> None:
    fields = dict(urllib.parse.parse_qsl(harness.payload("sms").decode()))
    body = urllib.parse.urlencode({**fields, "MessageSid": "SM" + LONG_ID}).encode()
    assert harness.sent_now(harness.signed("sms", body)) == (400, 0)


@pytest.mark.parametrize("value", [LONG_ID, EMOJI_ID])
def test_a_matrix_event_id_too_long_is_ignored_and_the_transaction_goes_on(harness: Harness, value: str) -> None:
    events = json.loads(harness.payload("matrix", 7))["events"]
    body = json.dumps({"events": [{**events[0], "event_id": "$" + value}, {**events[0], "event_id": "$fine8"}]})
    # A 400 would make the homeserver resend the transaction forever: the bad event is ignored
    assert harness.sent_now(harness.signed("matrix", body.encode(), n=7)) == (200, 1)


@pytest.mark.parametrize("shape", [[], ["text"], {"type": "text"}, 7], ids=repr)
@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("matrix", ("events", 0, "content", "msgtype")),
        ("feishu", ("event", "message", "message_type")),
        ("line", ("events", 0, "message", "type")),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_an_array_or_number_where_a_string_belongs_is_no_crash(
    harness: Harness, name: str, path: tuple[Any, ...], shape: Any
) -> None:
    # Given a signed request with an array, an object or a number where the platform sends a
    # string (TypeError: unhashable type: 'list' before, a 500)
    request = harness.signed(name, _with(harness.payload(name), path, shape))
    # Then it is answered: a message of no type the gateway reads is ignored (200) or refused (400)
    status, enqueued = harness.sent_now(request)
    assert status in (200, 400) and enqueued == 0


@pytest.mark.parametrize("shape", [[], ["mention"], {"type": "mention"}, 7, None], ids=repr)
def test_a_teams_entity_type_of_the_wrong_shape_is_no_crash(harness: Harness, shape: Any) -> None:
    activity = json.loads(harness.payload("teams"))
    activity["entities"] = [{"type": shape, "text": "<at>bot</at>", "mentioned": {"id": shape}}, shape]
    assert harness.sent_now(harness.signed("teams", json.dumps(activity).encode())) == (200, 1)


def test_every_value_of_every_platform_may_have_the_wrong_shape_or_length(harness: Harness) -> None:
    # Every value of each platform's well-formed payload, in turn: each wrong shape and each id
    # too long for a key. Each request is answered 2xx or 4xx, and what is enqueued fits the keys
    # (the harness's check); the properties below throw the same at random.
    for name in sorted(PLATFORMS):
        base = harness.payload(name, 900)
        try:
            tree = json.loads(base)
        except ValueError:
            continue  # a form (Twilio, Mattermost): every value is a string (the Twilio test above)
        for path in _paths(tree):
            for value in (*WRONG_SHAPES, *LONG_VALUES):
                status = harness.send(harness.signed(name, _with(base, path, value), n=900)).status
                assert status in ANSWERS, (name, path, value if not isinstance(value, str) else len(value))


# --- Teams mentions ----------------------------------------------------------------------------


def test_an_unclosed_at_tag_never_swallows_a_later_mention(harness: Harness) -> None:
    # Each <at> is read only up to the next tag (which keeps a body of 16,000 unclosed tags linear:
    # bench/hostile_input.py measures it); a stray one stays as it was written
    activity = json.loads(harness.payload("teams"))
    activity["text"] = "<at>stray <at>Bob</at> hi"
    status, enqueued = harness.sent_now(harness.signed("teams", json.dumps(activity).encode()))
    assert (status, enqueued) == (200, 1)
    assert harness.enqueued[-1]["text"] == "<at>stray Bob hi"


# --- properties: random and mutated bodies, signed and unsigned ---------------------------------

HOSTILE_JSON = (
    '"\\ud800"',
    '"a\\udfffb"',
    '"\\udc00\\ud800"',
    "1" + "0" * 400,
    "9" * 5000,
    "-" + "9" * 60,
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "1." + "5" * 300,
    "[" * 20_000 + "]" * 20_000,
    '{"a":' * 100 + "1" + "}" * 100,
    "[" * 70 + '"deep"' + "]" * 70,
    "null",
    "true",
    "0",
    "-1",
    "1.5",
    "[]",
    "{}",
    '""',
    '"../../etc/passwd"',
    '"\\u0000"',
    '"a:b#c%d"',
    '"' + "<at>" * 3000 + '"',
    '"' + "x" * 3000 + '"',
)
HOSTILE_HEADERS = (
    "9" * 400,
    "9" * 5000,
    "",
    "-1",
    "١٧٦٤٤٠٠٠٠٠",
    " 1764400000",
    "1764400000.5",
    f"a{LONE}b",
    "Bearer " + "x" * 5000,
    "Bearer a.b.c",
    "sha256=zz",
    "v1," + "=" * 100,
)
HOSTILE_FORM = ("%ED%A0%80", "%FF%FE", "9" * 5000, "../../etc", "a%00b", "%", "a=b&a=c", "")
_MARK = "\u0001hostile\u0001"
WRONG_SHAPES: tuple[Any, ...] = ([], ["text"], [["x"]], {}, {"type": "text"}, 7, -1.5, True, None)
LONG_VALUES = ("x" * 3000, "\U0001f600" * 700, "$" + "e" * 2100 + ":example.org")


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += _paths(value, (*prefix, index))
    return found


def _json_mutation(data: st.DataObject, body: bytes) -> bytes:
    """One value of the payload replaced: by a raw hostile literal, random text, or a JSON string
    holding hostile JSON (Feishu's message content is JSON inside JSON)."""
    tree = json.loads(body)
    path = data.draw(st.sampled_from(_paths(tree)))
    node = tree
    for step in path[:-1]:
        node = node[step]
    kind = data.draw(st.sampled_from(["raw", "text", "nested", "delete", "shape", "long"]))
    if kind == "delete" and isinstance(node, dict):
        del node[path[-1]]
        return json.dumps(tree).encode()
    if kind == "text":
        node[path[-1]] = data.draw(st.text(max_size=40) | st.integers() | st.floats(allow_nan=False))
        return json.dumps(tree).encode()
    if kind == "shape":  # an array, an object, a number or a boolean where the platform sends a string
        node[path[-1]] = data.draw(st.sampled_from(WRONG_SHAPES))
        return json.dumps(tree).encode()
    if kind == "long":  # an id longer than any key DynamoDB takes, in bytes (a wide character is 4)
        node[path[-1]] = data.draw(st.sampled_from(LONG_VALUES))
        return json.dumps(tree).encode()
    literal = data.draw(st.sampled_from(HOSTILE_JSON))
    if kind == "nested":
        node[path[-1]] = "{" + f'"text": {literal}' + "}"
        return json.dumps(tree).encode()
    node[path[-1]] = _MARK
    return json.dumps(tree).encode().replace(json.dumps(_MARK).encode(), literal.encode())


def _form_mutation(data: st.DataObject, body: bytes) -> bytes:
    pairs = urllib.parse.parse_qsl(body.decode())
    index = data.draw(st.integers(0, len(pairs) - 1))
    raw = data.draw(st.sampled_from(HOSTILE_FORM) | st.text(max_size=20).map(urllib.parse.quote_plus))
    encoded = [f"{urllib.parse.quote_plus(k)}={urllib.parse.quote_plus(v)}" for k, v in pairs]
    encoded[index] = f"{urllib.parse.quote_plus(pairs[index][0])}={raw}"
    return "&".join(encoded).encode()


def _byte_mutation(data: st.DataObject, body: bytes) -> bytes:
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(mutated)))
        op = data.draw(st.sampled_from(["insert", "replace", "delete"]))
        chunk = data.draw(st.binary(min_size=1, max_size=8))
        if op == "insert" or at == len(mutated):
            mutated[at:at] = chunk
        elif op == "replace":
            mutated[at : at + len(chunk)] = chunk
        else:
            del mutated[at : at + len(chunk)]
    return bytes(mutated)


def _mutated(data: st.DataObject, body: bytes) -> bytes:
    kinds: list[Callable[[st.DataObject, bytes], bytes]] = [_byte_mutation]
    try:
        json.loads(body)
        kinds.append(_json_mutation)
    except ValueError:
        kinds.append(_form_mutation)
    return data.draw(st.sampled_from(kinds))(data, body)


@pytest.mark.parametrize("name", sorted(PLATFORMS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_hostile_request_raises_past_the_adapter(harness: Harness, name: str, data: st.DataObject) -> None:
    # Given a platform's well-formed request, mutated (body and/or headers), signed or not
    base = harness.payload(name, 900)
    body = data.draw(st.sampled_from([_mutated(data, base), data.draw(st.binary(max_size=200)), base]))
    mode = data.draw(st.sampled_from(["signed", "forged", "unsigned"]))
    request = harness.signed(name, body if mode == "signed" else base, n=900, forged=mode == "forged")
    request = replace(request, body=body)
    if data.draw(st.booleans()):
        header = data.draw(st.sampled_from(sorted(request.headers)))
        request = replace(request, headers={**request.headers, header: data.draw(st.sampled_from(HOSTILE_HEADERS))})
    # When ingress handles it, Then it is answered (never raised), with a 2xx or a 4xx, and what it
    # enqueued (checked by the harness) is an envelope every later step can encode
    assert harness.send(request).status in ANSWERS


def test_the_signers_secrets_never_reach_an_answer(harness: Harness) -> None:
    # A refusal names the reason, never a value it compared against
    request = harness.signed("slack", harness.payload("slack"), forged=True)
    answer = json.dumps(harness.send(request).body)
    assert not any(secret in answer for secret in SECRETS.values())
