"""`hermes-gateway deploy [--check]`: check every prerequisite, then `cdk deploy` the stage.

Checked in order, each with what to do when it fails: `gateway.yaml` is valid (the key and the
reason), Node.js 18 or newer for the CDK CLI, AWS credentials and a region, the CDK bootstrap
stack in that account and region, for a stack deployed before the inbox, that its old queues
are empty (the update removes them with whatever they hold), and with e-mail on, that SES receives
mail in the region and how the domain's SES identity stands. `--check` stops after the checks.
After a deploy with e-mail on, it offers to activate the stack's receipt rule set (asking first).
The deploy itself is the CDK CLI (`npx aws-cdk@2 deploy`), which shows IAM changes for approval
before it applies them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.config import deploy_warnings
from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import LEGACY_QUEUES, queue_output_key, stack_name
from hermes_gateway.settings import load_settings_file

CDK_CLI = "aws-cdk@2"
BOOTSTRAP_STACK = "CDKToolkit"
MIN_NODE = 18
Run = Callable[[list[str]], str]  # runs a command, returns its standard output (raises on failure)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warning: bool = False  # ok, but worth the operator's attention (shown as "WARN")


def add_commands(commands: Any) -> None:
    deploy = commands.add_parser("deploy", help="check the prerequisites, then cdk deploy the stage")
    deploy.add_argument("--stage", default=None, help="the stage (default: gateway.yaml's stage)")
    deploy.add_argument("--check", action="store_true", help="only check the prerequisites")
    deploy.set_defaults(run=_deploy)


def _run(command: list[str]) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout  # noqa: S603


def check_config(config: Path) -> tuple[Check, str | None]:
    try:
        settings = load_settings_file(config)
    except ConfigError as exc:
        return Check("gateway.yaml", False, str(exc)), None
    where = str(config) if config.exists() else "defaults (no gateway.yaml)"
    return Check("gateway.yaml", True, f"valid: {where}, stage {settings.stage}"), settings.stage


def check_node(run: Run = _run, which: Callable[[str], str | None] = shutil.which) -> Check:
    if which("node") is None or which("npx") is None:
        return Check("Node.js", False, f"not found: install Node.js {MIN_NODE} or newer (the CDK CLI runs on it)")
    try:
        version = run(["node", "--version"]).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("Node.js", False, f"`node --version` failed: {exc}")
    match = re.match(r"v?(\d+)", version)
    if not match or int(match.group(1)) < MIN_NODE:
        return Check("Node.js", False, f"{version} is too old: the CDK CLI needs Node.js {MIN_NODE} or newer")
    return Check("Node.js", True, version)


def check_aws() -> tuple[Check, str | None, str | None]:
    """Credentials and a region, asked of STS; what fails is said as it is (no region, no
    credentials, refused credentials, or no network: each with its fix)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from hermes_cli.aws_errors import REGION_HINT, aws_error_line

    region = boto3.session.Session().region_name
    if not region:
        return Check("AWS", False, f"no region: {REGION_HINT}"), None, None
    try:
        account = str(boto3.client("sts", region_name=region).get_caller_identity()["Account"])
    except (BotoCoreError, ClientError) as exc:
        return Check("AWS", False, aws_error_line(exc) or f"{type(exc).__name__}: {exc}"), None, None
    return Check("AWS", True, f"account {account}, region {region}"), account, region


def check_bootstrap(account: str, region: str) -> Check:
    import boto3
    from botocore.exceptions import ClientError

    try:
        stacks = boto3.client("cloudformation", region_name=region).describe_stacks(StackName=BOOTSTRAP_STACK)
    except ClientError:
        return Check("CDK bootstrap", False, f"missing: run `npx {CDK_CLI} bootstrap aws://{account}/{region}`")
    status = stacks["Stacks"][0]["StackStatus"]
    if status.endswith("_FAILED") or status.startswith("DELETE"):
        return Check("CDK bootstrap", False, f"{BOOTSTRAP_STACK} is {status}: fix or re-run bootstrap")
    return Check("CDK bootstrap", True, f"{BOOTSTRAP_STACK} {status}")


def check_old_queues(stage: str, region: str) -> Check | None:
    """A stack from before the inbox: each of its old queues must be empty, or the update would
    delete what they hold. None when there is no such stack (a first deploy, or upgraded already)."""
    import boto3
    from botocore.exceptions import ClientError

    try:
        stacks = boto3.client("cloudformation", region_name=region).describe_stacks(StackName=stack_name(stage))
    except ClientError:
        return None  # no stack yet
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks["Stacks"][0].get("Outputs", [])}
    urls = {name: outputs[queue_output_key(name)] for name in LEGACY_QUEUES if queue_output_key(name) in outputs}
    if not urls:
        return None
    sqs = boto3.client("sqs", region_name=region)
    counts = (
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    )
    held = {}
    for name, url in urls.items():
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(counts))["Attributes"]
        held[name] = sum(int(attributes.get(count, 0)) for count in counts)
    busy = {name: count for name, count in held.items() if count}
    if not busy:
        return Check("old queues", True, f"empty ({', '.join(urls)}): the update removes them")
    listed = ", ".join(f"{name} {count}" for name, count in busy.items())
    return Check(
        "old queues",
        False,
        f"still holding messages ({listed}): wait until the inbound and delivery queues drain, and redrive "
        "or purge their dead-letter queues, before the update removes them (docs/operations.md, Upgrading)",
    )


def check_email(config: Path, region: str) -> Check | None:
    """With e-mail on: SES receives mail in the region, and how the domain's identity stands
    (unverified is a warning: the stack deploys, but SES neither receives nor sends for it yet).
    None with e-mail off."""
    from botocore.exceptions import BotoCoreError, ClientError

    from hermes_cli.mail import identity_status
    from hermes_gateway.platforms.email import domain_of
    from hermes_gateway.resources import MAIL

    try:
        email = load_settings_file(config).platform("email")
    except ConfigError:
        return None  # (the configuration's own check says why)
    if email is None:
        return None
    if region not in MAIL.receiving_regions:
        where = ", ".join(sorted(MAIL.receiving_regions))
        return Check("SES e-mail", False, f"SES does not receive e-mail in {region}: deploy to one of {where}")
    try:
        verified, line = identity_status(domain_of(email.options))
    except (BotoCoreError, ClientError) as exc:
        return Check("SES e-mail", True, f"the domain's identity could not be read ({type(exc).__name__})", True)
    return Check("SES e-mail", True, line, warning=not verified)


def offer_activation(config: Path, stage: str, ask: Callable[[str], str] | None) -> None:
    """After a deploy with e-mail on and the stack's own rule set: make it the active one, asking
    first (`ask` None: no terminal to ask at, so only say how)."""
    from hermes_cli.mail import activate

    email = load_settings_file(config).platform("email")
    if email is None or email.options.get("rule_set"):
        return  # the gateway's rule joined the rule set the operator named
    from hermes_gateway.resources import MAIL

    if ask is None:
        print(f"e-mail: run `hermes-gateway email activate` to make {MAIL.name(stage)} the active receipt rule set")
        return
    activate(MAIL.name(stage), ask)


def run_checks(config: Path, run: Run = _run, stage: str | None = None) -> tuple[list[Check], str | None]:
    """Every prerequisite, in order; later checks are skipped when an earlier one they need failed.
    `stage` overrides the configuration's."""
    config_check, configured = check_config(config)
    stage = stage or configured
    checks = [config_check, check_node(run)]
    aws_check, account, region = check_aws()
    checks.append(aws_check)
    if account and region:
        checks.append(check_bootstrap(account, region))
        queues = check_old_queues(stage, region) if stage else None
        if queues is not None:
            checks.append(queues)
        email = check_email(config, region)
        if email is not None:
            checks.append(email)
    return checks, stage


def _deploy(args: argparse.Namespace) -> int:
    config = Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml"))
    checks, stage = run_checks(config, stage=args.stage)
    for check in checks:
        print(f"{('WARN' if check.warning else 'ok  ') if check.ok else 'FAIL'} {check.name:<14} {check.detail}")
    if checks[0].ok:  # the configuration is valid: say what it deploys that may not be meant
        for warning in deploy_warnings(load_settings_file(config)):
            print(f"WARN {warning}")
    if not all(check.ok for check in checks):
        print("fix what failed above, then run this again", file=sys.stderr)
        return 1
    if args.check:
        return 0
    target = stack_name(args.stage or stage or "dev")
    command = ["npx", "--yes", CDK_CLI, "deploy", target]
    print("$ " + " ".join(command), flush=True)
    env = {**os.environ, **({"GATEWAY_STAGE": args.stage} if args.stage else {})}
    code = subprocess.run(command, check=False, env=env).returncode  # noqa: S603
    if code == 0:
        offer_activation(config, args.stage or stage or "dev", input if sys.stdin.isatty() else None)
    return code
