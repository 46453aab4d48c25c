"""Teams replies carry the bot's own access token to the activity's `serviceUrl`. The token's claim
must match it (checked at ingress); beyond that, only https on a Bot Framework host may receive the
token, and no redirect takes it anywhere else."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from hermes_gateway.errors import BadRequest, PermanentError
from hermes_gateway.platforms.base import HttpClient, Target
from hermes_gateway.platforms.teams import TeamsSender, parse_activity, service_url_allowed
from tests.fakes.teams_server import DEFAULT_APP_ID, DEFAULT_APP_PASSWORD, FakeBotFramework
from tests.fakes.webhook_signers import teams_payload

COMMERCIAL = ("smba.trafficmanager.net",)


@pytest.mark.parametrize(
    ("url", "hosts", "allowed"),
    [
        ("https://smba.trafficmanager.net/emea/", COMMERCIAL, True),
        ("https://SMBA.trafficmanager.net/amer", COMMERCIAL, True),
        ("http://smba.trafficmanager.net/emea/", COMMERCIAL, False),  # the token in clear text
        ("https://attacker.example/", COMMERCIAL, False),
        ("https://smba.trafficmanager.net.attacker.example/", COMMERCIAL, False),
        ("https://user:pw@smba.trafficmanager.net/", COMMERCIAL, False),
        ("https://smba.trafficmanager.net:bad/", COMMERCIAL, False),
        ("https://smba.infra.gcc.teams.microsoft.com/", COMMERCIAL, False),  # a sovereign cloud: a setting
        ("https://smba.infra.gcc.teams.microsoft.com/", ("*.teams.microsoft.com",), True),
        ("https://teams.microsoft.com/", ("*.teams.microsoft.com",), False),
        ("http://127.0.0.1:3978/", ("127.0.0.1",), True),  # a local emulator, listed
        ("http://127.0.0.1:3978/", COMMERCIAL, False),
        ("http://10.0.0.5/", ("10.0.0.5",), False),  # plain http on loopback only
        ("file:///etc/passwd", COMMERCIAL, False),
    ],
)
def test_which_service_urls_may_receive_the_token(url: str, hosts: tuple[str, ...], allowed: bool) -> None:
    assert service_url_allowed(url, hosts) is allowed


@pytest.mark.parametrize("url", ["http://smba.trafficmanager.net/emea/", "https://attacker.example/"])
def test_an_activity_naming_another_service_url_is_refused_at_ingress(url: str) -> None:
    # (the token's serviceurl claim matched it: verification alone let it through)
    activity = {**json.loads(teams_payload(1, "a:1personal-conversation")), "serviceUrl": url}
    with pytest.raises(BadRequest, match="TEAMS_SERVICE_URL_HOSTS"):
        parse_activity(activity, received_at=0.0)


def test_the_commercial_clouds_service_url_is_accepted() -> None:
    activity = json.loads(teams_payload(1, "a:1personal-conversation"))
    parsed = parse_activity(activity, received_at=0.0)
    assert getattr(parsed, "reply_context", {})["service_url"] == "https://smba.trafficmanager.net/emea/"


@pytest.fixture
def token_issuer() -> Iterator[FakeBotFramework]:
    with FakeBotFramework() as fake:
        yield fake


def sender(token_issuer: FakeBotFramework, hosts: tuple[str, ...]) -> TeamsSender:
    return TeamsSender(
        app_id=DEFAULT_APP_ID,
        password=DEFAULT_APP_PASSWORD,
        token_url=token_issuer.token_url,
        timeout=2.0,
        service_url_hosts=hosts,
    )


def to(base_url: str) -> Target:
    context = {"service_url": base_url + "/", "conversation_id": "a:1personal-conversation"}
    return Target("teams", "a:1personal-conversation", None, context)


def test_a_stored_service_url_outside_the_hosts_gets_no_token(token_issuer: FakeBotFramework) -> None:
    # Given a conversation recorded before the rule, whose service URL is not a Bot Framework host
    with FakeBotFramework() as elsewhere:
        # When a reply is sent to it, Then nothing is sent (no token fetched, no request made)
        with pytest.raises(PermanentError, match="not https on a Bot Framework host"):
            sender(token_issuer, COMMERCIAL).send(to(elsewhere.base_url), "hi")
        assert elsewhere.requests == [] and token_issuer.issued == []


def test_a_redirect_never_takes_the_token_along(token_issuer: FakeBotFramework) -> None:
    # Given a connector that answers the reply with a redirect to another host
    with FakeBotFramework() as connector, FakeBotFramework() as thief:
        connector.answer_next(302, {}, headers={"Location": thief.base_url + "/v3/conversations/x/activities"})
        # When the sender posts the reply with its bearer token
        with pytest.raises(PermanentError):
            sender(token_issuer, ("127.0.0.1",)).send(to(connector.base_url), "hi")
        # Then the redirect is not followed: the other host never sees the token
        assert thief.requests == []
        assert [r.headers.get("authorization", "")[:7] for r in connector.requests] == ["Bearer "]


def test_a_request_without_credentials_still_follows_redirects() -> None:
    with FakeBotFramework() as moved, FakeBotFramework() as keys:
        moved.answer_next(302, {}, headers={"Location": keys.base_url + "/v1/.well-known/keys"})
        answer = HttpClient("", platform="teams", timeout=2.0).request("GET", moved.base_url + "/old")
        assert answer.status == 200 and isinstance(answer.json_object().get("keys"), list)
        assert [r.path for r in keys.requests] == ["/v1/.well-known/keys"]
