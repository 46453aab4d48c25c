"""Named profiles (BEHAVIOUR §2): one deployment serves several bots, each with its own settings,
secrets, sessions, pairings and directory, and nothing of one is visible to another."""

from __future__ import annotations

import json
import secrets as random_secrets
from typing import Any

import pytest

from hermes_gateway.domain.profiles import ProfileDirectory, directory_for, pairing_for
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.targets import Channel
from hermes_gateway.errors import ConfigError, UnknownProfile
from hermes_gateway.platforms.catalog import BY_NAME, webhook_path
from hermes_gateway.platforms.telegram import SECRET_HEADER
from hermes_gateway.secrets import Secrets, profile_secret_name
from hermes_gateway.services.delivery import DeliveryJob
from hermes_gateway.services.ingress import HttpRequest, handle_webhook, webhook_route
from hermes_gateway.services.router import Access, route_message
from hermes_gateway.services.turn import turn_profile
from hermes_gateway.services.turn_commands import reply_target
from hermes_gateway.settings import MAX_PROFILES, load_settings, rules_from_settings, settings_env
from tests.fakes import platforms
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeDirectory, FakeEnqueue, FakeEvents, FakeStarter
from tests.fakes.sessions import memory_stores, seed

NOW = 1_764_400_000.0
CODER = {
    "provider": {"name": "openai", "model": "coder-model"},
    "access": {"allowed_users": ["7"]},
    "sessions": {"reset_mode": "idle", "reset_idle_minutes": 10},
    "platforms": {"telegram": {"enabled": True, "unauthorized_dm": "pair", "allowed_users": ["7"]}},
}
BASE = {
    "time_zone": "Europe/Berlin",
    "access": {"admins": ["1"]},
    "platforms": {"telegram": {"enabled": True, "allowed_users": ["42"]}, "slack": {"enabled": True}},
    "profiles": {"coder": CODER},
}


def settings(config: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Any:
    return load_settings(env=env or {}, config=BASE if config is None else config)


# -- settings -------------------------------------------------------------------------------------


def test_a_named_profile_inherits_the_deployment_and_overlays_its_own() -> None:
    base = settings()
    coder = base.for_profile("coder")
    assert (coder.profile, coder.served_profile, coder.base_profile) == ("coder", "coder", "default")
    assert (base.served_profile, base.for_profile(None), base.for_profile("default")) == (None, base, base)
    assert (coder.provider.name, coder.provider.model) == ("openai", "coder-model")
    assert base.provider.name == "echo"
    assert coder.time_zone == "Europe/Berlin" and coder.access.admins == ("1",)  # inherited
    assert coder.access.allowed_users == ("7",) and base.access.allowed_users == ()
    assert coder.platforms["telegram"].allowed_users == ("7",) and base.platforms["telegram"].allowed_users == ("42",)
    assert coder.platforms["telegram"].bot_policy == "none"  # what the overlay leaves out is inherited
    inherits = settings({**BASE, "profiles": {"coder": {"platforms": {"telegram": {"enabled": True}}}}})
    assert inherits.for_profile("coder").platforms["telegram"].allowed_users == ("42",)
    assert coder.sessions.reset_mode == "idle" and base.sessions.reset_mode == "none"
    assert [s.profile for s in base.all_profiles()] == ["default", "coder"]


def test_a_named_profile_serves_only_the_platforms_it_enables() -> None:
    base, coder = settings(), settings().for_profile("coder")
    assert base.platform("slack") is not None and coder.platform("slack") is None
    assert coder.platform("telegram") is not None


def test_an_unknown_profile_is_refused_and_a_named_profile_knows_only_itself() -> None:
    base = settings()
    with pytest.raises(UnknownProfile):
        base.for_profile("writer")
    coder = base.for_profile("coder")
    assert coder.for_profile("coder") is coder
    with pytest.raises(UnknownProfile):
        coder.for_profile(None)


def test_the_environment_carries_every_profile_and_reads_back_the_same_settings() -> None:
    base = settings()
    env = settings_env(base, changed_only=True)
    overlays = json.loads(env["GATEWAY_PROFILES"])
    assert overlays["coder"]["GATEWAY_MODEL"] == "coder-model" and overlays["coder"]["TELEGRAM_ENABLED"] == "true"
    assert load_settings(env=env) == base


@pytest.mark.parametrize(
    ("profiles", "reason"),
    [
        ({"coder": {"stage": "prod"}}, "profiles.coder.stage: is set for the whole deployment"),
        ({"coder": {"cron": {"grace_seconds": 5}}}, "profiles.coder.cron.grace_seconds: is set for the whole"),
        ({"coder": {"turns": {"workflow_type": "standard"}}}, "turns.workflow_type: is set for the whole"),
        ({"Coder": {}}, "a profile name is 1-30 lower-case letters"),
        ({"default": {}}, "is the deployment's own profile"),
        ({"coder": {"provider": {"name": "openai"}}}, "profiles.coder: provider.model (GATEWAY_MODEL): is required"),
        ({"coder": {"nonsense": 1}}, "profiles.coder: nonsense: unknown setting"),
        ({"coder": {"platforms": {"telegram": {"enabled": "maybe"}}}}, "profiles.coder.platforms.telegram.enabled"),
        ({"coder": ["x"]}, "profiles.coder: expected a section of settings"),
        ({f"p{i}": {} for i in range(MAX_PROFILES + 1)}, f"at most {MAX_PROFILES} named profiles"),
    ],
)
def test_a_bad_profile_is_a_clear_configuration_error(profiles: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError, match=r"gateway\.yaml") as raised:
        settings({"profiles": profiles})
    assert reason in str(raised.value)


def test_a_profile_may_not_be_the_deployments_own_name() -> None:
    with pytest.raises(ConfigError, match="deployment's own profile"):
        settings({"profile": "coder", "profiles": {"coder": {}}})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{", "not valid JSON"),
        ('{"coder": {"TELEGRAM_ENABLED": true}}', "expected {profile: {VARIABLE: value}}"),
        ('{"coder": {"NOT_A_SETTING": "1"}}', "unknown setting(s) NOT_A_SETTING"),
    ],
)
def test_a_bad_profiles_variable_is_a_clear_error(raw: str, reason: str) -> None:
    with pytest.raises(ConfigError, match="GATEWAY_PROFILES") as raised:
        load_settings(env={"GATEWAY_PROFILES": raw})
    assert reason in str(raised.value)


def test_a_session_key_names_its_profiles_settings_and_reset_rules() -> None:
    base = settings()
    assert base.for_session_key("agent:coder:telegram:dm:99").profile == "coder"
    assert base.for_session_key("agent:main:telegram:dm:99") is base
    assert base.for_session_key("agent:coderx:telegram:dm:99") is base  # a namespace, not a prefix
    rules = rules_from_settings(base)
    assert rules.for_key("agent:coder:telegram:dm:99").policy_for("telegram", "dm").mode == "idle"
    assert rules.for_key("agent:main:telegram:dm:99").policy_for("telegram", "dm").mode == "none"


def test_each_profiles_reset_policy_applies_to_its_own_sessions_only() -> None:
    stores = memory_stores(rules_from_settings(settings()))
    source = SessionSource("telegram", chat_id="99", user_id="42")
    for key in ("agent:main:telegram:dm:99", "agent:coder:telegram:dm:99"):
        stores.routes.open(source, key, NOW)
    later = NOW + 11 * 60
    assert not stores.routes.open(source, "agent:main:telegram:dm:99", later).created
    replaced = stores.routes.open(source, "agent:coder:telegram:dm:99", later)
    assert replaced.created and replaced.reset_reason == "idle"


# -- secrets --------------------------------------------------------------------------------------


def test_a_profiles_platform_secrets_are_its_own_and_other_secrets_fall_back() -> None:
    base_token, coder_token, model_key = (random_secrets.token_hex(8) for _ in range(3))
    env = {
        "TELEGRAM_BOT_TOKEN": base_token,
        profile_secret_name("TELEGRAM_BOT_TOKEN", "coder"): coder_token,
        "OPENAI_API_KEY": model_key,
        "TELEGRAM_WEBHOOK_SECRET": base_token,
    }
    assert profile_secret_name("TELEGRAM_BOT_TOKEN", "coder") == "TELEGRAM_BOT_TOKEN__CODER"
    assert profile_secret_name("TELEGRAM_BOT_TOKEN", None) == "TELEGRAM_BOT_TOKEN"
    coder = Secrets(env).for_profile("coder")
    assert coder.get("TELEGRAM_BOT_TOKEN") == coder_token
    assert coder.get("OPENAI_API_KEY") == model_key  # not a bot's: the deployment's serves
    assert coder.get("TELEGRAM_WEBHOOK_SECRET") is None  # a bot's: never borrowed
    assert Secrets(env).get("TELEGRAM_BOT_TOKEN") == base_token
    with pytest.raises(KeyError):
        coder.get("TELEGRAM_BOT_TOKEN__CODER")


# -- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/webhooks/telegram", (None, "telegram")),
        ("/p/coder/webhooks/telegram", ("coder", "telegram")),
        ("/p/coder/webhooks/matrix/_matrix/app/v1/transactions/1", ("coder", "matrix")),
        ("/webhooks/matrix/p/coder/webhooks/telegram", (None, "matrix")),  # a sub-path never decides
        ("/p/webhooks/webhooks/slack", ("webhooks", "slack")),
        ("/p/coder/webhooks", (None, "")),
        ("/elsewhere", (None, "")),
    ],
)
def test_a_webhook_path_names_its_profile_and_platform(path: str, route: tuple[str | None, str]) -> None:
    assert webhook_route(path) == route


def test_a_profiles_routes_live_under_its_prefix() -> None:
    assert webhook_path("telegram", "coder") == "/p/coder/webhooks/telegram"
    assert BY_NAME["matrix"].webhook_paths("coder") == ("/p/coder/webhooks/matrix", "/p/coder/webhooks/matrix/{proxy+}")
    assert BY_NAME["telegram"].webhook_paths() == ("/webhooks/telegram",)


# -- ingress --------------------------------------------------------------------------------------


def _tg(update_id: int, secret: str, path: str) -> HttpRequest:
    update = {
        "update_id": update_id,
        "message": {
            "message_id": 5,
            "date": int(NOW),
            "chat": {"id": 99, "type": "private", "first_name": "Al"},
            "from": {"id": 42, "is_bot": False, "first_name": "Al"},
            "text": "hello",
        },
    }
    headers = {"content-type": "application/json", SECRET_HEADER: secret}
    return HttpRequest("POST", path, headers, json.dumps(update).encode())


def _ingress_secrets() -> dict[str, str]:
    names = ("TELEGRAM_WEBHOOK_SECRET", "TELEGRAM_WEBHOOK_SECRET__CODER")
    return {name: random_secrets.token_hex(8) for name in names}


CODER_PATH = "/p/coder/webhooks/telegram"


def _post(request: HttpRequest, profile: str | None, env: dict[str, str], enqueue: FakeEnqueue) -> Any:
    base = settings()
    return handle_webhook(
        "telegram",
        request,
        settings=base,
        adapters=platforms.adapters(base, env, lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
        profile=profile,
    )


def test_a_named_profiles_webhook_is_verified_with_its_own_secret_and_carries_the_profile() -> None:
    env, enqueue = _ingress_secrets(), FakeEnqueue()
    # the deployment's secret does not open the coder bot's door
    assert _post(_tg(7, env["TELEGRAM_WEBHOOK_SECRET"], CODER_PATH), "coder", env, enqueue).status == 401
    assert enqueue.sent == []
    ok = _post(_tg(7, env["TELEGRAM_WEBHOOK_SECRET__CODER"], CODER_PATH), "coder", env, enqueue)
    assert ok.status == 200
    [sent] = enqueue.sent
    assert sent["session_key"] == "agent:coder:telegram:dm:99"
    assert InboundMessage.from_dict(sent).source.profile == "coder"


def test_two_bots_may_number_their_events_alike_and_neither_is_dropped() -> None:
    env, enqueue = _ingress_secrets(), FakeEnqueue()
    assert _post(_tg(7, env["TELEGRAM_WEBHOOK_SECRET"], "/webhooks/telegram"), None, env, enqueue).status == 200
    assert _post(_tg(7, env["TELEGRAM_WEBHOOK_SECRET__CODER"], CODER_PATH), "coder", env, enqueue).status == 200
    assert len(enqueue.sent) == 2 and len({m["event_id"] for m in enqueue.sent}) == 2
    assert [m["session_key"] for m in enqueue.sent] == ["agent:main:telegram:dm:99", "agent:coder:telegram:dm:99"]
    assert InboundMessage.from_dict(enqueue.sent[0]).source.profile is None


def test_an_unserved_profile_or_a_platform_it_does_not_enable_is_404() -> None:
    env, enqueue = _ingress_secrets(), FakeEnqueue()
    unserved = _tg(7, env["TELEGRAM_WEBHOOK_SECRET"], "/p/writer/webhooks/telegram")
    assert _post(unserved, "writer", env, enqueue).status == 404
    base = settings()
    response = handle_webhook(
        "slack",
        HttpRequest("POST", "/p/coder/webhooks/slack", {}, b"{}"),
        settings=base,
        adapters=platforms.adapters(base, env, lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
        profile="coder",
    )
    assert response.status == 404 and enqueue.sent == []


# -- router: each profile its own allowlist, pairings and directory ---------------------------------


def _message(profile: str | None, event: str) -> InboundMessage:
    source = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al", profile=profile)
    return InboundMessage(source=source, text="hello", event_id=event, received_at=NOW)


def test_a_user_allowed_by_one_bot_is_paired_separately_with_another() -> None:
    base = settings()
    stores, starter, pairing = memory_stores(), FakeStarter(), FakePairingStore()
    replies = FakeDeliveryQueue()

    def access(profile: str | None) -> Access:
        return Access(pairing=pairing_for(pairing, profile), replies=replies, events=FakeEvents())

    allowed = route_message(
        _message(None, "e1"), settings=base, stores=stores, starter=starter, access=access(None), now=NOW
    )
    assert allowed.status == "started"
    coder = base.for_profile("coder")
    paired = route_message(
        _message("coder", "p:coder:e1"), settings=coder, stores=stores, starter=starter,
        access=access("coder"), now=NOW,
    )  # fmt: skip
    assert paired.status == "pairing"
    [reply] = [job for job in replies.bodies if job["delivery_id"].startswith("pairing-")]
    assert reply["text"].rstrip().endswith("--profile coder")
    assert reply["target"]["profile"] == "coder"
    code = reply["redact"][0]
    # the deployment's own pairing list knows nothing of it
    assert pairing.pending("telegram", NOW) == []
    assert pairing_for(pairing, "coder").approve("telegram", code, NOW, "op").status == "approved"
    assert pairing_for(pairing, "coder").is_approved("telegram", "42")
    assert not pairing.is_approved("telegram", "42")
    assert [a.platform for a in pairing_for(pairing, "coder").approved("telegram")] == ["telegram"]
    [turn] = [t["turn"] for name, t in starter.started.items() if t["turn"]["session_key"].startswith("agent:main:")]
    assert "profile" not in turn["reply_to"]


def test_each_profile_sees_only_its_own_home_channels_named_chats_and_gone_targets() -> None:
    shared = FakeDirectory()
    base, coder = directory_for(shared, None), directory_for(shared, "coder")
    assert isinstance(coder, ProfileDirectory)
    coder.set_home("telegram", "-100", None, "op", NOW)
    coder.remember(Channel("telegram", "-5", None, "Ops", "group"), NOW)
    base.remember(Channel("telegram", "-6", None, "Ops", "group"), NOW)
    coder.mark_gone("telegram", "-5", None, "kicked", NOW)
    assert base.home("telegram") is None and coder.home("telegram") == ("-100", None)
    assert [c.chat_id for c in coder.channels_named("ops")] == ["-5"]
    assert [c.chat_id for c in base.channels_named("ops")] == ["-6"]
    assert [(c.platform, c.chat_id) for c in coder.channels_named("ops", "telegram")] == [("telegram", "-5")]
    assert coder.gone_reason("telegram", "-5", None, NOW) == "kicked"
    assert base.gone_reason("telegram", "-5", None, NOW) is None
    coder.clear_gone("telegram", "-5", None)
    assert coder.gone_reason("telegram", "-5", None, NOW) is None


# -- what carries the profile onward ----------------------------------------------------------------


def test_a_reply_target_and_a_delivery_job_carry_a_named_profile() -> None:
    target = reply_target(_message("coder", "e")).to_dict()
    assert target["profile"] == "coder" and "profile" not in reply_target(_message(None, "e")).to_dict()
    job = DeliveryJob.from_dict({"delivery_id": "d1", "target": target, "text": "hi"})
    assert job.profile == "coder"
    plain = {"delivery_id": "d1", "target": {"platform": "telegram", "chat_id": "9"}, "text": "hi"}
    assert DeliveryJob.from_dict(plain).profile is None


def test_a_turn_runs_as_its_messages_profile_or_its_jobs() -> None:
    assert turn_profile({"turn": {"source": {"profile": "coder"}}}) == "coder"
    assert turn_profile({"turn": {"kind": "cron", "job": {"profile": "coder"}}}) == "coder"
    assert turn_profile({"turn": {"kind": "cron", "job": {"profile": None}}}) is None
    assert turn_profile({"turn": {"source": {"platform": "telegram"}}}) is None


# -- the wiring builds each profile's own parts -----------------------------------------------------


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> Any:
    from hermes_gateway import wiring

    for name in ("HERMES_SECRETS_PREFIX", "HERMES_LOCAL_MODE", "TELEGRAM_BOT_TOKEN", "TELEGRAM_BOT_TOKEN__CODER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_PROFILES", json.dumps({"coder": {"TELEGRAM_ENABLED": "true"}}))
    wiring.reset()
    yield wiring
    wiring.reset()


def test_a_named_profiles_bot_sends_with_its_own_token_or_not_at_all(
    wired: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "111:" + random_secrets.token_hex(4))
    assert wired.sender_for("telegram") is not None
    assert wired.sender_for("telegram", profile="coder") is None  # never the deployment's bot
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN__CODER", "222:" + random_secrets.token_hex(4))
    coder = wired.sender_for("telegram", profile="coder")
    assert coder is not None and coder is not wired.sender_for("telegram")
    assert wired.adapter_context("telegram", "coder").settings.served_profile == "coder"
    assert wired.adapter_context("telegram").settings.served_profile is None
    with pytest.raises(UnknownProfile):
        wired.profile_settings("writer")
    assert wired.inbound_adapter("telegram", "writer") is None


# -- the session API answers for the profile it is asked about --------------------------------------


def test_the_session_api_lists_and_changes_one_profiles_sessions_only() -> None:
    from hermes_gateway.domain.session_key import build_session_key
    from hermes_gateway.services.session_api import SessionApiDeps, handle_request
    from tests.fakes.receipts import FakeReceipts

    stores, starter = memory_stores(), FakeStarter()
    source = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al")
    ids = {}
    for profile in ("default", "coder"):
        ids[profile] = seed(stores, source, build_session_key(source, profile=profile), f"hi from {profile}", now=NOW)
    deps = SessionApiDeps(settings(), stores, FakeReceipts(), FakeEvents(), now=lambda: NOW + 5, starter=starter)

    def listed(route: str | None = None) -> list[str]:
        answer = handle_request({"verb": "session.list"}, deps, route)
        return [item["session_id"] for item in answer.body["sessions"]]

    assert listed() == [ids["default"]] and listed("coder") == [ids["coder"]]
    unknown = handle_request({"verb": "session.list"}, deps, "writer")
    assert (unknown.status, unknown.body["error"]["reason"]) == (404, "not_found")
    # another profile's session is not found; its own is reset, and its memories flushed
    foreign = handle_request({"verb": "session.resume", "session_id": ids["coder"]}, deps)
    assert foreign.status == 404
    snap = handle_request({"verb": "session.resume", "session_id": ids["coder"]}, deps, "coder")
    fences = {k: snap.body["session"][k] for k in ("revision", "execution_generation")}
    body = {"verb": "session.mutate", "op": "reset", "request_id": "r1", "session_id": ids["coder"], **fences}
    reset = handle_request({**body, "profile": "coder"}, deps, "coder")  # the body may name its own route's
    assert reset.status == 200, reset.body
    [(name, state)] = starter.calls
    assert name == f"flush-{ids['coder']}" and state["turn"]["kind"] == "flush"
    assert state["turn"]["session_key"] == "agent:coder:telegram:dm:99"


@pytest.mark.parametrize(
    ("route", "named"),
    [(None, "coder"), ("coder", "default"), ("coder", "writer"), (None, "writer")],
)
def test_a_caller_of_one_profiles_route_is_denied_another_profiles_sessions(route: str | None, named: str) -> None:
    # Given a caller IAM allows on one profile's route only (its own `execute-api:Invoke` grant)
    from hermes_gateway.domain.session_key import build_session_key
    from hermes_gateway.services.session_api import SessionApiDeps, handle_request
    from tests.fakes.receipts import FakeReceipts

    stores = memory_stores()
    source = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al")
    other = stores.routes.open(source, build_session_key(source, profile=named), NOW)
    deps = SessionApiDeps(settings(), stores, FakeReceipts(), FakeEvents(), now=lambda: NOW + 5)
    for body in (
        {"verb": "session.list", "profile": named},
        {"verb": "session.resume", "session_id": other.session_id, "profile": named},
        {"verb": "session.mutate", "op": "delete", "request_id": "r9", "session_id": other.session_id,
         "revision": other.revision, "execution_generation": other.execution_generation, "profile": named},
    ):  # fmt: skip
        # When its request names another profile
        answer = handle_request(body, deps, route)
        # Then it is refused as such, and the other profile's session is untouched
        assert (answer.status, answer.body["error"]["reason"]) == (403, "permission_denied"), body
    assert stores.catalogue.get_session(other.session_id) is not None


def test_the_expiry_sweep_ends_a_session_by_its_own_profiles_policy() -> None:
    from hermes_gateway.services.session_sweep import sweep_expired_sessions

    base = settings()
    stores, starter = memory_stores(rules_from_settings(base)), FakeStarter()
    source = SessionSource("telegram", chat_id="99", user_id="42")
    for key in ("agent:main:telegram:dm:99", "agent:coder:telegram:dm:99"):
        seed(stores, source, key, "hello", now=NOW)
    result = sweep_expired_sessions(stores.sweep, stores.catalogue, starter, base, NOW + 11 * 60)
    assert result.expired == 1
    [(_, state)] = starter.calls
    assert state["turn"]["session_key"] == "agent:coder:telegram:dm:99"
