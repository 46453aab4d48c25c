"""E-mail in local mode, end to end: real clients' messages (tests/fixtures/email) received as SES
would receive them (stored in the embedded S3, the ingress invoked with SES's event), through the
router, the turn and the delivery to the embedded SES v2, answered in their thread; attachments
through the media pipeline; pairing by e-mail; bounces; the CLI's `email receive` and `explain`;
and the bad-input matrix: failing verdicts, auto-generated and malformed mail, oversize, events not
from SES or not for the rule: each refused with nothing enqueued and nothing sent."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main as cli
from tests.e2e.conftest import Client, inbox_writes

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "email"
ADDRESS = "recipient@example.com"  # the address the fixtures were sent to
EMAIL = {"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": ADDRESS}


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def receive(client: Client, raw: bytes, **verdicts: str) -> str:
    """POST a raw message to local mode as SES receives one; its SES id."""
    query = "&".join(f"{k}={v}" for k, v in verdicts.items())
    status, answer = client.request("POST", "/local/email" + (f"?{query}" if query else ""), raw)
    assert status == 202, answer
    return str(answer["ses_message_id"])


def mail(sender: str, subject: str, body: str, message_id: str, **headers: str) -> bytes:
    lines = [f"From: {sender}", f"To: {ADDRESS}", f"Subject: {subject}", f"Message-ID: {message_id}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join([*lines, "Content-Type: text/plain; charset=utf-8", "", body, ""])).encode()


def answers(client: Client, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    """The e-mail rows of the outbox once `count` of them are sent (a row is recorded before its send)."""
    rows = client.wait_outbox(count, timeout=timeout, settled=True, platform="email")
    assert len(rows) >= count and all(r["status"] == "sent" for r in rows), rows
    return rows


def settled(client: Client) -> None:
    assert client.gateway.wait_idle(timeout=30)
    time.sleep(0.3)


def test_real_messages_are_answered_in_their_thread(start_gateway: Callable[..., Client]) -> None:
    # Given local mode receiving mail for the fixtures' recipient, every example.com sender allowed
    client = start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="*@example.com")
    # When Apple Mail's reply arrives as SES would deliver it
    receive(client, fixture("03_reply_in_reply_to_references.eml"))
    (answer,) = answers(client, 1)
    # Then the echo agent saw the new line with its short reply context, not the quote as new text
    assert answer["text"] == 'Echo: [replying to: "Hi there!"]\nHello'
    assert answer["status"] == "sent" and answer["platform_message_id"]
    assert answer["chat_id"] == "alex@example.com"
    # And the answer, as the embedded SES sent it, threads under the user's message
    headers = answer["email"]
    assert headers["From"] == ADDRESS and headers["To"] == "alex@example.com"
    assert headers["Subject"] == "Re: Hello there"
    assert headers["In-Reply-To"] == "<68001B29-8EA4-444C-A894-0537D2CA5208@example.com>"
    assert headers["References"].split() == [
        "<CABzQGhkMXDxUt_tSVQcg=43aniUhtsVfCZVzu-PG0kwS_uzqMw@mail.gmail.com>",
        "<68001B29-8EA4-444C-A894-0537D2CA5208@example.com>",
    ]
    assert headers["Auto-Submitted"] == "auto-replied"
    # And a non-ASCII message (RFC 2047 subject, quoted-printable UTF-8) is read and answered
    receive(client, fixture("05_non_ascii_rfc2047_qp_utf8.eml"))
    latest = answers(client, 2)[-1]
    assert latest["email"]["Subject"] == "Re: Simple text. How are you? Как ты поживаешь?"
    assert latest["text"].endswith("This line is in English\nА эта линия по-русски.")


def test_a_reply_continues_its_session_and_a_new_subject_starts_one(start_gateway: Callable[..., Client]) -> None:
    from hermes_gateway import wiring

    client = start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="alice@example.net")
    receive(client, mail("Alice <alice@example.net>", "Plans", "first", "<root@example.net>"))
    first = answers(client, 1)[0]
    sent_as = first["email"]
    # Alice replies to the answer as her client threads it
    receive(
        client,
        mail(
            "alice@example.net",
            sent_as["Subject"],
            "second\n\nOn Mon, Hermes <recipient@example.com> wrote:\n> Echo: first",
            "<two@example.net>",
            In_Reply_To="<answer-1@email.amazonses.com>",
            References=f"{sent_as['References']} <answer-1@email.amazonses.com>",
        ),
    )
    receive(client, mail("alice@example.net", "Something else", "third", "<three@example.net>"))
    rows = answers(client, 3)
    assert [r["text"] for r in rows] == [
        "Echo: [subject: Plans]\n\nfirst",
        "Echo: second",
        "Echo: [subject: Something else]\n\nthird",
    ]
    assert rows[0]["thread_id"] == rows[1]["thread_id"] != rows[2]["thread_id"]
    settled(client)
    # the first two are one session (its transcript has both); the third is another
    from hermes_gateway.domain.session_key import build_session_key
    from hermes_gateway.domain.source import SessionSource

    def session_of(thread: str) -> str:
        source = SessionSource("email", chat_id="alice@example.net", user_id="alice@example.net", thread_id=thread)
        route = wiring.session_stores().routes.get(build_session_key(source))
        assert route is not None
        return route.session_id

    assert session_of(rows[0]["thread_id"]) != session_of(rows[2]["thread_id"])
    window = wiring.session_stores().transcript.window(session_of(rows[0]["thread_id"]), upto_seq=None, limit=10)
    assert [r.content for r in window if r.role == "user"] == ["[subject: Plans]\n\nfirst", "second"]


def test_an_attachment_reaches_the_model_through_the_media_pipeline(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="hello@example.com")
    receive(client, fixture("04_attachment_png.eml"))
    (answer,) = answers(client, 1, timeout=30)
    # the echo agent names what it was given: the PNG's exact bytes, fetched by their range
    assert "[images: image/png 60168 bytes]" in answer["text"]
    assert "Мейлган! Хахах!" in answer["text"] and "Regards" not in answer["text"]


def test_pairing_by_email(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given e-mail that allows someone else, and pairing asked for (e-mail ignores strangers by default)
    client = start_gateway(
        **EMAIL,
        EMAIL_ALLOWED_USERS="alice@example.net",
        EMAIL_UNAUTHORIZED_DM="pair",
        HERMES_LOCAL_STATE=str(tmp_path / "state.json"),
    )
    receive(client, mail("carol@example.org", "Hi", "hello?", "<c1@example.org>"))
    (reply,) = answers(client, 1)
    code = re.search(r"pairing code is ([A-Z2-9]{8})", reply["text"]).group(1)  # type: ignore[union-attr]
    assert reply["email"]["To"] == "carol@example.org"
    assert cli(["pairing", "approve", "email", code, "--local"]) == 0
    capsys.readouterr()
    receive(client, mail("carol@example.org", "Hi again", "now?", "<c2@example.org>"))
    assert answers(client, 2)[-1]["text"] == "Echo: [subject: Hi again]\n\nnow?"


def test_a_stranger_is_ignored_by_default(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="alice@example.net")
    receive(client, mail("mallory@example.org", "Hi", "let me in", "<m1@example.org>"))
    settled(client)
    assert client.outbox(platform="email") == []


def test_a_bounce_marks_the_answer_failed(start_gateway: Callable[..., Client]) -> None:
    from hermes_gateway.platforms.email import delivery_tag

    client = start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="*@example.com")
    receive(client, fixture("03_reply_in_reply_to_references.eml"))
    (answer,) = answers(client, 1)
    bounce = json.loads((FIXTURES / "ses_eventbridge_bounce_reconstructed.json").read_text())
    bounce["detail"]["mail"]["messageId"] = answer["platform_message_id"]
    bounce["detail"]["mail"]["tags"]["hermes-delivery"] = [delivery_tag(answer["delivery_id"])]
    assert client.gateway.functions.invoke("ingress", bounce) == {"ok": True, "outcome": "reported"}
    (failed,) = client.outbox(platform="email")
    assert failed["status"] == "failed" and "bounce Permanent/General/5.1.1" in failed["error"]
    assert any(
        e.get("detail-type") == "delivery:failed" or "delivery:failed" in json.dumps(e) for e in client.gateway.events()
    )


def test_the_cli_receives_a_file_and_explains_it(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="*@example.com", HERMES_LOCAL_STATE=str(tmp_path / "s.json"))
    path = FIXTURES / "01_plain_text_ses_stored.eml"
    assert cli(["email", "receive", "--local", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is True and printed["stored_as"].startswith("email/inbound/")
    (answer,) = answers(client, 1)
    assert answer["text"] == "Echo: [subject: Example subject]\n\nExample content"
    # explain says where the same file lands: the session of the sender and thread just answered
    assert cli(["explain", "--platform", "email", "--payload", str(path), "--local"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["session_key"] == f"agent:main:email:dm:sender@example.com:{answer['thread_id']}"
    assert explained["session"]["status"] == "existing"
    # a wrong verdict name is refused before anything is stored
    assert cli(["email", "receive", "--local", str(path), "--verdict", "spam=MAYBE"]) == 2


# --- the bad-input matrix ----------------------------------------------------------------------------


class Watched:
    """A gateway whose inbox writes and sent mail are counted."""

    def __init__(self, client: Client, enqueued: list[dict[str, Any]]) -> None:
        self.client = client
        self.enqueued = enqueued

    def nothing_came_of(self, act: Callable[[], object]) -> None:
        before = len(self.enqueued)
        act()
        settled(self.client)
        assert len(self.enqueued) == before
        assert self.client.outbox(platform="email") == []


@pytest.fixture
def watched(start_gateway: Callable[..., Client]) -> Iterator[Watched]:
    with inbox_writes() as enqueued:
        yield Watched(start_gateway(**EMAIL, EMAIL_ALLOWED_USERS="*@example.com"), enqueued)


@pytest.mark.parametrize("verdict", ["spam", "virus", "spf", "dkim", "dmarc"])
def test_a_failing_verdict_is_refused(watched: Watched, verdict: str) -> None:
    watched.nothing_came_of(
        lambda: receive(watched.client, fixture("01_plain_text_ses_stored.eml"), **{verdict: "FAIL"})
    )


@pytest.mark.parametrize(
    "raw",
    [
        mail("sender@example.com", "Out of office", "away", "<a1@example.com>", Auto_Submitted="auto-replied"),
        mail("sender@example.com", "Newsletter", "news", "<a2@example.com>", Precedence="bulk"),
        mail("MAILER-DAEMON@example.com", "Undeliverable", "bounce", "<a3@example.com>"),
        b"\x00\xff not a message at all",
        b"From: \r\nSubject: no sender\r\n\r\nhello\r\n",
    ],
    ids=["auto-submitted", "bulk", "mailer-daemon", "garbage", "no-sender"],
)
def test_auto_generated_and_malformed_mail_is_not_answered(watched: Watched, raw: bytes) -> None:
    watched.nothing_came_of(lambda: receive(watched.client, raw))


def test_an_oversize_message_is_refused(watched: Watched, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_gateway.resources import MAIL
    from hermes_gateway.services import mail_ingress

    monkeypatch.setattr(mail_ingress, "MAIL", dataclasses.replace(MAIL, max_message_bytes=1000))
    watched.nothing_came_of(lambda: receive(watched.client, fixture("04_attachment_png.eml")))


def test_an_event_not_from_ses_or_not_for_the_rule_is_refused(watched: Watched) -> None:
    from hermes_local.ses import receipt_event

    raw = fixture("01_plain_text_ses_stored.eml")
    gateway = watched.client.gateway
    ours = gateway.functions.context("ingress").invoked_function_arn
    other = receipt_event(raw, ses_id="abc", recipients=[ADDRESS], function_arn=ours + "Other")
    stranger = receipt_event(raw, ses_id="abd", recipients=["someone@example.com"], function_arn=ours)
    not_ses = {"Records": [{"eventSource": "aws:s3", "s3": {"object": {"key": "email/inbound/abc"}}}]}
    for event, reason in ((other, "not_our_rule"), (stranger, "not_our_address"), (not_ses, "not_an_ses_event")):
        watched.nothing_came_of(lambda e=event: gateway.functions.invoke("ingress", e))  # type: ignore[misc]
        assert gateway.functions.invoke("ingress", event)["outcomes"] == [f"refused:{reason}"]


def test_a_webhook_to_email_is_not_found(watched: Watched) -> None:
    status, _ = watched.client.request("POST", "/webhooks/email", fixture("01_plain_text_ses_stored.eml"))
    assert status == 404
