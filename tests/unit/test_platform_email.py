"""E-mail's inbound side on real messages (tests/fixtures/email: as SES stored them, and real
clients' mail) and SES's real receipt events: the receipt checks and verdicts, the sender and its
authentication, the thread and the session key, the quoted text, the attachments' byte ranges and
their fetch, and mail the gateway never answers."""

from __future__ import annotations

import copy
import email
import email.policy
import json
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.domain.media import Attachment
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import Unauthorized
from hermes_gateway.platforms.email import EmailInbound, fetch_media
from hermes_gateway.platforms.email_inbound import (
    NotForUs,
    Receipt,
    Skipped,
    html_text,
    parse_message,
    read_receipt,
    split_quote,
    thread_id_of,
)
from hermes_gateway.platforms.media import MediaTooLarge, MediaUnavailable
from hermes_gateway.services.ingress import HttpRequest, Ignored
from tests.fakes import platforms
from tests.fakes.mail import InMemoryMailStore
from tests.fakes.services import make_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "email"
OURS = "recipient@example.com"  # the fixtures' recipient: the gateway's address here
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:IncomingEmail"
KEY = "email/inbound/12345678901example"
NOW = 1_800_000_000.0
PASSING = Receipt(
    "12345678901example", "sender@example.com", dict.fromkeys(("spam", "virus", "spf", "dkim", "dmarc"), "PASS")
)


def raw(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def event(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return loaded


def record(name: str = "ses_lambda_event_paired_02_reconstructed.json") -> dict[str, Any]:
    found: dict[str, Any] = event(name)["Records"][0]
    return found


def parsed(message: bytes, receipt: Receipt | None = PASSING, address: str = OURS) -> InboundMessage | Skipped:
    return parse_message(message, address=address, received_at=NOW, object_key=KEY, receipt=receipt)


def accepted(message: bytes, receipt: Receipt | None = PASSING, address: str = OURS) -> InboundMessage:
    found = parsed(message, receipt, address)
    assert isinstance(found, InboundMessage), found
    return found


def mail(body: str = "Hello", **headers: str) -> bytes:
    """A plain message from Alice (headers given as Python names: In_Reply_To -> In-Reply-To)."""
    message = EmailMessage(policy=email.policy.SMTP)
    defaults = {
        "From": "Alice <alice@example.net>",
        "To": OURS,
        "Subject": "Question",
        "Message_ID": "<m1@example.net>",
    }
    for name, value in {**defaults, **headers}.items():
        if value:
            message[name.replace("_", "-")] = value
    message.set_content(body)
    return message.as_bytes()


def authenticated_for(sender: str) -> Receipt:
    return Receipt("id-1", sender, dict.fromkeys(("spam", "virus", "spf", "dkim", "dmarc"), "PASS"))


# --- the receipt -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "ses_lambda_event_paired_02_reconstructed.json",
        "ses_lambda_event_awsdocs.json",
        "ses_lambda_event_aws_lambda_go.json",
        "ses_lambda_event_powertools.json",
    ],
)
def test_each_real_ses_event_is_read_as_our_receipt_with_its_verdicts(name: str) -> None:
    # Given an SES Lambda action's event as published, addressed to our function and address
    found = record(name)
    function = found["ses"]["receipt"]["action"]["functionArn"]
    address = found["ses"]["receipt"]["recipients"][0]
    # When it is read
    receipt = read_receipt(found, function_arn=function, address=address.upper())
    # Then its SES id names the stored object and its verdicts are SES's
    assert receipt.ses_id == found["ses"]["mail"]["messageId"]
    assert receipt.verdicts["spam"] == found["ses"]["receipt"]["spamVerdict"]["status"]
    assert receipt.refusal() is None


def test_a_qualified_function_arn_is_the_same_function() -> None:
    assert read_receipt(record(), function_arn=FUNCTION + ":live", address=OURS).ses_id == "12345678901example"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda r: r.update(eventSource="aws:s3"), "not_an_ses_event"),
        (lambda r: r.pop("ses"), "not_an_ses_event"),
        (lambda r: r["ses"]["receipt"]["action"].update(functionArn=FUNCTION + "Other"), "not_our_rule"),
        (lambda r: r["ses"]["receipt"]["action"].update(type="SNS"), "not_our_rule"),
        (lambda r: r["ses"]["receipt"].update(recipients=["someone@example.com"]), "not_our_address"),
        (lambda r: r["ses"]["mail"].update(messageId="../../media/other"), "no_usable_message_id"),
        (lambda r: r["ses"]["mail"].update(messageId="AMAZON_SES_SETUP_NOTIFICATION"), "no_usable_message_id"),
    ],
)
def test_an_event_not_from_ses_or_not_for_our_rule_is_not_ours(change: Any, reason: str) -> None:
    found = copy.deepcopy(record())
    change(found)
    with pytest.raises(NotForUs) as refused:
        read_receipt(found, function_arn=FUNCTION, address=OURS)
    assert refused.value.reason == reason


@pytest.mark.parametrize(
    ("verdict", "status", "reason"),
    [
        ("spam", "FAIL", "spam_failed"),
        ("virus", "FAIL", "virus_failed"),
        ("spf", "FAIL", "spf_failed"),
        ("dkim", "FAIL", "dkim_failed"),
        ("dmarc", "FAIL", "dmarc_failed"),
        ("virus", "PROCESSING_FAILED", "virus_scan_failed"),
    ],
)
def test_a_failing_verdict_refuses_the_message(verdict: str, status: str, reason: str) -> None:
    found = copy.deepcopy(record())
    found["ses"]["receipt"][f"{verdict}Verdict"]["status"] = status
    assert read_receipt(found, function_arn=FUNCTION, address=OURS).refusal() == reason


def test_gray_verdicts_refuse_nothing() -> None:
    # the paired event has DKIM and DMARC GRAY (not signed, no DMARC record)
    assert read_receipt(record(), function_arn=FUNCTION, address=OURS).refusal() is None


# --- the sender's authentication -----------------------------------------------------------------


def test_a_from_address_no_authenticated_domain_vouches_for_is_refused() -> None:
    # Given SES's own docs example: From sender@example.com, sent through SES (SPF passed for
    # amazonses.com, not for example.com), DKIM and DMARC GRAY
    receipt = read_receipt(record(), function_arn=FUNCTION, address=OURS)
    # When the stored message is read, its From is not the authenticated domain: refused
    found = parsed(raw("02_multipart_alternative_ses_stored.eml"), receipt)
    assert found == Skipped("sender_not_authenticated", trust=True)


def test_spf_for_the_from_domain_or_dmarc_authenticates_the_sender() -> None:
    # the awsdocs event: a BATV envelope sender at example.com with SPF passed (DMARC GRAY)
    receipt = read_receipt(record("ses_lambda_event_awsdocs.json"), function_arn=FUNCTION, address=OURS)
    assert receipt.envelope_from.startswith("prvs=")
    assert isinstance(parsed(mail(From="Doe <sender@example.com>"), receipt), InboundMessage)
    assert isinstance(parsed(mail(From="x@mail.example.com"), receipt), InboundMessage)  # a subdomain aligns
    assert parsed(mail(From="boss@example.org"), receipt) == Skipped("sender_not_authenticated", trust=True)
    dmarc = Receipt("id", "bounces@esp.example.org", {"spf": "PASS", "dkim": "PASS", "dmarc": "PASS"})
    assert isinstance(parsed(mail(From="boss@example.com"), dmarc), InboundMessage)
    no_spf = Receipt("id", "sender@example.com", {"spf": "GRAY", "dkim": "PASS", "dmarc": "GRAY"})
    assert parsed(mail(From="sender@example.com"), no_spf) == Skipped("sender_not_authenticated", trust=True)


# --- the real messages -------------------------------------------------------------------------


def test_a_plain_message_as_ses_stored_it() -> None:
    found = accepted(raw("01_plain_text_ses_stored.eml"), authenticated_for("sender@example.com"))
    assert found.source.chat_id == found.source.user_id == "sender@example.com"
    assert found.source.chat_type == "dm" and found.source.platform == "email"
    assert found.text == "[subject: Example subject]\n\nExample content"
    assert found.reply_context == {
        "subject": "Re: Example subject",
        "in_reply_to": "<61967230-7A45-4A9D-BEC9-87CBCF2211C9@example.com>",
        "references": "<61967230-7A45-4A9D-BEC9-87CBCF2211C9@example.com>",
    }
    assert found.attachments == ()


def test_a_multipart_alternative_message_is_read_from_its_plain_part() -> None:
    found = accepted(raw("02_multipart_alternative_ses_stored.eml"), authenticated_for("sender@example.com"))
    assert found.text == "[subject: Amazon SES Test]\n\nAmazon SES Test\nThis email was sent with Amazon SES."


def test_an_apple_mail_reply_keeps_only_its_new_line_and_a_short_reply_context() -> None:
    found = accepted(raw("03_reply_in_reply_to_references.eml"), authenticated_for("alex@example.com"))
    # the quoted "Hi there!" (someone else's words) is context, not new text
    assert found.text == "[replying to: Hi there!]\n\nHello"
    assert found.source.user_name == "Alex Example"
    assert found.reply_to_message_id == "<CABzQGhkMXDxUt_tSVQcg=43aniUhtsVfCZVzu-PG0kwS_uzqMw@mail.gmail.com>"
    assert found.reply_context["subject"] == "Re: Hello there"  # not "Re: Re:"
    assert found.reply_context["in_reply_to"] == "<68001B29-8EA4-444C-A894-0537D2CA5208@example.com>"
    assert found.reply_context["references"].split() == [
        "<CABzQGhkMXDxUt_tSVQcg=43aniUhtsVfCZVzu-PG0kwS_uzqMw@mail.gmail.com>",
        "<68001B29-8EA4-444C-A894-0537D2CA5208@example.com>",
    ]


def test_a_gmail_message_with_a_png_names_it_and_locates_its_bytes() -> None:
    message = raw("04_attachment_png.eml")
    found = accepted(message, authenticated_for("hello@example.com"))
    assert found.text == "[subject: Mailgun rocks!]\n\nМейлган! Хахах!"  # the signature after "-- " is gone
    (only,) = found.attachments
    assert only["kind"] == "image" and only["mime"] == "image/png" and only["name"] == "mailgun.png"
    assert only["size"] == 60168
    # the range holds the part's encoded body: decoded, it is the PNG the email package reads
    start, end = (int(n) for n in only["ref"]["range"].split("-"))
    png = next(p for p in email.message_from_bytes(message).walk() if p.get_content_type() == "image/png")
    assert email.message_from_bytes(b"Content-Transfer-Encoding: base64\n\n" + message[start:end]).get_payload(
        decode=True
    ) == png.get_payload(decode=True)


def test_an_rfc2047_subject_and_quoted_printable_utf8_body_are_decoded() -> None:
    found = accepted(raw("05_non_ascii_rfc2047_qp_utf8.eml"), authenticated_for("hello@example.com"))
    assert found.source.chat_name == "Simple text. How are you? Как ты поживаешь?"
    assert found.text.endswith("This line is in English\nА эта линия по-русски.")


# --- threads and session keys ---------------------------------------------------------------------


def key(message: InboundMessage) -> str:
    return build_session_key(message.source, group_sessions_per_user=True, thread_sessions_per_user=False)


def test_a_reply_continues_its_thread_and_a_new_subject_starts_one() -> None:
    first = accepted(mail(Message_ID="<root@example.net>"), authenticated_for("alice@example.net"))
    reply = accepted(
        mail(Subject="Re: Question", Message_ID="<m2@example.net>", In_Reply_To="<our-answer@email.amazonses.com>",
             References="<root@example.net> <our-answer@email.amazonses.com>"),
        authenticated_for("alice@example.net"),
    )  # fmt: skip
    other = accepted(
        mail(Subject="Another topic", Message_ID="<m3@example.net>"), authenticated_for("alice@example.net")
    )
    assert first.source.thread_id == reply.source.thread_id == thread_id_of("<root@example.net>")
    assert key(first) == key(reply) == f"agent:main:email:dm:alice@example.net:{thread_id_of('<root@example.net>')}"
    assert key(other) != key(first)
    # a client that sets In-Reply-To alone threads by it
    bare = accepted(
        mail(Message_ID="<m4@example.net>", In_Reply_To="<root@example.net>"), authenticated_for("alice@example.net")
    )
    assert key(bare) == key(first)


def test_a_stranger_who_copies_a_thread_s_references_gets_a_session_of_their_own() -> None:
    # Given Alice's thread, and Mallory (CC'd once) writing with its Message-IDs in References
    alice = accepted(mail(Message_ID="<root@example.net>"), authenticated_for("alice@example.net"))
    mallory = accepted(
        mail(From="mallory@example.org", Message_ID="<x@example.org>", References="<root@example.net>",
             In_Reply_To="<root@example.net>"),
        authenticated_for("mallory@example.org"),
    )  # fmt: skip
    # Then the same thread id, but never Alice's session: the sender is part of the key
    assert mallory.source.thread_id == alice.source.thread_id
    assert key(mallory) != key(alice) and "mallory@example.org" in key(mallory)


def test_the_key_of_a_message_id_with_unsafe_characters_is_still_safe() -> None:
    found = accepted(mail(Message_ID="<../../etc/passwd..@x>"), authenticated_for("alice@example.net"))
    assert ".." not in key(found) and found.source.thread_id == thread_id_of("<../../etc/passwd..@x>")


def test_the_same_mail_delivered_twice_has_one_event_id() -> None:
    # an MTA that resends after a lost answer: SES stores it twice, under two ids
    once = accepted(mail(), Receipt("ses-1", "alice@example.net", PASSING.verdicts))
    twice = accepted(mail(), Receipt("ses-2", "alice@example.net", PASSING.verdicts))
    assert once.event_id == twice.event_id and once.event_id.startswith("email:")


def test_references_are_kept_to_the_root_and_the_newest() -> None:
    thread = " ".join(f"<r{n}@example.net>" for n in range(30))
    found = accepted(mail(References=thread, In_Reply_To="<r29@example.net>"), authenticated_for("alice@example.net"))
    kept = found.reply_context["references"].split()
    assert len(kept) == 10 and kept[0] == "<r0@example.net>" and kept[-1] == "<m1@example.net>"


# --- quotes and HTML -------------------------------------------------------------------------------


def test_a_quote_of_the_agent_s_own_answer_is_not_repeated() -> None:
    body = "Thanks, that works.\n\nOn Mon, 1 Jan 2024 at 10:00, Hermes <recipient@example.com> wrote:\n> Try this.\n"
    found = accepted(mail(body=body, In_Reply_To="<a@b>"), authenticated_for("alice@example.net"))
    assert found.text == "Thanks, that works."


def test_outlook_s_quoted_block_and_a_bottom_posted_reply_are_split() -> None:
    outlook = "Sounds good.\n\n-----Original Message-----\nFrom: Bob <bob@example.org>\nSent: Monday\n\nOld text here"
    assert split_quote(outlook)[:2] == ("Sounds good.", "Old text here")
    bottom = "On Tue, Bob wrote:\n> the question\n\nmy answer below"
    assert split_quote(bottom) == ("my answer below", "the question", "On Tue, Bob wrote:")
    folded = "Yes.\n\nOn Sat, Aug 22, 2015 at 7:21 PM, Alex Example <\nalex@example.net> wrote:\n> Hi"
    assert split_quote(folded)[:2] == ("Yes.", "Hi")


def test_an_html_only_message_is_read_as_text_with_its_blockquote_quoted() -> None:
    html = (
        "<html><head><style>p{color:red}</style></head><body><p>Hello <b>there</b>,</p>"
        "<div>see <a href='https://x'>this</a><br>line two</div>"
        "<blockquote><p>old words</p></blockquote><script>alert(1)</script></body></html>"
    )
    assert html_text(html) == "Hello there,\nsee this\nline two\n> old words"
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"], message["To"], message["Subject"] = "alice@example.net", OURS, "Hi"
    message.set_content(html, subtype="html")
    found = accepted(message.as_bytes(), authenticated_for("alice@example.net"))
    assert found.text == "[subject: Hi]\n\n[replying to: old words]\n\nHello there,\nsee this\nline two"


def test_a_long_message_is_cut_with_a_note() -> None:
    found = accepted(mail(body="word " * 10_000), authenticated_for("alice@example.net"))
    assert len(found.text) < 16_100 and "[message cut:" in found.text


# --- mail the gateway never answers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Auto_Submitted": "auto-replied"}, "auto_submitted"),
        ({"Precedence": "bulk"}, "bulk_or_list"),
        ({"Precedence": "list"}, "bulk_or_list"),
        ({"List_Id": "<news.example.net>"}, "mailing_list"),
        ({"From": "MAILER-DAEMON@example.net"}, "no_reply_sender"),
        ({"From": "no-reply@example.net"}, "no_reply_sender"),
        ({"From": "donotreply@example.net"}, "no_reply_sender"),
        ({"From": OURS}, "own_message"),
    ],
)
def test_auto_generated_mail_is_never_answered(headers: dict[str, str], reason: str) -> None:
    sender = headers.get("From", "alice@example.net")
    assert parsed(mail(**headers), authenticated_for(sender)) == Skipped(reason)


def test_a_delivery_report_and_a_null_envelope_sender_are_never_answered() -> None:
    report = mail()
    report = report.replace(b"Content-Type: text/plain", b"Content-Type: multipart/report; report-type=delivery-status")
    assert parsed(report, authenticated_for("alice@example.net")) == Skipped("delivery_report")
    assert parsed(mail(), Receipt("id", "", {"dmarc": "PASS"})) == Skipped("null_sender")


def test_auto_submitted_no_is_a_person() -> None:
    assert isinstance(parsed(mail(Auto_Submitted="no"), authenticated_for("alice@example.net")), InboundMessage)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (mail(From=""), "no_sender"),
        (mail(From="a@example.net, b@example.net"), "no_single_sender"),
        (mail(From="not an address"), "sender_address_unusable"),
        (mail(From="weird..dots@example.net"), "sender_address_unusable"),
        (b"\x00\xff\xfe garbage with no headers at all", "no_sender"),
    ],
)
def test_malformed_or_senderless_mail_is_refused(message: bytes, reason: str) -> None:
    assert parsed(message, None) == Skipped(reason, trust=True)


def test_an_empty_message_is_ignored_and_a_subject_alone_is_a_message() -> None:
    assert parsed(mail(body="\n\n", Subject=""), authenticated_for("alice@example.net")) == Skipped("no_text")
    alone = accepted(mail(body="\n", Subject="Call me"), authenticated_for("alice@example.net"))
    assert alone.text == "[subject: Call me]"


# --- the adapter: no webhook, explain --------------------------------------------------------------


def adapter() -> Any:
    settings = make_settings({"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": OURS})
    return platforms.adapter("email", settings, {})


def test_a_webhook_request_is_never_email() -> None:
    with pytest.raises(Unauthorized):
        adapter().verify(HttpRequest("POST", "/webhooks/email", {}, raw("01_plain_text_ses_stored.eml")))


def test_explain_reads_a_raw_message_as_its_payload() -> None:
    found = adapter().parse(HttpRequest("POST", "/webhooks/email", {}, raw("03_reply_in_reply_to_references.eml")), NOW)
    assert isinstance(found, InboundMessage) and found.source.chat_id == "alex@example.com"
    auto = adapter().parse(HttpRequest("POST", "/webhooks/email", {}, mail(Precedence="bulk")), NOW)
    assert auto == Ignored("bulk_or_list")
    assert isinstance(adapter(), EmailInbound)


# --- attachments: fetched by their byte range ------------------------------------------------------


def context_with(store: InMemoryMailStore) -> Any:
    from dataclasses import replace

    settings = make_settings({"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": OURS})
    return replace(platforms.context("email", settings, {}), raw_mail=store)


def stored_png() -> tuple[InMemoryMailStore, Attachment]:
    message = raw("04_attachment_png.eml")
    store = InMemoryMailStore({KEY: message})
    found = accepted(message, authenticated_for("hello@example.com"))
    return store, Attachment.from_dict(found.attachments[0])


def test_an_attachment_is_one_ranged_read_of_the_stored_message() -> None:
    store, png = stored_png()
    fetched = fetch_media(context_with(store), png, 20_000_000)
    assert fetched.data.startswith(b"\x89PNG\r\n") and len(fetched.data) == 60168 and fetched.mime == "image/png"
    ((read_key, start, end),) = store.reads
    assert read_key == KEY and end - start < 83_533  # the part, not the whole message


def test_an_attachment_over_the_limit_is_not_read() -> None:
    store, png = stored_png()
    with pytest.raises(MediaTooLarge):
        fetch_media(context_with(store), png, 60_000)
    assert store.reads == []


def test_an_expired_or_changed_message_or_a_forged_reference_fetches_nothing() -> None:
    store, png = stored_png()
    with pytest.raises(MediaUnavailable, match="expired"):
        fetch_media(context_with(InMemoryMailStore()), png, 20_000_000)
    store.objects[KEY] = store.objects[KEY].replace(b"iVBOR", b"AAAAA", 1)[:-500]
    with pytest.raises(MediaUnavailable):
        fetch_media(context_with(store), png, 20_000_000)
    for ref in (
        {"object": "media/other", "range": "0-10"},
        {"object": KEY},
        {"object": "email/inbound/../x", "range": "0-1"},
    ):
        with pytest.raises(MediaUnavailable):
            fetch_media(context_with(store), Attachment("image", ref=ref), 20_000_000)
