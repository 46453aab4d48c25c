"""Which deployment a CLI command talks to: a running local mode (`--local`) or a deployed stack.

Local mode writes a small state file while it runs (its embedded AWS endpoint and resource
names); a deployed stack is found by its name, `HermesGateway-<stage>`, and its outputs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import function_output_key, queue_output_key, stack_name, table_output_key
from hermes_gateway.resources import FUNCTIONS, QUEUES, TABLES, Bindings

if TYPE_CHECKING:
    from hermes_gateway.domain.events import LoggedEvents
    from hermes_gateway.settings import Settings

LOCAL_STATE_ENV = "HERMES_LOCAL_STATE"


def local_state_path() -> Path:
    """Where a running local mode says how to reach it (override with HERMES_LOCAL_STATE)."""
    override = os.environ.get(LOCAL_STATE_ENV)
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "hermes-gateway" / "local.json"


def write_local_state(state: dict[str, Any]) -> Path:
    path = local_state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: it holds local mode's session API token.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode on open
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(json.dumps(state, indent=2))
    return path


def remove_local_state(pid: int) -> None:
    path = local_state_path()
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def local_state() -> dict[str, Any]:
    """What the running local mode wrote about itself (its URL, platforms, embedded AWS)."""
    path = local_state_path()
    try:
        state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(f"no running local mode found ({path} is missing): start it with `make run`") from None
    return state


def use_local() -> Bindings:
    """Point this process's AWS clients at the running local mode; return its resource names."""
    state = local_state()
    os.environ.update(state["aws_environment"])
    return Bindings.from_env(state["resources"])


def stack_outputs(stage: str) -> dict[str, str]:
    """The deployed stack's outputs (your AWS credentials and region)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = boto3.client("cloudformation").describe_stacks(StackName=stack_name(stage))["Stacks"]
    except (BotoCoreError, ClientError) as exc:
        raise ConfigError(f"cannot read stack {stack_name(stage)}: {exc}") from None
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


def use_deployed(stage: str) -> Bindings:
    """The deployed stack's table names and queue URLs, from its outputs."""
    outputs = stack_outputs(stage)
    env = {t.env_var: outputs[table_output_key(t.name)] for t in TABLES if table_output_key(t.name) in outputs}
    env.update({q.env_var: outputs[queue_output_key(q.name)] for q in QUEUES if queue_output_key(q.name) in outputs})
    env.update(
        {f.env_var: outputs[function_output_key(f.name)] for f in FUNCTIONS if function_output_key(f.name) in outputs}
    )
    return Bindings.from_env(env)


def add_target_arguments(parser: Any) -> None:
    """`--local` (the running local mode) or `--stage S` (a deployed stack; default gateway.yaml's)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="the running local mode (`make run`)")
    where.add_argument("--stage", default=None, help="the deployed stage (default: gateway.yaml's stage)")


def bindings_for(args: Any) -> Bindings:
    """The resources a command works on, from its `--local` / `--stage` arguments."""
    if args.local:
        return use_local()
    stage = args.stage
    if stage is None:
        from hermes_gateway.settings import load_settings_file

        stage = load_settings_file(Path("gateway.yaml")).stage
    return use_deployed(stage)


class _CurrentStandardError(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a line is written, not when the handler was made:
    the CLI's logger is one per process (Powertools keeps the first handler of a service name)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def cli_events() -> LoggedEvents:
    """Lifecycle events the CLI causes (a pairing approved, a job run), as JSON lines on standard
    error, so standard output stays the command's answer."""
    from aws_lambda_powertools import Logger

    from hermes_gateway.domain.events import LoggedEvents

    return LoggedEvents(Logger(service="hermes-gateway-cli", level="INFO", logger_handler=_CurrentStandardError()))


def profile_settings(settings: Settings, name: str | None) -> Settings:
    """The settings of the profile `--profile NAME` picks (None, or the deployment's own name: the
    deployment's); a clear error for a profile the configuration does not declare."""
    from hermes_gateway.errors import UnknownProfile

    try:
        return settings.for_profile(name)
    except UnknownProfile:
        known = ", ".join(settings.profiles) or "none"
        raise ConfigError(f"no profile {name!r} in the configuration (named profiles: {known})") from None
