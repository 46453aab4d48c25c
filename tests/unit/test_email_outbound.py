"""E-mail's outbound side: the Markdown rendered to text and safe HTML, the answer composed as a
reply in its thread (headers a mail client threads by, nothing a stranger's subject can inject),
the message tag that ties a bounce to its outbox row, and the sender's call to SES."""

from __future__ import annotations

import email
import email.policy
import html
import re
from email.message import EmailMessage

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.email import (
    DEFAULT_SUBJECT,
    EmailSender,
    build_sender,
    compose,
    delivery_of_tag,
    delivery_tag,
)
from hermes_gateway.platforms.email_inbound import parse_message
from hermes_gateway.platforms.email_render import render
from hermes_gateway.platforms.outbound_media import MediaFile
from tests.fakes import platforms
from tests.fakes.mail import RecordingMailer
from tests.fakes.services import make_settings

ALLOWED_TAGS = {"p", "br", "strong", "em", "code", "pre", "a", "ul", "ol", "li", "blockquote", "hr", "h2", "h3", "h4"}
THREAD = {
    "subject": "Re: Question",
    "in_reply_to": "<m2@example.net>",
    "references": "<root@example.net> <m2@example.net>",
}


def body_of(document: str) -> str:
    return document.split("<body", 1)[1].split(">", 1)[1].rsplit("</body>", 1)[0]


# --- Markdown ---------------------------------------------------------------------------------------


def test_markdown_becomes_plain_text_and_simple_html() -> None:
    plain, document = render(
        "## Plan\nDo **this** and *that*, see [the docs](https://example.com/a?b=1&c=2) or `run <x>`.\n\n"
        "- one\n- two\n\n1. first\n2. second\n\n> noted\n\n```sh\nmake <all>\n```\n---"
    )
    assert plain.splitlines()[:3] == [
        "Plan",
        "",
        "Do this and that, see the docs (https://example.com/a?b=1&c=2) or run <x>.",
    ]
    assert "- one\n- two" in plain and "1. first\n2. second" in plain and "> noted" in plain
    assert "make <all>" in plain and "```" not in plain
    body = body_of(document)
    assert "<h3>Plan</h3>" in body
    assert '<a href="https://example.com/a?b=1&amp;c=2">the docs</a>' in body
    assert "<strong>this</strong>" in body and "<em>that</em>" in body and "<code>run &lt;x&gt;</code>" in body
    assert "<ul><li>one</li><li>two</li></ul>" in body and "<ol><li>first</li><li>second</li></ol>" in body
    assert "<pre><code>make &lt;all&gt;</code></pre>" in body and "<hr>" in body


@pytest.mark.parametrize(
    "markdown",
    [
        "<script>alert(1)</script>",
        "[click](javascript:alert(1))",
        "[click](javascript:alert`1`)",
        '[x](https://e.com/" onmouseover="alert(1))',
        "<img src=x onerror=alert(1)>",
        "**<b>bold</b>**",
        "`</code><script>`",
        "\0 1\0 and a [link](https://e.com)",
    ],
)
def test_markup_and_scripts_the_model_writes_stay_text(markdown: str) -> None:
    body = body_of(render(markdown)[1])
    assert "<script" not in body and "<img" not in body and "<b>" not in body
    assert "javascript:" not in "".join(re.findall(r'href="([^"]*)"', body))
    assert "onmouseover=" not in "".join(re.findall(r"<a [^>]*>", body))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_every_tag_in_the_html_is_one_of_the_renderer_s_own(markdown: str) -> None:
    body = body_of(render(markdown)[1])
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", body))
    assert tags <= ALLOWED_TAGS
    for target in re.findall(r'<a href="([^"]*)"', body):
        assert html.unescape(target).lower().startswith(("http://", "https://", "mailto:"))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_the_text_survives_rendering(text: str) -> None:
    # every word of the input is in the HTML's text (nothing the model wrote is dropped silently)
    body = html.unescape(re.sub(r"<[^>]+>", " ", body_of(render(text)[1])))
    for word in re.findall(r"[A-Za-z0-9]{3,}", text):
        assert word in body


# --- the composed answer ----------------------------------------------------------------------------


def read(raw: bytes) -> EmailMessage:
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


def test_an_answer_is_a_reply_in_its_thread_with_text_and_html() -> None:
    message = read(compose(sender="hermes@example.com", to="alice@example.net", text="**Yes**", context=THREAD))
    assert message["From"] == "hermes@example.com" and message["To"] == "alice@example.net"
    assert message["Subject"] == "Re: Question"
    assert message["In-Reply-To"] == "<m2@example.net>"
    assert message["References"] == "<root@example.net> <m2@example.net>"
    assert message["Auto-Submitted"] == "auto-replied" and message["X-Auto-Response-Suppress"] == "All"
    assert message.get_content_type() == "multipart/alternative"
    plain = message.get_body(("plain",))
    rich = message.get_body(("html",))
    assert plain is not None and plain.get_content().rstrip() == "Yes"
    assert rich is not None and "<strong>Yes</strong>" in rich.get_content()


def test_the_gateway_s_own_answer_read_back_is_never_answered_again() -> None:
    # the loop the Auto-Submitted header prevents: were the answer delivered to the gateway itself
    raw = compose(sender="hermes@example.com", to="hermes@example.com", text="hi", context=THREAD)
    assert parse_message(raw, address="other@example.com", received_at=0, object_key="k").reason == "auto_submitted"  # type: ignore[union-attr]


def test_a_push_starts_a_thread_of_its_own() -> None:
    message = read(compose(sender="hermes@example.com", to="alice@example.net", text="Reminder", context={}))
    assert message["Subject"] == DEFAULT_SUBJECT and message["In-Reply-To"] is None
    assert message["Auto-Submitted"] == "auto-generated"


def test_nothing_in_a_stranger_s_subject_or_ids_becomes_a_header() -> None:
    hostile = {
        "subject": "Re: hi\r\nBcc: victim@example.org\x00",
        "in_reply_to": "<a@b>\r\nBcc: x@y",
        "references": "<a@b>\r\nBcc: x@y <c@d>",
    }
    raw = compose(sender="hermes@example.com", to="alice@example.net", text="ok", context=hostile)
    message = read(raw)
    assert message["Bcc"] is None and b"\nBcc" not in raw
    assert message["Subject"] == "Re: hi Bcc: victim@example.org"
    assert message["In-Reply-To"] is None  # not a message id: no threading, no injection
    safe = compose(sender="h@example.com", to="a@example.net", text="ok", context={**hostile, "in_reply_to": "<a@b>"})
    assert read(safe)["References"] == "<a@b> <c@d>"


def test_a_file_rides_in_the_same_mail() -> None:
    png = MediaFile("k", "image", "image/png", "cat.png", 9, lambda: b"\x89PNG data", lambda: "")
    message = read(compose(sender="h@example.com", to="a@example.net", text="Here", context=THREAD, media=png))
    assert message.get_content_type() == "multipart/mixed"
    (attached,) = list(message.iter_attachments())
    assert attached.get_filename() == "cat.png" and attached.get_content() == b"\x89PNG data"
    alone = read(compose(sender="h@example.com", to="a@example.net", text="", context=THREAD, media=png))
    assert [p.get_filename() for p in alone.iter_attachments()] == ["cat.png"]


# --- the message tag and the sender ------------------------------------------------------------------


@pytest.mark.parametrize("delivery_id", ["turn-1#1", "turn-9f3a#m2", "cron:job:run#1", "é#ü" * 10])
def test_a_delivery_id_round_trips_through_its_message_tag(delivery_id: str) -> None:
    tag = delivery_tag(delivery_id)
    assert tag is not None and re.fullmatch(r"[A-Za-z0-9_-]+", tag)
    assert delivery_of_tag(tag) == delivery_id


def test_a_tag_naming_no_outbox_row_names_none() -> None:
    assert delivery_tag(None) is None and delivery_tag("x" * 300) is None
    for forged in ("", "a b", "////", "%%", "_" * 300, "gA"):
        assert delivery_of_tag(forged) is None or isinstance(delivery_of_tag(forged), str)
    assert delivery_of_tag("a b") is None and delivery_of_tag("") is None


def test_the_sender_sends_from_the_address_through_the_configuration_set_with_the_row_s_tag() -> None:
    mailer = RecordingMailer()
    sender = EmailSender(mailer, "hermes@example.com", "hermes-gateway-dev")
    target = Target("email", "Alice@Example.NET", "t1", THREAD, delivery_id="turn-1#1")
    assert sender.send(target, "hello") == "ses-0001"
    (sent,) = mailer.sent
    assert sent["sender"] == "hermes@example.com" and sent["to"] == "alice@example.net"
    assert sent["configuration_set"] == "hermes-gateway-dev"
    assert delivery_of_tag(sent["tags"]["hermes-delivery"]) == "turn-1#1"
    assert read(sent["raw"])["In-Reply-To"] == "<m2@example.net>"


def test_a_target_that_is_no_address_is_refused_before_ses() -> None:
    mailer = RecordingMailer()
    with pytest.raises(PermanentError):
        EmailSender(mailer, "h@example.com", None).send(Target("email", "not-an-address"), "hi")
    assert mailer.sent == []


def test_the_sender_is_built_from_the_address_and_the_stage() -> None:
    settings = make_settings({"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": "Hermes@Example.com", "GATEWAY_STAGE": "prod"})
    built = build_sender(platforms.context("email", settings, {}))
    assert isinstance(built, EmailSender)
    assert built._address == "hermes@example.com" and built._configuration_set == "hermes-gateway-prod"
    assert build_sender(platforms.context("email", make_settings(), {})) is None
