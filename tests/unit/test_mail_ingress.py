"""E-mail's ingress service with its ports in memory: SES's receipts (the fixtures' events and
stored messages) enqueued once, or refused with a reason and their stored copy deleted; what is
not ours left alone; a throttled bucket or inbox retried; bounces and complaints marking the
sent chunk's outbox row failed. Also who may write (addresses and domains) and the settings."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.domain.access import authorize, unauthorized_dm_action
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import ConfigError, TransientError
from hermes_gateway.platforms.email import delivery_tag
from hermes_gateway.resources import MAIL
from hermes_gateway.services.ingress import DeliveryReport
from hermes_gateway.services.mail_ingress import MailIngress, is_feedback, is_receipt, record_feedback
from tests.fakes import platforms
from tests.fakes.mail import InMemoryMailStore
from tests.fakes.services import FakeEnqueue, make_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "email"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:IncomingEmail"
ADDRESS = "recipient@example.com"
ENV = {"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": ADDRESS}
NOW = 1_800_000_000.0


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def receipt_for(message: str, **verdicts: str) -> dict[str, Any]:
    """The paired event (SES's docs example, made a Lambda action), its verdicts set, the
    envelope sender and recipient as the stored message says (the authentication passes)."""
    event = copy.deepcopy(fixture("ses_lambda_event_paired_02_reconstructed.json"))
    receipt = event["Records"][0]["ses"]["receipt"]
    for name in ("spam", "virus", "spf", "dkim", "dmarc"):
        receipt[f"{name}Verdict"] = {"status": verdicts.get(name, "PASS")}
    return event


class Ingress:
    """The service as the ingress handler calls it, with its ports in memory."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.settings = make_settings(ENV if env is None else env)
        self.store = InMemoryMailStore()
        self.enqueue = FakeEnqueue()
        self.mail = platforms.adapter("email", self.settings, {})

    def stored(self, name: str, ses_id: str = "12345678901example") -> str:
        key = MAIL.prefix + ses_id
        self.store.objects[key] = (FIXTURES / name).read_bytes()
        return key

    def receive(self, event: dict[str, Any]) -> list[str]:
        ingress = MailIngress(self.settings, self.mail, self.store, self.enqueue, FUNCTION)  # type: ignore[arg-type]
        outcome = ingress.receive(event, NOW)
        assert outcome["ok"] is True
        return list(outcome["outcomes"])


def test_a_received_message_is_enqueued_once_keyed_by_sender_and_thread() -> None:
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    event = receipt_for("02")
    assert ingress.receive(event) == ["accepted"]
    assert ingress.receive(event) == ["duplicate"]  # Lambda's retry of the same invoke
    (sent,) = ingress.enqueue.sent
    assert sent["source"]["chat_id"] == "sender@example.com" and sent["source"]["platform"] == "email"
    assert sent["session_key"].startswith("agent:main:email:dm:sender@example.com:t")
    assert ingress.store.objects[key]  # kept: its attachments are read from it later


@pytest.mark.parametrize("verdict", ["spam", "virus", "spf", "dkim", "dmarc"])
def test_a_failing_verdict_is_refused_unread_and_its_copy_deleted(verdict: str) -> None:
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    assert ingress.receive(receipt_for("02", **{verdict: "FAIL"})) == [f"refused:{verdict}_failed"]
    assert ingress.enqueue.calls == 0 and key not in ingress.store.objects


def test_an_unauthenticated_sender_is_refused_and_its_copy_deleted() -> None:
    # SES's docs example as published: SPF for amazonses.com, DKIM and DMARC GRAY, From example.com
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    assert ingress.receive(fixture("ses_lambda_event_paired_02_reconstructed.json")) == [
        "refused:sender_not_authenticated"
    ]
    assert ingress.enqueue.calls == 0 and key not in ingress.store.objects


def test_an_event_not_for_our_rule_leaves_the_stored_object_alone() -> None:
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    other = receipt_for("02")
    other["Records"][0]["ses"]["receipt"]["action"]["functionArn"] += "Other"
    not_ses = {"Records": [{"eventSource": "aws:sqs", "body": "{}"}]}
    assert ingress.receive(other) == ["refused:not_our_rule"]
    assert ingress.receive(not_ses) == ["refused:not_an_ses_event"]
    assert ingress.enqueue.calls == 0 and key in ingress.store.objects


def test_auto_generated_mail_is_ignored_and_its_copy_deleted() -> None:
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    ingress.store.objects[key] = b"Precedence: bulk\r\n" + ingress.store.objects[key]
    assert ingress.receive(receipt_for("02")) == ["ignored:bulk_or_list"]
    assert ingress.enqueue.calls == 0 and key not in ingress.store.objects


def test_an_oversize_or_missing_message_is_refused() -> None:
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    ingress.store.objects[key] = b"X" * (MAIL.max_message_bytes + 1)
    assert ingress.receive(receipt_for("02")) == ["refused:too_large"]
    assert ingress.receive(receipt_for("02")) == ["refused:stored_message_missing"]
    assert ingress.enqueue.calls == 0


def test_malformed_mime_is_refused() -> None:
    ingress = Ingress()
    key = ingress.stored("02_multipart_alternative_ses_stored.eml")
    ingress.store.objects[key] = b"\xff\xfe\x00 not a message"
    assert ingress.receive(receipt_for("02")) == ["refused:no_sender"]


def test_a_throttled_bucket_or_inbox_raises_for_lambda_to_retry() -> None:
    ingress = Ingress()
    ingress.stored("02_multipart_alternative_ses_stored.eml")
    ingress.store.fail_with = TransientError("SlowDown")
    with pytest.raises(TransientError):
        ingress.receive(receipt_for("02"))
    ingress.store.fail_with = None
    ingress.enqueue.fail_with = TransientError("throttled")
    with pytest.raises(TransientError):
        ingress.receive(receipt_for("02"))


def test_email_switched_off_refuses_everything() -> None:
    ingress = Ingress({})
    ingress.stored("02_multipart_alternative_ses_stored.eml")
    assert ingress.receive(receipt_for("02")) == ["refused:email_not_served"]


def test_the_handler_tells_receipts_and_feedback_from_webhooks() -> None:
    assert is_receipt(fixture("ses_lambda_event_powertools.json"))
    assert is_receipt({"Records": []}) and not is_receipt({"version": "2.0", "rawPath": "/webhooks/telegram"})
    assert is_feedback(fixture("ses_eventbridge_bounce_reconstructed.json"))
    assert not is_feedback({"source": "aws.scheduler", "detail-type": "Scheduled Event"})


# --- bounces and complaints ------------------------------------------------------------------------


def feedback(name: str, delivery_id: str | None) -> dict[str, Any]:
    event = copy.deepcopy(fixture(name))
    event["detail"]["mail"]["tags"]["hermes-delivery"] = [delivery_tag(delivery_id)] if delivery_id else []
    return event


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("ses_eventbridge_bounce_reconstructed.json", "bounce Permanent/General/5.1.1"),
        ("ses_eventbridge_complaint_reconstructed.json", "complaint abuse"),
    ],
)
def test_a_bounce_or_complaint_reports_the_row_it_names(name: str, error: str) -> None:
    reports: list[tuple[str, DeliveryReport]] = []
    outcome = record_feedback(feedback(name, "turn-1#1"), report=lambda p, r: reports.append((p, r)))
    assert outcome == "reported"
    assert reports == [
        ("email", DeliveryReport("turn-1#1", "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000", error))
    ]
    assert "recipient@example.com" not in error  # codes only, never an address


def test_feedback_naming_no_row_or_of_another_kind_is_ignored() -> None:
    reports: list[Any] = []
    bounce = "ses_eventbridge_bounce_reconstructed.json"
    assert record_feedback(feedback(bounce, None), report=reports.append) == "ignored:no_outbox_row"  # type: ignore[arg-type]
    delivery = feedback(bounce, "turn-1#1")
    delivery["detail"]["eventType"] = "Delivery"
    assert record_feedback(delivery, report=reports.append) == "ignored:not_a_bounce_or_complaint"  # type: ignore[arg-type]
    assert reports == []


def test_a_report_that_must_wait_raises_for_lambda_to_retry() -> None:
    def sending(platform: str, report: DeliveryReport) -> None:
        raise TransientError("the send is not recorded yet")

    with pytest.raises(TransientError):
        record_feedback(feedback("ses_eventbridge_bounce_reconstructed.json", "turn-1#1"), report=sending)


# --- who may write ---------------------------------------------------------------------------------


def sender(address: str) -> SessionSource:
    return SessionSource("email", chat_id=address, chat_type="dm", user_id=address, thread_id="t1")


def test_an_allowlist_of_addresses_and_domains() -> None:
    settings = make_settings({**ENV, "EMAIL_ALLOWED_USERS": "alice@example.net,*@example.com"})
    allowed = [authorize(sender(a), settings, is_paired=lambda p, u: False).allowed for a in (
        "alice@example.net", "ALICE@Example.NET", "bob@example.com", "bob@sub.example.com", "alice@evil.example.org",
        "eve@example.net",
    )]  # fmt: skip
    assert allowed == [True, True, True, False, False, False]


def test_a_local_part_alone_never_allows_an_address() -> None:
    settings = make_settings({**ENV, "EMAIL_ALLOWED_USERS": "alice", "GATEWAY_ALLOWED_USERS": "alice"})
    assert not authorize(sender("alice@evil.example"), settings, is_paired=lambda p, u: False).allowed


def test_an_unknown_sender_is_ignored_unless_pairing_is_asked_for() -> None:
    assert unauthorized_dm_action(sender("eve@example.net"), make_settings(ENV)) == "ignore"
    paired = make_settings({**ENV, "EMAIL_UNAUTHORIZED_DM": "pair"})
    assert unauthorized_dm_action(sender("eve@example.net"), paired) == "pair"
    decision = authorize(
        sender("eve@example.net"), paired, is_paired=lambda p, u: (p, u) == ("email", "eve@example.net")
    )
    assert decision.allowed and decision.reason == "paired"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EMAIL_ENABLED": "true"}, "EMAIL_ADDRESS"),
        ({"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": "not an address"}, "plain e-mail address"),
        ({"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": "h@example.com", "EMAIL_DOMAIN": "example.org"}, "at example.org"),
        ({"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": "h@example.com", "EMAIL_RULE_SET": "bad name!"}, "rule set name"),
    ],
)
def test_the_email_settings_are_checked(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_settings(env)
    assert make_settings({"EMAIL_ADDRESS": "anything"}).platform("email") is None  # off: not checked


def test_e_mail_is_the_deployment_s_own_profile_s_only() -> None:
    config = {"profiles": {"coder": {"platforms": {"email": {"enabled": True, "address": "c@example.com"}}}}}
    with pytest.raises(ConfigError, match="deployment's own profile only"):
        make_settings(config=config)
