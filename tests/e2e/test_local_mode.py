"""Local mode as a new user meets it: webhooks in, replies in the outbox, bad input refused."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import boto3
import pytest

from tests.e2e.conftest import Client, telegram_update
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.e2e


def test_a_telegram_update_is_answered_once_even_when_sent_twice(client: Client) -> None:
    # Given a running local gateway and a Telegram update with the right secret
    update = telegram_update(5001, "hello")
    # When Telegram delivers it twice
    assert client.telegram(update) == (200, {"ok": True})
    assert client.telegram(update) == (200, {"ok": True, "duplicate": True})
    # Then the echo agent's reply lands in the outbox once, addressed to the chat
    rows = client.wait_outbox(1)
    time.sleep(1.0)  # long enough for a second turn to have shown up, were there one
    rows = client.outbox()
    assert len(rows) == 1
    row = rows[0]
    assert (row["platform"], row["chat_id"], row["thread_id"], row["text"]) == ("telegram", "99", None, "Echo: hello")
    assert row["status"] == "recorded" and row["created_at"] > 0


def test_a_forged_secret_is_refused_and_nothing_is_written(client: Client) -> None:
    status, body = client.telegram(telegram_update(5002, "hello"), secret="forged")
    assert status == 401 and body["ok"] is False
    from hermes_gateway.resources import INBOX

    assert boto3.client("dynamodb").scan(TableName=os.environ[INBOX.env_var])["Count"] == 0
    time.sleep(0.5)
    assert client.outbox() == []


def test_malformed_and_oversize_bodies_are_refused(client: Client) -> None:
    headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": "e2e-secret"}
    assert client.request("POST", "/webhooks/telegram", b"{oops", headers)[0] == 400
    assert client.request("POST", "/webhooks/telegram", b"[" + b"1," * 40000 + b"1]", headers)[0] == 413
    assert client.request("POST", "/webhooks/nowhere", b"{}", headers)[0] == 404
    assert client.request("GET", "/webhooks/telegram", None, headers)[0] == 405


def test_messages_in_one_chat_are_answered_in_order(client: Client) -> None:
    for i, text in enumerate(["one", "two", "three"]):
        assert client.telegram(telegram_update(6000 + i, text))[0] == 200
    deadline = time.time() + 30
    answers: list[str] = []
    while len(answers) < 3 and time.time() < deadline:
        rows = client.wait_outbox(len(answers) + 1, timeout=1)
        answers = [r["text"] for r in rows if r["text"].startswith("Echo:")]
    assert answers == ["Echo: one", "Echo: two", "Echo: three"]
    # a message that met the running turn was queued behind it; the chat heard so at most once
    assert len(rows) - len(answers) <= 1


def test_a_forum_topic_is_answered_in_its_thread(client: Client) -> None:
    # A topic is a shared session (BEHAVIOUR §2): the model sees who spoke, and echo repeats it
    update = telegram_update(7001, "in a topic", chat_id=-1001234567890, chat_type="supergroup", thread_id=17585)
    assert client.telegram(update)[0] == 200
    row = client.wait_outbox(1)[0]
    assert (row["chat_id"], row["thread_id"], row["text"]) == ("-1001234567890", "17585", "Echo: [Al] in a topic")


def test_the_web_chat_page_talks_to_the_echo_agent(client: Client) -> None:
    status, page = client.request("GET", "/")
    assert status == 200 and "<title>" in page
    token = client.gateway.local_secrets["WEBCHAT_TOKEN"]
    assert token in page
    message = {"chat_id": "web-1", "user_id": "web-1", "user_name": "You", "message_id": "m1", "text": "hello"}
    body = json.dumps(message).encode()
    headers = {"content-type": "application/json", "x-hermes-local-token": token}
    assert client.request("POST", "/webhooks/webchat", body, headers)[0] == 200
    assert client.request("POST", "/webhooks/webchat", body, {**headers, "x-hermes-local-token": "nope"})[0] == 401
    rows = client.wait_outbox(1, platform="webchat", chat_id="web-1")
    assert [r["text"] for r in rows] == ["Echo: hello"]


def test_health(client: Client) -> None:
    status, body = client.request("GET", "/local/health")
    assert status == 200 and body["ok"] is True
    assert body["functions"] == ["agent", "attachments", "delivery", "expiry", "ingress", "router", "session_api"]


def test_with_a_bot_token_the_reply_really_goes_to_the_bot_api(
    start_gateway: Callable[..., Client], fake_telegram: FakeTelegram
) -> None:
    client = start_gateway(TELEGRAM_BOT_TOKEN=fake_telegram.token, TELEGRAM_API_BASE_URL=fake_telegram.base_url)
    assert client.telegram(telegram_update(8001, "ping"))[0] == 200
    rows = client.wait_outbox(1, settled=True)
    assert fake_telegram.sent[0]["chat_id"] in (99, "99") and fake_telegram.sent[0]["text"] == "Echo: ping"
    assert rows[0]["status"] == "sent" and rows[0]["platform_message_id"] == "1"


def test_with_a_model_endpoint_it_talks_to_the_model(
    start_gateway: Callable[..., Client], fake_openai: FakeOpenAI
) -> None:
    client = start_gateway(GATEWAY_PROVIDER="openai", GATEWAY_MODEL="test-model", OPENAI_BASE_URL=fake_openai.base_url)
    fake_openai.reply_next("Hi Al, how can I help?")
    assert client.telegram(telegram_update(9001, "hello model"))[0] == 200
    assert [r["text"] for r in client.wait_outbox(1)] == ["Hi Al, how can I help?"]
    sent = fake_openai.requests[0].json
    assert sent["model"] == "test-model"
    assert sent["messages"][0]["role"] == "system" and sent["messages"][-1] == {
        "role": "user",
        "content": "hello model",
    }


def test_a_failing_model_gets_an_apology_and_frees_the_session(
    start_gateway: Callable[..., Client], fake_openai: FakeOpenAI
) -> None:
    client = start_gateway(GATEWAY_PROVIDER="openai", GATEWAY_MODEL="m", OPENAI_BASE_URL=fake_openai.base_url)
    fake_openai.answer_next(401, {"error": {"message": "invalid key"}})
    assert client.telegram(telegram_update(9101, "first"))[0] == 200
    rows = client.wait_outbox(1)
    assert rows[0]["text"].startswith("Sorry, something went wrong")
    # The lease was released: the next message gets a normal answer
    fake_openai.reply_next("second answer")
    assert client.telegram(telegram_update(9102, "second"))[0] == 200
    assert [r["text"] for r in client.wait_outbox(2)][-1] == "second answer"


def test_the_embedded_aws_answers_only_this_machines_clients(client: Client) -> None:
    # Given local mode's embedded AWS (moto: no authentication, CORS for every origin by default)
    import http.client
    import os
    from urllib.parse import urlsplit

    endpoint = urlsplit(os.environ["AWS_ENDPOINT_URL"])
    assert endpoint.port is not None

    def call(method: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=5)
        try:
            connection.putrequest(method, "/", skip_host=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders()
            response = connection.getresponse()
            response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}
        finally:
            connection.close()

    own = f"127.0.0.1:{endpoint.port}"
    # When a web page asks it (a CORS preflight, a simple cross-site POST, a DNS-rebinding name)
    for method, headers in [
        ("OPTIONS", {"Host": own, "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}),
        ("POST", {"Host": own, "Origin": "http://evil.example"}),
        ("GET", {"Host": f"evil.example:{endpoint.port}"}),
    ]:
        status, answered = call(method, headers)
        # Then it is refused, and nothing tells the browser it may read the answer
        assert status == 403 and "access-control-allow-origin" not in answered
    # while the functions and the CLI (boto3, no Origin) use it as before
    assert boto3.client("sqs").list_queues()["QueueUrls"]
