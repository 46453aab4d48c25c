"""Bad input through local mode's HTTP front, on every platform of the catalog (the web chat page
aside): a forged signature, a replayed request and a timestamp outside the platform's window, a
malformed body, an oversize body, path-traversal ids, and unknown platforms. Each gets its expected
status and nothing is enqueued (no message written to the inbox, counted at the adapter, so no
turn and no outbox row can follow). A correctly signed request per platform is the control: it is
accepted and enqueued exactly once, so each refusal below is the check's, not a broken signer's.

Platforms whose signature carries no time (Telegram, WhatsApp, LINE, Twilio, Matrix, Mattermost)
cannot refuse a replay by its age: a byte-identical replay is answered as a duplicate and enqueues
nothing. Those that sign a time (Slack, Discord, Standard Webhooks, relays, Feishu) and the bearer
token platforms (Teams, Google Chat: `exp`) refuse a request an hour old.

Pairing brute force: five wrong codes lock approvals on the platform, and then even the right code
is refused (`hermes-gateway pairing approve … --local`, run in-process).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.platforms.catalog import CATALOG
from hermes_local.runtime import LocalGateway
from tests.e2e.conftest import BASE_ENV, Client, inbox_writes, telegram_update
from tests.fakes.google_server import FakeGoogle
from tests.fakes.teams_server import FakeBotFramework
from tests.fakes.webhook_signers import (
    PLATFORMS,
    Keys,
    Platform,
    Request,
    Sign,
    _json,
    environment,
    matrix_payload,
    telegram_payload,
)

pytestmark = pytest.mark.e2e

TRAVERSAL = "../../etc/passwd"
HOUR = 3600.0
# What each case is answered with, on every platform: the platform retries nothing it should not.
STATUS = {"forged": 401, "stale": 401, "malformed": 400, "oversize": 413, "traversal": 400}


# --- the gateway, with every platform on ------------------------------------------------------


@dataclass
class Gateway:
    client: Client
    keys: Keys
    enqueued: list[dict[str, Any]]  # every envelope the ingress wrote to the inbox
    numbers: Iterator[int]

    def send(self, request: Request) -> tuple[int, Any]:
        return self.client.request(request.method, request.path, request.body, request.headers)

    def signed(
        self, platform: Platform, n: int, body: bytes, *, at: float | None = None, forged: bool = False
    ) -> Request:
        host = self.client.gateway.url.removeprefix("http://")
        return platform.sign(Sign(self.keys, host, time.time() if at is None else at, forged), n, body)

    def sent_now(self, request: Request) -> tuple[int, int]:
        """The status, and how many envelopes the request enqueued."""
        before = len(self.enqueued)
        status, _ = self.send(request)
        return status, len(self.enqueued) - before


@pytest.fixture(scope="class")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:

    keys = Keys.generate()
    with (
        FakeBotFramework(keys=[keys.teams.jwk(endorsements=["msteams"])]) as bot_framework,
        FakeGoogle(keys=[keys.google.jwk(alg="RS256")]) as google,
    ):
        environ = {
            **BASE_ENV,
            **environment(keys, openid_url=bot_framework.openid_url, certs_url=google.certs_url),
            "GATEWAY_ALLOW_ALL_USERS": "true",
            "HERMES_LOCAL_STATE": str(tmp_path_factory.mktemp("bad-input") / "local.json"),
        }
        local = LocalGateway(port=0, environ=environ, tick_seconds=3600, poll_wait_seconds=1).start()
        try:
            with inbox_writes() as enqueued:  # the messages written to the inbox (duplicates are not)
                yield Gateway(Client(local), keys, enqueued, iter(range(1, 1_000_000)))
        finally:
            local.wait_idle()  # nothing of this gateway's left in flight for the next test's
            local.stop()


class TestEveryPlatform:
    """One gateway with every platform on, for the whole class (stopped before the pairing test's)."""

    def test_every_platform_of_the_catalog_is_covered(self, gateway: Gateway) -> None:
        served = {spec.name for spec in CATALOG if not spec.local_only and spec.webhook}
        assert served == set(PLATFORMS)  # (e-mail comes through SES: tests/e2e/test_local_email.py)
        assert set(gateway.client.gateway.enabled_platforms()) >= served

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_correctly_signed_request_is_enqueued_once(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        assert gateway.sent_now(gateway.signed(platform, n, platform.payload(n, platform.chat))) == (200, 1)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_forged_signature_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat), forged=True)
        assert gateway.sent_now(request) == (STATUS["forged"], 0)

    @pytest.mark.parametrize("name", sorted(name for name, p in PLATFORMS.items() if p.signs_time))
    def test_a_request_signed_an_hour_ago_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat), at=time.time() - HOUR)
        assert gateway.sent_now(request) == (STATUS["stale"], 0)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_replayed_request_enqueues_nothing_more(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat))
        assert gateway.sent_now(request) == (200, 1)
        assert gateway.sent_now(request) == (200, 0)  # the same bytes, within the window: a duplicate

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_malformed_body_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        assert gateway.sent_now(gateway.signed(platform, n, platform.malformed)) == (STATUS["malformed"], 0)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_an_oversize_body_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat) + b" " * 70_000)
        assert gateway.sent_now(request) == (STATUS["oversize"], 0)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_path_traversal_ids_are_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        chat = "spaces/../../etc" if name == "google_chat" else TRAVERSAL
        # Matrix: an authenticated homeserver's transaction; a bad event in it is ignored, never a 400
        expected = 200 if name == "matrix" else STATUS["traversal"]
        assert gateway.sent_now(gateway.signed(platform, n, platform.payload(n, chat))) == (expected, 0)

    @pytest.mark.parametrize("path", ["/webhooks/nowhere", "/webhooks/..%2Ftelegram", "/webhooks/../webhooks/telegram"])
    def test_an_unknown_platform_is_not_found(self, gateway: Gateway, path: str) -> None:
        request = gateway.signed(PLATFORMS["telegram"], 1, telegram_payload(1, "4242"))
        assert gateway.sent_now(Request("POST", path, request.body, request.headers)) == (404, 0)

    @pytest.mark.parametrize("method", ["TRACE", "PROPFIND", "BREW"])
    @pytest.mark.parametrize("path", ["/webhooks/telegram", "/webhooks/slack", "/local/outbox", "/"])
    def test_an_unknown_method_is_a_405_not_a_501(self, gateway: Gateway, method: str, path: str) -> None:
        # As the deployed API answers it (a 501 was http.server's own, which a client may retry)
        status, _ = gateway.client.request(method, path, None, {"x-hermes-local-token": "ignored"})
        assert status == 405

    def test_a_valid_matrix_user_id_with_two_dots_does_not_block_the_transaction(self, gateway: Gateway) -> None:
        n = next(gateway.numbers)
        events = json.loads(matrix_payload(n, "!room:example.org"))["events"]
        odd = {**events[0], "sender": "@john..doe:example.org", "event_id": f"$odd{n}"}
        body = _json({"events": [odd, events[0]]})  # then a message from @al
        status, enqueued = gateway.sent_now(gateway.signed(PLATFORMS["matrix"], n, body))
        # Both are answered: @john..doe's session is keyed by a reversible form of the id without '..'
        # (the session key's safety rule refuses '..'), and @al's message goes through.
        assert (status, enqueued) == (200, 2)

    def test_an_unsafe_id_alone_in_a_matrix_transaction_does_not_block_it(self, gateway: Gateway) -> None:
        # A 400 would make the homeserver resend the transaction unchanged forever, blocking the bot
        n = next(gateway.numbers)
        [event] = json.loads(matrix_payload(n, "!room:example.org"))["events"]
        valid = _json({"events": [{**event, "sender": "@john..doe:example.org"}]})
        assert gateway.sent_now(gateway.signed(PLATFORMS["matrix"], n, valid)) == (200, 1)
        n = next(gateway.numbers)
        [event] = json.loads(matrix_payload(n, "!room:example.org"))["events"]
        unusable = _json({"events": [{**event, "room_id": "!../../etc:example.org"}]})
        assert gateway.sent_now(gateway.signed(PLATFORMS["matrix"], n, unusable)) == (200, 0)

    def test_only_the_accepted_requests_were_answered(self, gateway: Gateway) -> None:
        # Every refused request left no trace: the outbox holds replies to the accepted chats only
        accepted = len(gateway.enqueued)

        def answers() -> list[dict[str, Any]]:  # not the busy notice a message that came mid-turn may get
            return [row for row in gateway.client.outbox() if not row["delivery_id"].startswith("busy-")]

        deadline = time.time() + 60
        while len(answers()) < accepted and time.time() < deadline:
            time.sleep(0.2)
        rows = gateway.client.outbox()
        assert len(answers()) == accepted
        assert not any(".." in str(row["chat_id"]) for row in rows)


# --- pairing brute force ----------------------------------------------------------------------

CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


def test_pairing_brute_force_ends_in_lockout(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hermes_cli import main as cli

    client = start_gateway(
        TELEGRAM_ALLOWED_USERS="7", TELEGRAM_UNAUTHORIZED_DM="pair", HERMES_LOCAL_STATE=str(tmp_path / "local.json")
    )
    # Given user 42 holds a real pending code
    assert client.telegram(telegram_update(1, "let me in", user_id=42))[0] == 200
    # (the Telegram row: a turn the previous test left running may still land in this process's outbox)
    code = CODE.search(client.wait_outbox(1, platform="telegram")[0]["text"]).group(1)  # type: ignore[union-attr]
    wrong = "AAAA2222" if code != "AAAA2222" else "BBBB3333"
    # When an attacker tries five wrong codes
    exits = [cli(["pairing", "approve", "telegram", wrong, "--local"]) for _ in range(5)]
    assert exits == [1] * 5
    capsys.readouterr()
    # Then approvals are locked: even the right code is refused, and nobody was approved
    assert cli(["pairing", "approve", "telegram", code, "--local"]) == 3
    assert "locked after too many wrong codes" in capsys.readouterr().out
    assert client.telegram(telegram_update(2, "now?", user_id=42))[0] == 200
    client.gateway.wait_idle()
    assert not any(row["text"].startswith("Echo:") for row in client.outbox(platform="telegram"))
