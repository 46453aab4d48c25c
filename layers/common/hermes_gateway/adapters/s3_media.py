"""The media bucket (domain.ports.MediaStore, ErasableMedia) on S3: one object per attachment, put once.

The bucket itself encrypts (SSE-S3), blocks public access, refuses plain HTTP and expires objects
after `media.retention_days` (infra/capabilities/media.py); these calls need nothing more.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, BinaryIO

from hermes_gateway.errors import TransientError

_THROTTLED = ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling")


class S3MediaStore:
    def __init__(self, bucket: str, region: str | None = None) -> None:
        self.bucket = bucket
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3
        from botocore.config import Config

        # Pre-signed URLs must carry SigV4 and the regional endpoint (a platform fetches them).
        return boto3.client("s3", region_name=self._region, config=Config(signature_version="s3v4"))

    def put(self, key: str, data: bytes, mime: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType=mime or "application/octet-stream"
            )
        except ClientError as exc:
            raise _error(exc, "put") from None

    def put_file(self, key: str, file: BinaryIO, mime: str) -> None:
        from botocore.exceptions import ClientError

        try:  # a seekable file body is streamed by botocore, never read whole
            self._client.put_object(
                Bucket=self.bucket, Key=key, Body=file, ContentType=mime or "application/octet-stream"
            )
        except ClientError as exc:
            raise _error(exc, "put") from None

    def head(self, key: str) -> tuple[int, str] | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise _error(exc, "head") from None
        return int(answer.get("ContentLength") or 0), str(answer.get("ContentType") or "application/octet-stream")

    def get(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise _error(exc, "get") from None
        return answer["Body"].read(), str(answer.get("ContentType") or "application/octet-stream")

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (ListObjectsV2, a page of 1000 at a time: s3:ListBucket)."""
        from botocore.exceptions import ClientError

        found: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        try:
            while True:
                page = self._client.list_objects_v2(**kwargs)
                found += [str(o["Key"]) for o in page.get("Contents", [])]
                if not page.get("IsTruncated"):
                    return found
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except ClientError as exc:
            raise _error(exc, "list") from None

    def delete(self, keys: list[str]) -> int:
        """DeleteObjects, 1000 keys a request (s3:DeleteObject; a missing key is no error)."""
        from botocore.exceptions import ClientError

        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 1000):
            batch = [{"Key": key} for key in unique[start : start + 1000]]
            try:
                answer = self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except ClientError as exc:
                raise _error(exc, "delete") from None
            if answer.get("Errors"):
                codes = sorted({str(e.get("Code")) for e in answer["Errors"]})
                raise TransientError(f"media bucket delete: {len(answer['Errors'])} keys not deleted ({codes})")
        return len(unique)

    def url(self, key: str, expires_seconds: int) -> str:
        return str(
            self._client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_seconds
            )
        )

    def upload_url(self, key: str, mime: str, size: int, expires_seconds: int) -> str:
        """A pre-signed PUT URL for exactly `size` bytes of type `mime` (both signed: S3 refuses
        an upload of another length or type), for a client that uploads a file itself (the
        Signal forwarder)."""
        return str(
            self._client.generate_presigned_url(
                "put_object",
                Params={"Bucket": self.bucket, "Key": key, "ContentType": mime, "ContentLength": size},
                ExpiresIn=expires_seconds,
            )
        )


def _error(exc: Any, what: str) -> Exception:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in _THROTTLED or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
        return TransientError(f"media bucket {what}: {code}")
    return RuntimeError(f"media bucket {what} failed: {code}")
