"""Session API: `POST /api/sessions` and each named profile's `POST /p/<profile>/api/sessions` (HTTP API, payload
2.0, AWS_IAM authorizer) → `services.session_api`, for the profile the route serves."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.adapters.api_gateway import HttpApiEvent
from hermes_gateway.errors import BadRequest, PayloadTooLarge
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.ingress import decode_body, read_json
from hermes_gateway.services.session_api import ApiError, ApiResponse, SessionApiDeps, handle_request, route_profile


def _respond(response: ApiResponse) -> dict[str, Any]:
    headers = {"content-type": "application/json", "cache-control": "no-store"}
    if response.replayed:
        headers["x-hermes-replayed"] = "true"
    return {"statusCode": response.status, "headers": headers, "body": json.dumps(response.body)}


def caller_of(event: dict[str, Any]) -> str | None:
    """Who signed the request: API Gateway's IAM authorizer (or local mode's token check) put it
    in the request context. None means the route was reached without it: refused."""
    iam = ((event.get("requestContext") or {}).get("authorizer") or {}).get("iam") or {}
    caller = iam.get("userArn") or iam.get("callerId")
    return str(caller) if caller else None


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    caller = caller_of(event)
    if caller is None:
        return _respond(ApiResponse.error(ApiError("permission_denied", "the request is not signed")))
    http = HttpApiEvent.of(event)
    try:
        raw = decode_body(http.body, http.is_base64_encoded, wiring.settings().max_body_bytes)
        body = read_json(raw) if raw else None
    except PayloadTooLarge:
        return _respond(ApiResponse.error(ApiError("invalid", "the body is too large")))
    except BadRequest:
        return _respond(ApiResponse.error(ApiError("invalid", "the body must be a JSON object")))
    deps = SessionApiDeps(
        settings=wiring.settings(),
        stores=wiring.session_stores(),
        receipts=wiring.receipts(),
        events=wiring.events(),
        caller=caller,
        starter=wiring.turn_starter() if "turn" in wiring.bindings().state_machines else None,
    )
    return _respond(handle_request(body, deps, route_profile(http.raw_path)))
