"""adapters/api_gateway.py: the fields of an HTTP API payload 2.0 event the webhook and session API
functions read, from a full event and from one with the optional keys left out."""

from __future__ import annotations

import pytest

from hermes_gateway.adapters.api_gateway import HttpApiEvent

# The shape API Gateway documents for payload format 2.0 (values of our own)
FULL = {
    "version": "2.0",
    "routeKey": "POST /webhooks/{platform}",
    "rawPath": "/webhooks/telegram",
    "rawQueryString": "a=1&a=2&b=x%20y",
    "cookies": ["c1=v1"],
    "headers": {"content-type": "application/json", "x-telegram-bot-api-secret-token": "s", "x-dup": "1,2"},
    "queryStringParameters": {"a": "1,2", "b": "x y"},
    "pathParameters": {"platform": "telegram"},
    "requestContext": {"http": {"method": "post", "path": "/webhooks/telegram", "protocol": "HTTP/1.1"}},
    "body": "eyJ1cGRhdGVfaWQiOiAxfQ==",
    "isBase64Encoded": True,
}


def test_a_full_event_gives_every_field_the_functions_read() -> None:
    http = HttpApiEvent.of(FULL)
    assert http.method == "POST"
    assert (http.raw_path, http.raw_query) == ("/webhooks/telegram", "a=1&a=2&b=x%20y")
    assert http.headers["x-telegram-bot-api-secret-token"] == "s" and http.headers["x-dup"] == "1,2"
    assert http.query == {"a": "1,2", "b": "x y"}
    assert http.path_parameters == {"platform": "telegram"}
    assert http.body == "eyJ1cGRhdGVfaWQiOiAxfQ==" and http.is_base64_encoded is True


def test_keys_api_gateway_leaves_out_read_as_empty() -> None:
    http = HttpApiEvent.of({"rawPath": "/webhooks/slack", "requestContext": {"http": {"method": "GET"}}})
    assert (http.method, http.raw_query, http.body, http.is_base64_encoded) == ("GET", "", None, False)
    assert http.headers == {} and http.query == {} and http.path_parameters == {}


@pytest.mark.parametrize("headers", [{"Content-Type": "text/plain"}, {"CONTENT-TYPE": "text/plain"}])
def test_header_names_are_lower_cased(headers: dict[str, str]) -> None:
    # API Gateway sends them lower-cased already; local mode and tests may not
    assert HttpApiEvent.of({"headers": headers}).headers == {"content-type": "text/plain"}
