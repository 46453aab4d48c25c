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
from hermes_gateway.outputs import (
    bucket_output_key,
    function_output_key,
    queue_output_key,
    stack_name,
    table_output_key,
)
from hermes_gateway.resources import BUCKETS, FUNCTIONS, QUEUES, TABLES, Bindings

if TYPE_CHECKING:
    from hermes_gateway.domain.events import LoggedEvents
    from hermes_gateway.settings import Settings

LOCAL_STATE_ENV = "HERMES_LOCAL_STATE"
PORT_ENV = "GATEWAY_PORT"
DEFAULT_PORT = 8080
START_HINT = "start it with `make run`"


def _state_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hermes-gateway"


def local_state_path(port: int) -> Path:
    """Where the local mode on `port` says how to reach it: one file per port, so a second local
    mode (another `make run`, a test's) never overwrites the first one's. HERMES_LOCAL_STATE names
    one file instead, for that local mode and the commands that should talk to it."""
    override = os.environ.get(LOCAL_STATE_ENV)
    return Path(override) if override else _state_dir() / f"local-{port}.json"


def write_local_state(state: dict[str, Any], port: int) -> Path:
    path = local_state_path(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: it holds local mode's session API token.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode on open
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(json.dumps(state, indent=2))
    return path


def remove_local_state(path: Path, pid: int) -> None:
    """Remove the state file a local mode wrote, unless another one (same path) has written it since."""
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def _read(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _alive(state: dict[str, Any]) -> bool:
    """Whether the process that wrote the state runs (a state without a pid is taken as it is)."""
    pid = state.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return "pid" not in state
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it runs
    return True


def _port_of(path: Path) -> str:
    return path.stem.removeprefix("local-")


def local_state() -> dict[str, Any]:
    """What the running local mode wrote about itself (its URL, platforms, embedded AWS): the one
    HERMES_LOCAL_STATE names, else the one on GATEWAY_PORT (8080 by default, as `make run`), else
    the only one running. A clear ConfigError when there is none, when it is gone, or when several
    run and GATEWAY_PORT does not say which."""
    override = os.environ.get(LOCAL_STATE_ENV)
    port = os.environ.get(PORT_ENV) or str(DEFAULT_PORT)
    path = Path(override) if override else _state_dir() / f"local-{port}.json"
    state = _read(path)
    if state is not None and _alive(state):
        return state
    if state is not None:
        gone = f"the local mode on port {_port_of(path)} (pid {state.get('pid')}) is not running any more"
        if not override:
            path.unlink(missing_ok=True)
        raise ConfigError(f"{gone}: {START_HINT}")
    if override or os.environ.get(PORT_ENV):
        raise ConfigError(f"no running local mode found ({path} is missing): {START_HINT}")
    running = {}
    for other in sorted(_state_dir().glob("local-*.json")):
        found = _read(other)
        if found is not None and _alive(found):
            running[_port_of(other)] = found
        elif found is not None:
            other.unlink(missing_ok=True)  # a local mode that ended without a word (killed)
    if len(running) == 1:
        return next(iter(running.values()))
    if running:
        ports = ", ".join(sorted(running, key=lambda p: int(p) if p.isdigit() else 0))
        raise ConfigError(f"several local modes are running (ports {ports}): set {PORT_ENV} to the one you mean")
    raise ConfigError(f"no running local mode found: {START_HINT}")


def use_local() -> Bindings:
    """Point this process's AWS clients at the running local mode; return its resource names."""
    state = local_state()
    os.environ.update(state["aws_environment"])
    return Bindings.from_env(state["resources"])


def stack_outputs(stage: str) -> dict[str, str]:
    """The deployed stack's outputs (your AWS credentials and region). A stack that is not there is
    a ConfigError; no region, credentials or network reach the caller as the AWS SDK raised them
    (the CLI's `main` says each in one line)."""
    import boto3
    from botocore.exceptions import ClientError

    try:
        stacks = boto3.client("cloudformation").describe_stacks(StackName=stack_name(stage))["Stacks"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ValidationError":
            raise
        region = boto3.session.Session().region_name
        raise ConfigError(
            f"no stack {stack_name(stage)} in {region}: deploy it (`make deploy`), pick another --stage "
            "or --region, or add --local for the running local mode"
        ) from None
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


def use_deployed(stage: str) -> Bindings:
    """The deployed stack's table names and queue URLs, from its outputs."""
    outputs = stack_outputs(stage)
    env = {t.env_var: outputs[table_output_key(t.name)] for t in TABLES if table_output_key(t.name) in outputs}
    env.update({q.env_var: outputs[queue_output_key(q.name)] for q in QUEUES if queue_output_key(q.name) in outputs})
    env.update(
        {f.env_var: outputs[function_output_key(f.name)] for f in FUNCTIONS if function_output_key(f.name) in outputs}
    )
    env.update({b.env_var: outputs[bucket_output_key(b.name)] for b in BUCKETS if bucket_output_key(b.name) in outputs})
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
