"""E-mail on moto and against a fake SES v2 endpoint: the stored mail's contract on S3, the ingress
handler reading a real stored message into the inbox and its attachment fetched by its byte range,
a bounce marking the sent chunk's outbox row failed, and the SES client's requests and errors."""

from __future__ import annotations

import base64
import copy
import email
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.s3_mail import S3MailStore
from hermes_gateway.adapters.ses_mail import SesMailer
from hermes_gateway.domain.media import Attachment
from hermes_gateway.domain.ports import MailStore
from hermes_gateway.errors import PermanentError, RateLimited, TransientError
from hermes_gateway.platforms.email import delivery_tag
from hermes_gateway.resources import MAIL, MEDIA, function
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.contracts.mail_store import CHECKS
from tests.fakes.ses_server import SEND_PATH, FakeSes, ses_error

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "email"
ADDRESS = "recipient@example.com"
ARN = "arn:aws:lambda:us-east-1:123456789012:function:hermes-ingress"


def ingress(event: dict[str, Any]) -> Any:
    handler = load_handler_module(function("ingress")).lambda_handler
    return handler(event, LambdaContext("hermes-ingress", 512, ARN))


@pytest.fixture
def mail_env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("EMAIL_ENABLED", "true")
    monkeypatch.setenv("EMAIL_ADDRESS", ADDRESS)
    monkeypatch.setenv("EMAIL_ALLOW_ALL_USERS", "true")
    wiring.reset()
    yield aws
    wiring.reset()


def test_s3_keeps_the_stored_mail_s_contract(aws: Any) -> None:
    bucket = aws.bindings.bucket(MEDIA.name)

    def make() -> tuple[MailStore, Callable[[str, bytes], None]]:
        s3 = boto3.client("s3")
        for key in (o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])):
            s3.delete_object(Bucket=bucket, Key=key)
        return S3MailStore(bucket), lambda key, data: s3.put_object(Bucket=bucket, Key=key, Body=data)

    for check in CHECKS:
        check(make)


def receipt(ses_id: str) -> dict[str, Any]:
    """The powertools fixture's event (all verdicts PASS) for our function, address and object."""
    event = copy.deepcopy(json.loads((FIXTURES / "ses_lambda_event_powertools.json").read_text()))
    record = event["Records"][0]["ses"]
    record["mail"]["messageId"] = ses_id
    record["mail"]["source"] = "hello@example.com"
    record["receipt"]["recipients"] = [ADDRESS]
    record["receipt"]["action"]["functionArn"] = ARN
    return event


def test_the_ingress_reads_a_stored_message_into_the_inbox_and_its_attachment_is_fetched(mail_env: Any) -> None:
    # Given SES stored a Gmail message with a PNG, and invoked the ingress with its receipt
    raw = (FIXTURES / "04_attachment_png.eml").read_bytes()
    bucket = mail_env.bindings.bucket(MEDIA.name)
    boto3.client("s3").put_object(Bucket=bucket, Key=MAIL.prefix + "o3vrnil0e2ic28tr", Body=raw)
    # When the ingress handles it (and Lambda retries it)
    assert ingress(receipt("o3vrnil0e2ic28tr"))["outcomes"] == ["accepted"]
    assert ingress(receipt("o3vrnil0e2ic28tr"))["outcomes"] == ["duplicate"]
    # Then one inbox item, keyed by the sender and the thread
    (item,) = boto3.client("dynamodb").scan(TableName=mail_env.bindings.table("inbox"))["Items"]
    envelope = json.loads(item["envelope"]["S"])
    assert envelope["source"]["chat_id"] == "hello@example.com" and envelope["source"]["platform"] == "email"
    assert envelope["session_key"].startswith("agent:main:email:dm:hello@example.com:t")
    # And the attachment is fetched as a turn fetches it: one ranged read of the stored message
    (found,) = envelope["attachments"]
    fetched = wiring.fetch_media(Attachment.from_dict(found), "email", None, 20_000_000)
    png = next(p for p in email.message_from_bytes(raw).walk() if p.get_content_type() == "image/png")
    assert fetched.data == png.get_payload(decode=True) and found["name"] == "mailgun.png"


def test_a_refused_message_is_deleted_and_nothing_enqueued(mail_env: Any) -> None:
    bucket = mail_env.bindings.bucket(MEDIA.name)
    s3 = boto3.client("s3")
    s3.put_object(
        Bucket=bucket, Key=MAIL.prefix + "spam1", Body=(FIXTURES / "01_plain_text_ses_stored.eml").read_bytes()
    )
    event = receipt("spam1")
    event["Records"][0]["ses"]["receipt"]["spamVerdict"]["status"] = "FAIL"
    assert ingress(event)["outcomes"] == ["refused:spam_failed"]
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=MAIL.prefix)
    assert boto3.client("dynamodb").scan(TableName=mail_env.bindings.table("inbox"))["Items"] == []


def test_a_bounce_marks_the_sent_chunk_failed(mail_env: Any) -> None:
    # Given a chunk the gateway sent by e-mail, recorded sent with SES's message id
    outbox = wiring.outbox()
    message_id = "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000"
    outbox.record_claimed(
        "turn-1#1", platform="email", chat_id="a@example.net", thread_id="t1", text="hi", turn_id="turn-1",
        chunk=1, chunks=1, now=1.0,
    )  # fmt: skip
    outbox.mark("turn-1#1", "sent", 2.0, platform_message_id=message_id)
    # When SES's bounce arrives through EventBridge, naming the chunk in its message tag
    bounce = json.loads((FIXTURES / "ses_eventbridge_bounce_reconstructed.json").read_text())
    bounce["detail"]["mail"]["tags"]["hermes-delivery"] = [delivery_tag("turn-1#1")]
    assert ingress(bounce) == {"ok": True, "outcome": "reported"}
    # Then the row is failed, with SES's codes
    row = outbox.get("turn-1#1")
    assert row is not None and row.status == "failed" and "bounce Permanent/General/5.1.1" in str(row.error)
    # And a bounce of another message id changes nothing
    bounce["detail"]["mail"]["messageId"] = "another"
    ingress(bounce)
    assert outbox.get("turn-1#1").status == "failed"  # type: ignore[union-attr]


# --- sending ---------------------------------------------------------------------------------------


def test_moto_s_ses_v2_takes_a_raw_message_from_a_verified_domain_only(aws: Any) -> None:
    from hermes_gateway.platforms.email import compose

    raw = compose(sender="hermes@example.com", to="alice@example.net", text="hi", context={"subject": "Re: x"})
    mailer = SesMailer(region="us-east-1")
    with pytest.raises(PermanentError, match="MessageRejected"):
        mailer.send(sender="hermes@example.com", to="alice@example.net", raw=raw, tags={}, configuration_set=None)
    boto3.client("sesv2").create_email_identity(EmailIdentity="example.com")
    message_id = mailer.send(
        sender="hermes@example.com", to="alice@example.net", raw=raw, tags={"hermes-delivery": "dHVybi0x"},
        configuration_set=None,
    )  # fmt: skip
    assert message_id


@pytest.fixture
def fake_ses(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSes]:
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with FakeSes() as fake:
        yield fake


def test_the_send_request_is_ses_v2_s_send_email_with_raw_content_tags_and_configuration_set(fake_ses: FakeSes) -> None:
    mailer = SesMailer(endpoint_url=fake_ses.base_url)
    message_id = mailer.send(
        sender="hermes@example.com", to="alice@example.net", raw=b"Subject: x\r\n\r\nhi\r\n",
        tags={"hermes-delivery": "dHVybi0xIzE"}, configuration_set="hermes-gateway-dev",
    )  # fmt: skip
    assert message_id == "fake-ses-1"
    (request,) = fake_ses.requests
    assert request.http_method == "POST" and request.path == SEND_PATH
    assert request.body["FromEmailAddress"] == "hermes@example.com"
    assert request.body["Destination"] == {"ToAddresses": ["alice@example.net"]}
    assert base64.b64decode(request.body["Content"]["Raw"]["Data"]) == b"Subject: x\r\n\r\nhi\r\n"
    assert request.body["EmailTags"] == [{"Name": "hermes-delivery", "Value": "dHVybi0xIzE"}]
    assert request.body["ConfigurationSetName"] == "hermes-gateway-dev"
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256")


@pytest.mark.parametrize(
    ("status", "error_type", "raised", "retry_after"),
    [
        (429, "TooManyRequestsException", RateLimited, 1.0),
        (400, "LimitExceededException", RateLimited, 60.0),
        (500, "InternalFailure", TransientError, None),
        (400, "MessageRejected", PermanentError, None),
        (400, "AccountSuspendedException", PermanentError, None),
        (400, "MailFromDomainNotVerifiedException", PermanentError, None),
    ],
)
def test_ses_s_errors_become_the_delivery_s(
    fake_ses: FakeSes, status: int, error_type: str, raised: type[Exception], retry_after: float | None
) -> None:
    fake_ses.answer_next(times=2, **ses_error(status, error_type, "no"))  # (botocore tries twice)
    with pytest.raises(raised) as failed:
        SesMailer(endpoint_url=fake_ses.base_url).send(
            sender="h@example.com", to="a@example.net", raw=b"x", tags={}, configuration_set=None
        )
    assert error_type in str(failed.value)
    if retry_after is not None:
        assert getattr(failed.value, "retry_after", None) == retry_after


def test_an_unreachable_ses_is_transient() -> None:
    with pytest.raises(TransientError):
        SesMailer(endpoint_url="http://127.0.0.1:9", region="us-east-1").send(
            sender="h@example.com", to="a@example.net", raw=b"x", tags={}, configuration_set=None
        )
