"""The session API in the stack: one IAM-authorized route to its own function, and its URL output."""

from __future__ import annotations

from typing import Any

from hermes_gateway.outputs import SESSION_API_OUTPUT
from tests.infra.conftest import Synthesized
from tests.infra.test_infra_stack import functions_by_name, ref, role_statements


def _session_route(synthesized: Synthesized) -> dict[str, Any]:
    (route,) = [
        dict(r["Properties"])
        for r in synthesized.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["RouteKey"] == "POST /api/sessions"
    ]
    return route


def test_the_session_route_is_iam_authorized_and_webhooks_are_not(synthesized: Synthesized) -> None:
    # Given the synthesized stack, When its routes are read
    route = _session_route(synthesized)
    # Then only the session API asks API Gateway for a SigV4 signature
    assert route["AuthorizationType"] == "AWS_IAM"
    others = [
        r["Properties"]
        for r in synthesized.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["RouteKey"] != "POST /api/sessions"
    ]
    assert others and all(r.get("AuthorizationType", "NONE") == "NONE" for r in others)


def test_the_session_route_invokes_the_session_api_function(synthesized: Synthesized) -> None:
    route = _session_route(synthesized)
    integration_id = route["Target"]["Fn::Join"][1][1]["Ref"]
    integration = synthesized.resources[integration_id]["Properties"]
    assert ref(integration["IntegrationUri"]) == functions_by_name(synthesized)["session_api"][0]


def test_the_session_api_url_is_an_output(synthesized: Synthesized) -> None:
    output = synthesized.outputs[SESSION_API_OUTPUT]
    assert "api/sessions" in str(output["Value"])


def test_the_session_api_function_reads_sessions_and_receipts_only(synthesized: Synthesized) -> None:
    _, props = functions_by_name(synthesized)["session_api"]
    variables = props["Environment"]["Variables"]
    for name in ("HERMES_ROUTES_TABLE", "HERMES_SESSIONS_TABLE", "HERMES_MESSAGES_TABLE", "HERMES_IDEMPOTENCY_TABLE"):
        assert name in variables
    # no queue and no secret; the turn state machine only to flush a reset session's memory
    assert not any(name.endswith("_QUEUE_URL") for name in variables)
    assert [name for name in variables if name.endswith("_ARN")] == ["HERMES_TURN_STATE_MACHINE_ARN"]
    role = ref(props["Role"])
    actions = {
        a
        for s in role_statements(synthesized, role)
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert not any(a.startswith(("sqs:", "ssm:")) for a in actions)
    assert {a for a in actions if a.startswith("states:")} == {"states:StartExecution"}
