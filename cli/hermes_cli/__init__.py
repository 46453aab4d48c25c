"""`hermes-gateway`: the operator's command line.

`hermes-gateway local` runs the whole gateway on this machine (what `make run` starts); the other
commands (pairing, outbox, webhooks, secrets, send, deploy, config, logs, sessions, explain,
session-key, cron, users) work on a deployed stack or, with `--local`, on the running local mode.

The operator's side only: this package is installed on the operator's machine and never shipped
in the Lambda layer, which carries `hermes_gateway` alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_cli import (
    config,
    cron,
    deploy,
    explain,
    logs,
    mail,
    outbox,
    pairing,
    secrets,
    send,
    sessions,
    users,
    webhooks,
)
from hermes_cli.aws_errors import aws_error_line, region_from_aws_region
from hermes_gateway.errors import ConfigError

if TYPE_CHECKING:
    from hermes_local.runtime import LocalGateway


def _run_local(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("moto") is None:
        # moto is the `local` extra, not a dependency of the gateway itself (`make install` has it).
        needs = "local mode needs moto, its embedded AWS: pip install 'hermes-serverless-gateway[local]'"
        print(needs, file=sys.stderr)
        return 2
    from hermes_local.runtime import LocalGateway

    config = Path(args.config) if args.config else Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml"))
    port = args.port if args.port is not None else int(os.environ.get("GATEWAY_PORT", "8080"))
    started = time.perf_counter()
    gateway = LocalGateway(port=port, config_path=config, tick_seconds=args.tick_seconds)
    try:
        gateway.start()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"cannot start local mode on port {port}: {exc}", file=sys.stderr)
        return 1
    for line in local_banner(gateway, config, time.perf_counter() - started):
        print(line)
    print("Press Ctrl+C to stop.", flush=True)
    stop = StopSignals().install()
    stop.wait()
    gateway.stop()
    print("stopped")
    return 0


def local_banner(gateway: LocalGateway, config: Path, elapsed: float) -> list[str]:
    """What `hermes-gateway local` prints once it is up, read from the settings the gateway runs
    with (the environment's settings variables are moved into its settings file at start)."""
    from hermes_gateway.platforms import catalog

    settings = gateway.settings
    assert settings is not None, "the gateway is started"
    lines = [
        f"Hermes Gateway local mode is up in {elapsed:.1f}s (config: {config if config.exists() else 'defaults'})",
        f"  web chat         {gateway.url}/",
    ]
    for name in gateway.enabled_platforms():
        spec = catalog.spec(name)
        if name != "webchat" and spec is not None and spec.webhook:
            lines.append(f"  {name} webhook{' ' * max(1, 8 - len(name))}{gateway.url}/webhooks/{name}")
    if gateway.email_address():
        lines.append(f"  e-mail           {gateway.email_address()}: hermes-gateway email receive --local <file.eml>")
    for profile, platforms in gateway.profile_platforms().items():
        lines += [f"  {name} webhook ({profile}) {gateway.url}/p/{profile}/webhooks/{name}" for name in platforms]
    provider = settings.provider
    lines += [
        f"  outbox           {gateway.url}/local/outbox  (header x-hermes-local-token: WEBCHAT_TOKEN)",
        f"  health           {gateway.url}/local/health",
        f"  embedded AWS     {gateway.aws_endpoint}  (moto; aws --endpoint-url works)",
        f"  provider         {provider.name}" + (f" / {provider.model}" if provider.name != "echo" else ""),
        "Local secrets (generated unless set in the environment):",
        *(f"  {name}={value}" for name, value in gateway.shown_secrets().items()),
    ]
    telegram = settings.platforms.get("telegram")
    if telegram is not None and telegram.enabled:
        sends = (
            f"really sends to {telegram.api_base_url}"
            if gateway.base_environ.get("TELEGRAM_BOT_TOKEN")
            else "records replies in the outbox only (no TELEGRAM_BOT_TOKEN)"
        )
        lines.append(f"  Telegram delivery {sends}")
    lines += [f"Note: {notice}" for notice in gateway.notices]
    return lines


class StopSignals:
    """SIGINT and SIGTERM, counted: `wait` returns once one came.

    The handler takes no lock. Python runs a handler in the main thread between two bytecodes, so
    a handler that takes a lock (`threading.Event.set`) deadlocks when a second signal arrives
    while the first handler holds it, and `make` forwards a stop to the whole process group, so
    two come at once. A signal that comes while the gateway stops is counted and changes nothing."""

    POLL_SECONDS = 0.2

    def __init__(self) -> None:
        self.received = 0

    def install(self) -> StopSignals:
        # Both set explicitly: a shell script's background job starts with SIGINT ignored.
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.received += 1

    def wait(self) -> None:
        while not self.received:
            time.sleep(self.POLL_SECONDS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--region", default=None, help="a deployed stack's AWS region (default: AWS_DEFAULT_REGION)")
    commands = parser.add_subparsers(dest="command", required=True)
    local = commands.add_parser("local", help="run the whole gateway locally on 127.0.0.1 with an embedded AWS")
    local.add_argument("--port", type=int, default=None, help="HTTP port (default $GATEWAY_PORT or 8080)")
    local.add_argument("--config", default=None, help="settings file (default $GATEWAY_CONFIG or ./gateway.yaml)")
    local.add_argument("--tick-seconds", type=float, default=60.0, help="how often scheduled work runs")
    local.set_defaults(run=_run_local)
    pairing.add_commands(commands)
    outbox.add_commands(commands)
    webhooks.add_commands(commands)
    secrets.add_commands(commands)
    send.add_commands(commands)
    deploy.add_commands(commands)
    config.add_commands(commands)
    logs.add_commands(commands)
    sessions.add_commands(commands)
    explain.add_commands(commands)
    cron.add_commands(commands)
    mail.add_commands(commands)
    users.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.region:
        os.environ["AWS_DEFAULT_REGION"] = args.region
    region_from_aws_region()
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # What the AWS SDK raises (no region, no credentials, no network, refused): one line
        line = aws_error_line(exc, local=getattr(args, "local", None))
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
