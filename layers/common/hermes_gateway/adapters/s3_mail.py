"""The e-mail SES stored (domain.ports.MailStore) on S3: the media bucket's `resources.MAIL` prefix.

Reads are bounded before any byte is read: the object's size comes with its GET's headers, and a
message larger than the caller's bound is closed unread. An attachment is one ranged GET of its
encoded bytes, never the whole message.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from hermes_gateway.domain.ports import MessageTooLarge
from hermes_gateway.errors import TransientError

_THROTTLED = ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling")
_MISSING = ("NoSuchKey", "404", "NotFound")


class S3MailStore:
    def __init__(self, bucket: str, region: str | None = None) -> None:
        self.bucket = bucket
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("s3", region_name=self._region)

    def read(self, key: str, limit: int) -> bytes | None:
        answer = self._get(key)
        if answer is None:
            return None
        body = answer["Body"]
        size = int(answer.get("ContentLength") or 0)
        if size > limit:
            body.close()
            raise MessageTooLarge(size, limit)
        data: bytes = body.read(limit + 1)
        body.close()
        if len(data) > limit:  # (a length the headers understated)
            raise MessageTooLarge(len(data), limit)
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        if end <= start:
            return b""
        answer = self._get(key, f"bytes={start}-{end - 1}")
        if answer is None:
            return None
        data: bytes = answer["Body"].read(end - start)
        answer["Body"].close()
        return data

    def delete(self, key: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            raise _error(exc, "delete") from None

    def _get(self, key: str, byte_range: str | None = None) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            answer: dict[str, Any] = self._client.get_object(
                Bucket=self.bucket, Key=key, **({"Range": byte_range} if byte_range else {})
            )
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING:
                return None
            raise _error(exc, "read") from None
        return answer


def _error(exc: Any, what: str) -> Exception:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in _THROTTLED or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
        return TransientError(f"stored mail {what}: {code}")
    return RuntimeError(f"stored mail {what} failed: {code}")
