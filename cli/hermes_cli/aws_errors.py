"""One clear line for what the AWS SDK raises when a command cannot reach AWS, instead of a traceback.

Each line says what is missing and what to do: the region (botocore reads AWS_DEFAULT_REGION, not
AWS_REGION; the CLI copies AWS_REGION over when only it is set), the credentials, the network (a
failure to connect is a network failure, never "no credentials"), or what AWS refused. A command
that can also work on the running local mode says `--local` is there.
"""

from __future__ import annotations

import os
from typing import Any

REGION_HINT = "set AWS_DEFAULT_REGION (or AWS_REGION, or your profile's region), or run `hermes-gateway --region R ...`"
CREDENTIALS_HINT = "run `aws configure` (or `aws sso login`), or set AWS_PROFILE"
_NO_CREDENTIALS = (
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
    "ProfileNotFound",
    "SSOTokenLoadError",
    "UnauthorizedSSOTokenError",
    "TokenRetrievalError",
)
_UNREACHABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ProxyConnectionError",
    "SSLError",
    "HTTPClientError",
)
_REFUSED_CREDENTIALS = (
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "InvalidSignatureException",
)


def region_from_aws_region() -> None:
    """The AWS CLI v2 and the CDK read AWS_REGION; botocore only AWS_DEFAULT_REGION: when only the
    first is set, this process uses it."""
    if not os.environ.get("AWS_DEFAULT_REGION") and os.environ.get("AWS_REGION"):
        os.environ["AWS_DEFAULT_REGION"] = os.environ["AWS_REGION"]


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _sdk_error(exc: BaseException) -> BaseException | None:
    """The AWS SDK's own exception: `exc`, or the one it wraps (pynamodb's errors keep it as `cause`)."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return None
        if _names(seen) & {"BotoCoreError", "ClientError"}:
            return seen
        wrapped = getattr(seen, "cause", None)
        seen = wrapped if isinstance(wrapped, BaseException) else seen.__cause__
    return None


def aws_error_line(exc: BaseException, *, local: bool | None = None) -> str | None:
    """What went wrong, in one line with the fix; None when `exc` is not the AWS SDK's.

    `local`: None when the command has no `--local`, else whether it was given (a local mode
    that cannot be reached is named as such)."""
    found = _sdk_error(exc)
    if found is None:
        return None
    exc, names = found, _names(found)
    offer_local = "; or add --local to use the running local mode (`make run`)" if local is False else ""
    if "NoRegionError" in names:
        return f"no AWS region: {REGION_HINT}{offer_local}"
    if names & set(_NO_CREDENTIALS):
        return f"no usable AWS credentials ({type(exc).__name__}): {CREDENTIALS_HINT}{offer_local}"
    if names & set(_UNREACHABLE):
        where = str(getattr(exc, "kwargs", {}).get("endpoint_url") or "") or "AWS"
        if local:
            return f"cannot reach the local mode's embedded AWS at {where}: is `make run` still running?"
        return f"cannot reach {where} ({type(exc).__name__}): a network failure; check the connection or proxy"
    if "ClientError" in names:
        return _refused(exc, offer_local)
    return f"the AWS SDK failed: {type(exc).__name__}: {exc}"


def _refused(exc: Any, offer_local: str) -> str:
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    code, message = str(error.get("Code") or "error"), str(error.get("Message") or "")
    operation = str(getattr(exc, "operation_name", "") or "the request")
    if code in _REFUSED_CREDENTIALS:
        return f"AWS refused the credentials ({code}): {CREDENTIALS_HINT}{offer_local}"
    if code.startswith("AccessDenied") or code in ("UnauthorizedOperation", "AuthorizationError"):
        return f"AWS denied {operation} ({code}): the credentials lack the permission. {message}".rstrip()
    return f"AWS refused {operation} ({code}): {message}".rstrip(": ")
