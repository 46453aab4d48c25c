"""`hermes-gateway pairing list|approve|revoke|clear-pending`: the operator's side of DM pairing.

Each named profile (a bot of its own, gateway.yaml's `profiles:`) has its own codes, approvals and
lockout: `--profile NAME` on any action works on that profile's (a user approved for one bot may not
talk to another). Without it, or with the deployment's own profile's name, the deployment's own.
NAME is checked against the running local mode's profiles (`--local`) or gateway.yaml's.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import time
from pathlib import Path
from typing import Any

from hermes_cli.target import add_target_arguments, bindings_for, cli_events, local_state, profile_settings
from hermes_gateway.domain.events import LoggedEvents
from hermes_gateway.domain.pairing import normalize_code
from hermes_gateway.domain.profiles import pairing_for
from hermes_gateway.errors import ConfigError
from hermes_gateway.observability import hash_id
from hermes_gateway.settings import PLATFORMS


def add_commands(commands: Any) -> None:
    pairing = commands.add_parser("pairing", help="approve, list and revoke DM pairings")
    actions = pairing.add_subparsers(dest="action", required=True)

    def target(parser: Any) -> None:
        parser.add_argument("--profile", default=None, metavar="NAME", help="a named profile's pairings")
        add_target_arguments(parser)

    listing = actions.add_parser("list", help="pending codes (never the codes themselves) and approved users")
    listing.add_argument("--platform", choices=PLATFORMS, default=None)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    target(listing)
    listing.set_defaults(run=_list)

    approve = actions.add_parser("approve", help="approve the user who was given CODE")
    approve.add_argument("platform", choices=PLATFORMS)
    approve.add_argument("code", nargs="+", help="the code (case, spaces and dashes are ignored)")
    target(approve)
    approve.set_defaults(run=_approve)

    revoke = actions.add_parser("revoke", help="withdraw a user's approval")
    revoke.add_argument("platform", choices=PLATFORMS)
    revoke.add_argument("user", help="the user id")
    target(revoke)
    revoke.set_defaults(run=_revoke)

    clear = actions.add_parser("clear-pending", help="drop every pending code")
    clear.add_argument("--platform", choices=PLATFORMS, default=None)
    target(clear)
    clear.set_defaults(run=_clear)


def served_profile(args: argparse.Namespace) -> str | None:
    """The named profile `--profile` picks, None for the deployment's own: checked against the
    running local mode's profiles (`--local`) or gateway.yaml's (a deployed stack)."""
    name = getattr(args, "profile", None)
    if not name:
        return None
    if not args.local:
        from hermes_gateway.settings import load_settings_file

        settings = load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))
        return profile_settings(settings, name).served_profile
    state = local_state()
    own, named = state.get("profile"), list(state.get("profiles") or {})
    if name == own:
        return None
    if name not in named:
        raise ConfigError(
            f"no profile {name!r} in the running local mode (named profiles: {', '.join(named) or 'none'})"
        )
    return str(name)


def _store(args: argparse.Namespace) -> Any:
    """The pairing store as the profile sees it (its own codes and approvals)."""
    from hermes_gateway.adapters.dynamo_access import DynamoAccessStore

    profile = served_profile(args)
    return pairing_for(DynamoAccessStore(bindings_for(args)), profile)


def _events() -> LoggedEvents:
    return cli_events()


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


def _list(args: argparse.Namespace) -> int:
    store, now = _store(args), time.time()
    platforms = [args.platform] if args.platform else list(PLATFORMS)
    pending = [p for platform in platforms for p in store.pending(platform, now)]
    approved = [a for platform in platforms for a in store.approved(platform)]
    if args.json:
        print(json.dumps({"pending": [p.__dict__ for p in pending], "approved": [a.__dict__ for a in approved]}))
        return 0
    print(f"pending ({len(pending)}):")
    for p in pending:
        print(f"  {p.platform:<9} user {p.user_id} ({p.user_name or 'no name'}), code expires {_when(p.expires_at)}")
    print(f"approved ({len(approved)}):")
    for a in approved:
        print(f"  {a.platform:<9} user {a.user_id} ({a.user_name or 'no name'}), since {_when(a.approved_at)}")
    return 0


def _approve(args: argparse.Namespace) -> int:
    code = normalize_code("".join(args.code))
    result = _store(args).approve(args.platform, code, time.time(), f"cli:{getpass.getuser()}")
    if result.status == "approved" and result.approval is not None:
        a = result.approval
        print(f"approved: {a.platform} user {a.user_id} ({a.user_name or 'no name'})")
        detail = {"platform": a.platform, "user": hash_id(a.user_id), "by": a.approved_by}
        if args.profile:
            detail["profile"] = args.profile
        _events().emit("pairing:approved", detail)
        return 0
    if result.status == "locked":
        until = _when(result.locked_until) if result.locked_until else "later"
        print(f"approvals on {args.platform} are locked after too many wrong codes, until {until}")
        return 3
    print(f"no pending code {code} on {args.platform} (wrong, used or expired)")
    return 1


def _revoke(args: argparse.Namespace) -> int:
    if _store(args).revoke(args.platform, args.user):
        print(f"revoked: {args.platform} user {args.user}")
        return 0
    print(f"{args.platform} user {args.user} was not approved")
    return 1


def _clear(args: argparse.Namespace) -> int:
    store = _store(args)
    platforms = [args.platform] if args.platform else list(PLATFORMS)
    cleared = sum(store.clear_pending(platform) for platform in platforms)
    print(f"cleared {cleared} pending code{'s' if cleared != 1 else ''}")
    return 0
