"""Secrets: bot tokens, webhook secrets, model API keys.

Deployed: SSM Parameter Store SecureString parameters named `<HERMES_SECRETS_PREFIX><NAME>`,
read with Powertools Parameters and cached, so a rotation needs no redeploy. Local mode: the
environment variable of the same name. A secret is never logged, stored or put in a template.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hermes_gateway.resources import SECRET_NAMES

CACHE_SECONDS = 300


class Secrets:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = os.environ if env is None else env

    def get(self, name: str) -> str | None:
        """The secret's value, or None when it is not set anywhere."""
        if name not in SECRET_NAMES:
            raise KeyError(f"unknown secret {name!r}")
        value = self._env.get(name)
        if value:
            return value
        prefix = self._env.get("HERMES_SECRETS_PREFIX")
        if not prefix:
            return None
        from aws_lambda_powertools.utilities import parameters

        try:
            fetched = parameters.get_parameter(prefix + name, decrypt=True, max_age=CACHE_SECONDS)
        except parameters.exceptions.GetParameterError:
            return None
        return str(fetched) if fetched else None
