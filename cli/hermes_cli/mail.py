"""`hermes-gateway email receive|status|activate`: e-mail through Amazon SES (docs/platforms/email.md).

- `receive --local FILE.eml`: the running local mode receives a raw RFC 822 message as SES would
  (stored, then the ingress invoked with SES's event; `--verdict spf=FAIL` tries a refusal).
- `status`: the domain's identity in SES (verified? DKIM?), the account's active receipt rule set
  in the region, and whether the gateway's rule is in it.
- `activate`: make the stack's own rule set the active one. An account has one active rule set per
  region: the command says which set is active now and asks before it replaces it (`--yes` does not
  ask). `make deploy` offers the same after a deploy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_cli.target import local_state, stack_outputs, use_local
from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import EMAIL_ADDRESS_OUTPUT, EMAIL_RULE_SET_OUTPUT
from hermes_gateway.resources import MAIL, MEDIA

Ask = Callable[[str], str]


def add_commands(commands: Any) -> None:
    mail = commands.add_parser("email", help="e-mail through SES: receive a file locally, status, activate")
    actions = mail.add_subparsers(dest="action", required=True)

    receive = actions.add_parser("receive", help="the running local mode receives a raw message as SES would")
    receive.add_argument("file", help="a raw RFC 822 message (.eml), or - for standard input")
    receive.add_argument("--local", action="store_true", required=True, help="the running local mode (required)")
    receive.add_argument(
        "--verdict", action="append", default=[], metavar="NAME=STATUS", help="an SES verdict, e.g. spf=FAIL"
    )
    receive.set_defaults(run=_receive)

    status = actions.add_parser("status", help="the domain's SES identity and the active receipt rule set")
    status.add_argument("--stage", default=None, help="the deployed stage (default: gateway.yaml's stage)")
    status.set_defaults(run=_status)

    activate = actions.add_parser("activate", help="make the gateway's receipt rule set the active one (asks first)")
    activate.add_argument("--stage", default=None, help="the deployed stage (default: gateway.yaml's stage)")
    activate.add_argument("--yes", action="store_true", help="do not ask")
    activate.set_defaults(run=_activate)


def _receive(args: argparse.Namespace) -> int:
    from hermes_local.ses import parse_verdicts, receive

    try:
        verdicts = parse_verdicts(args.verdict)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    raw = sys.stdin.buffer.read() if args.file == "-" else _read(args.file)
    state = local_state()
    address = state.get("email_address")
    if not address:
        print("error: the running local mode does not receive e-mail (set EMAIL_ENABLED and EMAIL_ADDRESS)")
        return 2
    bindings = use_local()
    ses_id = receive(
        raw,
        bucket=bindings.bucket(MEDIA.name),
        function_arn=bindings.function("ingress"),
        address=str(address),
        verdicts=verdicts,
    )
    print(json.dumps({"ok": True, "ses_message_id": ses_id, "stored_as": MAIL.prefix + ses_id}))
    return 0


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _deployed(args: argparse.Namespace) -> tuple[str, str, str]:
    """The stage, the rule set the gateway's rule is in, and the receiving address."""
    from hermes_gateway.settings import load_settings_file

    stage = args.stage or load_settings_file(Path("gateway.yaml")).stage
    outputs = stack_outputs(stage)
    if EMAIL_RULE_SET_OUTPUT not in outputs:
        raise ConfigError(f"the stage {stage} does not receive e-mail (platforms.email.enabled, then deploy)")
    return stage, outputs[EMAIL_RULE_SET_OUTPUT], outputs.get(EMAIL_ADDRESS_OUTPUT, "")


def active_rule_set() -> tuple[str | None, list[str]]:
    """The account's active receipt rule set in this region (None: none) and its rules' names."""
    import boto3

    found = boto3.client("ses").describe_active_receipt_rule_set()
    name = (found.get("Metadata") or {}).get("Name")
    return name, [rule.get("Name", "") for rule in found.get("Rules") or ()]


def identity_status(domain: str) -> tuple[bool, str]:
    """(verified for sending, one line on the domain's SES identity)."""
    import boto3
    from botocore.exceptions import ClientError

    try:
        found = boto3.client("sesv2").get_email_identity(EmailIdentity=domain)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NotFoundException":
            return False, f"{domain} is not an SES identity in this region yet (docs/platforms/email.md, step 1)"
        raise
    verified = bool(found.get("VerifiedForSendingStatus"))
    dkim = (found.get("DkimAttributes") or {}).get("Status", "unknown")
    state = found.get("VerificationStatus", "unknown")
    return verified, f"{domain}: verification {state}, DKIM {dkim}" + ("" if verified else " (not verified yet)")


def _status(args: argparse.Namespace) -> int:
    stage, rule_set, address = _deployed(args)
    domain = address.rpartition("@")[2]
    verified, line = identity_status(domain)
    active, rules = active_rule_set()
    ours = MAIL.name(stage)
    print(f"identity   {line}")
    print(f"address    {address}")
    print(f"rule set   {rule_set} (the gateway's rule: {ours})")
    if active == rule_set and ours in rules:
        print(f"receiving  yes: {active} is the active rule set and holds the rule")
        return 0 if verified else 1
    print(f"receiving  no: the active rule set is {active or 'none'}; `hermes-gateway email activate` fixes it")
    return 1


def _activate(args: argparse.Namespace) -> int:
    _, rule_set, _ = _deployed(args)
    return activate(rule_set, ask=None if args.yes else input)


def activate(rule_set: str, ask: Ask | None) -> int:
    """Make `rule_set` the region's active receipt rule set, after saying which one is active now
    and asking (`ask` None: without asking)."""
    import boto3

    active, rules = active_rule_set()
    if active == rule_set:
        print(f"{rule_set} is already the active receipt rule set")
        return 0
    if active:
        print(
            f"The active receipt rule set in this region is {active} ({len(rules)} rule(s)). An account has one "
            f"active rule set per region: activating {rule_set} stops the mail {active}'s rules receive. To keep "
            f"them, set platforms.email.rule_set: {active} and deploy again instead (the gateway's rule joins it)."
        )
    else:
        print(f"No receipt rule set is active in this region: SES receives no mail until one is ({rule_set}).")
    if ask is not None and ask(f"Activate {rule_set}? [y/N] ").strip().lower() not in ("y", "yes"):
        print("not activated")
        return 1
    boto3.client("ses").set_active_receipt_rule_set(RuleSetName=rule_set)
    print(f"{rule_set} is now the active receipt rule set")
    return 0
