"""Model overrides (`/model`, the session API's `model` op) may point only where the deployment
allows: the deployment's `OPENAI_API_KEY` goes to the override's base URL, and a Bedrock model the
stack did not grant fails every turn."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway import wiring
from hermes_gateway.domain.model_policy import ModelPolicy
from hermes_gateway.domain.sessions import InvalidSessionRequest, ModelOverride
from hermes_gateway.errors import PermanentError
from hermes_gateway.settings import load_settings
from tests.unit.test_commands import Chat
from tests.unit.test_session_api_service import chat_session, make_deps, mutate, resume

OWN = "https://llm.example/v1"
LISTED = "https://models.internal.example/v1"
HOSTILE = [
    "http://169.254.169.254/latest/meta-data",  # instance metadata
    "http://10.0.0.7:8000/v1",  # a private address
    "https://attacker.example/v1",
    "http://llm.example/v1",  # the own host, but in clear text
    "https://llm.example/v1/../../steal",
    "https://llm.example.attacker.example/v1",
]


def policy(**env: str) -> ModelPolicy:
    base = {"GATEWAY_PROVIDER": "openai", "GATEWAY_MODEL": "gpt-4o-mini", "OPENAI_BASE_URL": OWN}
    return ModelPolicy.of(load_settings(env={**base, **env}, config={}))


@pytest.mark.parametrize("url", HOSTILE)
def test_a_base_url_the_deployment_did_not_configure_is_refused(url: str) -> None:
    with pytest.raises(InvalidSessionRequest, match="GATEWAY_ALLOWED_BASE_URLS"):
        policy(GATEWAY_ALLOWED_BASE_URLS=LISTED).check(ModelOverride("gpt-4o", "openai", url))


@pytest.mark.parametrize("url", [OWN, OWN + "/", LISTED])
def test_the_own_endpoint_and_the_listed_ones_are_allowed(url: str) -> None:
    override = ModelOverride("gpt-4o", "openai", url)
    assert policy(GATEWAY_ALLOWED_BASE_URLS=LISTED).check(override) == override


def test_a_bedrock_model_the_stack_did_not_grant_is_refused_with_the_granted_list() -> None:
    # Given a deployment on Bedrock model A, and a named profile on Bedrock model B
    settings = load_settings(
        env={"GATEWAY_PROVIDER": "bedrock", "GATEWAY_MODEL": "anthropic.a-v1"},
        config={"profiles": {"coder": {"provider": {"name": "bedrock", "model": "anthropic.b-v1"}}}},
    )
    own = ModelPolicy.of(settings)
    # Then either granted model may be chosen (the grant covers every profile's model) ...
    assert own.refusal(ModelOverride("anthropic.b-v1")) is None
    assert ModelPolicy.of(settings, "coder").refusal(ModelOverride("anthropic.a-v1", "bedrock")) is None
    # ... and any other is refused at once, naming what is granted
    with pytest.raises(InvalidSessionRequest, match=r"configured models only \(anthropic.a-v1, anthropic.b-v1\)"):
        own.check(ModelOverride("meta.llama-not-granted"))
    with pytest.raises(InvalidSessionRequest, match="none"):
        policy().check(ModelOverride("anthropic.a-v1", "bedrock"))  # an openai deployment grants none


def test_the_session_api_refuses_a_foreign_base_url_and_stores_nothing() -> None:
    deps = make_deps()
    session_id = chat_session(deps.stores, ["a"])
    refused = mutate(deps, session_id, "model", "m1", model={"model": "gpt-4o", "base_url": HOSTILE[0]})
    assert (refused.status, refused.body["error"]["reason"]) == (400, "invalid")
    assert "allowed_base_urls" in refused.body["error"]["message"]
    assert resume(deps, session_id)["info"]["model_override"] is None
    own = deps.settings.provider.openai_base_url
    allowed = mutate(deps, session_id, "model", "m2", model={"model": "gpt-4o", "base_url": own})
    assert allowed.status == 200, allowed.body


def test_model_in_chat_refuses_an_ungranted_bedrock_model() -> None:
    chat = Chat({"GATEWAY_ADMINS": "42"})
    chat.say("hello")
    answer = chat.reply("/model bedrock:meta.llama-not-granted")
    assert answer.startswith("Model not changed: the stack grants Bedrock access to the configured models only")
    route = chat.stores.routes.get(chat.key)
    assert route is not None and route.model_override is None


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in {
        "GATEWAY_PROVIDER": "openai",
        "GATEWAY_MODEL": "gpt-4o-mini",
        "OPENAI_BASE_URL": OWN,
        "OPENAI_API_KEY": "sk-" + "t" * 20,
        "HERMES_LOCAL_MODE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GATEWAY_PROFILES", raising=False)
    wiring.reset()
    yield wiring
    wiring.reset()


def test_a_turn_never_sends_the_key_to_an_override_stored_before_the_rule(deployment: Any) -> None:
    # Given a session whose override was stored before base URLs were checked
    stored = ModelOverride("gpt-4o", "openai", "https://attacker.example/v1")
    # When its next turn builds the model provider, Then it fails with the reason instead
    with pytest.raises(PermanentError, match="/model default clears it"):
        deployment._provider(stored)
    assert deployment._provider(ModelOverride("gpt-4o", base_url=OWN)) is not None
