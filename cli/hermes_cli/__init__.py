"""`hermes-gateway`: the operator's command line.

`hermes-gateway local` runs the whole gateway on this machine (what `make run` starts); the other
commands (pairing, outbox, webhooks, secrets, send, deploy, config, logs, sessions, explain,
session-key, cron) work on a deployed stack or, with `--local`, on the running local mode.

The operator's side only: this package is installed on the operator's machine and never shipped
in the Lambda layer, which carries `hermes_gateway` alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path

from hermes_cli import (
    config,
    cron,
    deploy,
    explain,
    logs,
    outbox,
    pairing,
    secrets,
    send,
    sessions,
    webhooks,
)
from hermes_gateway.errors import ConfigError


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
    elapsed = time.perf_counter() - started
    env = os.environ
    provider = env.get("GATEWAY_PROVIDER", "echo")
    print(f"Hermes Gateway local mode is up in {elapsed:.1f}s (config: {config if config.exists() else 'defaults'})")
    print(f"  web chat         {gateway.url}/")
    for name in gateway.enabled_platforms():
        if name != "webchat":
            print(f"  {name} webhook{' ' * max(1, 8 - len(name))}{gateway.url}/webhooks/{name}")
    for profile, platforms in gateway.profile_platforms().items():
        for name in platforms:
            print(f"  {name} webhook ({profile}) {gateway.url}/p/{profile}/webhooks/{name}")
    print(f"  outbox           {gateway.url}/local/outbox  (header x-hermes-local-token: WEBCHAT_TOKEN)")
    print(f"  health           {gateway.url}/local/health")
    print(f"  embedded AWS     {env['AWS_ENDPOINT_URL']}  (moto; aws --endpoint-url works)")
    print(f"  provider         {provider}{' / ' + env.get('GATEWAY_MODEL', '') if provider != 'echo' else ''}")
    print("Local secrets (generated unless set in the environment):")
    for name, value in gateway.shown_secrets().items():
        print(f"  {name}={value}")
    telegram_sends = (
        "really sends to " + env["TELEGRAM_API_BASE_URL"]
        if env.get("TELEGRAM_BOT_TOKEN")
        else ("records replies in the outbox only (no TELEGRAM_BOT_TOKEN)")
    )
    print(f"  Telegram delivery {telegram_sends}")
    for notice in gateway.notices:
        print(f"Note: {notice}")
    print("Press Ctrl+C to stop.", flush=True)

    stopped = threading.Event()
    # Both set explicitly: a shell script's background job starts with SIGINT ignored.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda *_: stopped.set())
    while not stopped.wait(0.5):
        pass
    gateway.stop()
    print("stopped")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-gateway", description=__doc__.splitlines()[0])
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
