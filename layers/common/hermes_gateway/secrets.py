"""Secrets: bot tokens, webhook secrets, model API keys.

Deployed: SSM Parameter Store SecureString parameters named `<HERMES_SECRETS_PREFIX><NAME>`,
read with Powertools Parameters and cached, so a rotation needs no redeploy. Local mode: the
environment variable of the same name. A secret is never logged, stored or put in a template.

Only SSM's ParameterNotFound means "not set". Throttling (the standard throughput is 40 reads a
second, shared by the account) and SSM's own failures raise TransientError: the ingress answers
503 and the platform retries, a delivery is retried. Anything else (access denied, a KMS key that
refuses, no credentials) raises SecretUnreadable with an error log naming the secret, never its
value: a misconfiguration, to be seen and fixed, not a request to refuse.

A named profile (a second bot) has its own secrets, `<NAME>__<PROFILE>` (`TELEGRAM_BOT_TOKEN__CODER`).
A platform's secrets are the profile's own or none: a second bot never verifies or sends with the
first one's token. Other secrets (the model's API key, Honcho's) fall back to the deployment's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hermes_gateway.errors import SecretUnreadable, TransientError
from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.resources import SECRET_NAMES

CACHE_SECONDS = 300
NOT_SET_CODES = frozenset({"ParameterNotFound"})
# SSM's "ask again shortly": throttling, and its own server-side failures.
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "RequestTimeout",
    }
)
# A bot's own credentials: never borrowed from the deployment's profile.
PLATFORM_SECRETS = frozenset(name for spec in CATALOG for name in spec.secrets)


def profile_secret_name(name: str, profile: str | None) -> str:
    """The parameter (and local environment variable) holding a profile's value of a secret."""
    return f"{name}__{profile.upper()}" if profile else name


class Secrets:
    def __init__(self, env: Mapping[str, str] | None = None, profile: str | None = None) -> None:
        self._env = os.environ if env is None else env
        self.profile = profile

    def for_profile(self, profile: str | None) -> Secrets:
        """The secrets as a named profile reads them (None: the deployment's own)."""
        return self if profile == self.profile else Secrets(self._env, profile)

    def get(self, name: str) -> str | None:
        """The secret's value, or None when it is not set anywhere."""
        if name not in SECRET_NAMES:
            raise KeyError(f"unknown secret {name!r}")
        if self.profile:
            own = self._read(profile_secret_name(name, self.profile))
            if own is not None or name in PLATFORM_SECRETS:
                return own
        return self._read(name)

    def _read(self, name: str) -> str | None:
        value = self._env.get(name)
        if value:
            return value
        prefix = self._env.get("HERMES_SECRETS_PREFIX")
        if not prefix:
            return None
        from aws_lambda_powertools.utilities import parameters

        try:
            fetched = parameters.get_parameter(prefix + name, decrypt=True, max_age=CACHE_SECONDS)
        except parameters.exceptions.GetParameterError as exc:
            failure = _failure(name, exc)
            if failure is None:
                return None
            raise failure from None
        return str(fetched) if fetched else None


def _failure(name: str, exc: Exception) -> Exception | None:
    """What a failed read means: None (the parameter does not exist), TransientError (try again)
    or SecretUnreadable (a misconfiguration, logged as an error)."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    from hermes_gateway.observability import logger

    # Powertools wraps every SDK error in GetParameterError, raised while handling the original.
    cause = exc.__cause__ or exc.__context__
    code = ""
    if isinstance(cause, ClientError):
        code = str(cause.response.get("Error", {}).get("Code") or "")
        if code in NOT_SET_CODES:
            return None
        status = cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in TRANSIENT_CODES or (isinstance(status, int) and status >= 500):
            logger.warning("secret not read: SSM asked to retry", extra={"secret": name, "code": code})
            return TransientError(f"the secret {name} could not be read just now ({code}); retrying")
    elif isinstance(cause, HTTPClientError | ConnectionError):
        logger.warning("secret not read: SSM unreachable", extra={"secret": name, "error": type(cause).__name__})
        return TransientError(f"the secret {name} could not be read just now (SSM unreachable); retrying")
    reason = code or type(cause or exc).__name__
    logger.error(
        "secret unreadable: check the function's role and the parameter's KMS key",
        extra={"secret": name, "code": reason, "detail": str(cause or exc)[:300]},
    )
    return SecretUnreadable(f"the secret {name} cannot be read ({reason}): check the role and the KMS key")
