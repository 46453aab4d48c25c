"""The fields of an API Gateway HTTP API event (payload format 2.0) the webhook and session API
functions read, straight from the event.

Powertools' `APIGatewayProxyEventV2` reads the same keys, but importing it loads every event class
of `utilities.data_classes` (about 20 ms of the ingress's cold start, which a platform waits on),
for eight dictionary lookups.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HttpApiEvent:
    method: str  # upper case
    raw_path: str
    raw_query: str
    headers: Mapping[str, str]  # lower-cased names, repeated ones comma-joined (as API Gateway sends them)
    query: Mapping[str, str]  # repeated names comma-joined
    path_parameters: Mapping[str, str]
    body: str | None
    is_base64_encoded: bool

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> HttpApiEvent:
        """Missing keys read as empty (API Gateway leaves out `body`, `queryStringParameters` and
        `pathParameters` when there are none)."""
        http = (event.get("requestContext") or {}).get("http") or {}
        body = event.get("body")
        return cls(
            method=str(http.get("method") or "").upper(),
            raw_path=str(event.get("rawPath") or ""),
            raw_query=str(event.get("rawQueryString") or ""),
            headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            query={str(k): str(v) for k, v in (event.get("queryStringParameters") or {}).items()},
            path_parameters={str(k): str(v) for k, v in (event.get("pathParameters") or {}).items()},
            body=body if isinstance(body, str) else None,
            is_base64_encoded=bool(event.get("isBase64Encoded")),
        )
