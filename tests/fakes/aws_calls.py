"""Every AWS call a block of code makes, seen at botocore's one door (`BaseClient._make_api_call`,
which boto3's resource layer and every client go through)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def aws_calls(fail: Callable[[str, str], Exception | None] | None = None) -> Iterator[list[tuple[str, str]]]:
    """Every AWS call made inside, as (service, operation); `fail(service, operation)` may return an
    error to raise instead of the call."""
    from botocore.client import BaseClient

    original = BaseClient._make_api_call
    made: list[tuple[str, str]] = []

    def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
        service = client.meta.service_model.service_name
        made.append((service, operation))
        error = fail(service, operation) if fail else None
        if error is not None:
            raise error
        return original(client, operation, params)

    BaseClient._make_api_call = counted  # type: ignore[method-assign]
    try:
        yield made
    finally:
        BaseClient._make_api_call = original  # type: ignore[method-assign]
