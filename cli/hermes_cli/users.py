"""`hermes-gateway users forget|export <platform>:<user id>`: one person's data on request
(BEHAVIOUR §11), in every profile of the deployment.

`forget` deletes their DM sessions (records, rows, files), their memory notes, pairing records,
usage counters and the cron jobs they made in a DM (those made in a group stay, without their name), and
redacts their own messages in group chats (a paced
Scan of the messages table: about 0.016 USD per GB of it); it asks first unless `--yes`.
`export` writes the same as JSON (`export.json`) and the files (`files/<key>`) into `--out`.
The user id is the one the gateway keys them by: the platform's user id (Teams: the AAD object
id, Feishu: the union id). An external memory provider (Honcho) is not erased from here: the
answer says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_cli.target import add_target_arguments, bindings_for, local_state
from hermes_gateway.domain.privacy import Person, ProfileScope
from hermes_gateway.errors import BadRequest, SessionBusy
from hermes_gateway.settings import PLATFORMS, Settings, load_settings_file

BUSY_TRIES = 6  # a turn running in one of their sessions: wait for it this many times
BUSY_PAUSE_SECONDS = 5.0


def add_commands(commands: Any) -> None:
    users = commands.add_parser("users", help="one user's data on request: forget it, or export it")
    actions = users.add_subparsers(dest="action", required=True)
    forget = actions.add_parser("forget", help="delete a user's data in every profile (asks first)")
    forget.add_argument("user", help="<platform>:<user id>, e.g. telegram:123456789")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_arguments(forget)
    forget.set_defaults(run=_forget)
    export = actions.add_parser("export", help="write a user's data as JSON and their files")
    export.add_argument("user", help="<platform>:<user id>, e.g. telegram:123456789")
    export.add_argument("--out", default=None, metavar="DIR", help="where to write (default ./hermes-export-<user>)")
    add_target_arguments(export)
    export.set_defaults(run=_export)


def _settings() -> Settings:
    return load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))


def _stores(args: argparse.Namespace) -> Any:
    """A person's data on the deployment `--local`/`--stage` names, for every profile it serves."""
    from hermes_gateway import wiring
    from hermes_gateway.services.forget import profile_scopes

    settings = _settings()
    bindings = bindings_for(args)
    scopes = profile_scopes(settings)
    if args.local:  # the running local mode's profiles, whatever gateway.yaml says now
        state = local_state()
        own = str(state.get("profile") or settings.profile)
        scopes = (ProfileScope(own), *(ProfileScope(str(n), str(n)) for n in state.get("profiles") or {}))
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    stores = wiring.personal_stores_on(bindings, settings, region, scopes=scopes)
    if stores.media is None:
        print("warning: the stack names no media bucket (MediaBucketName: deploy this release first); "
              "stored files are left out", file=sys.stderr)  # fmt: skip
    return stores


@contextmanager
def _answer_only() -> Iterator[None]:
    """The command's answer is what it prints: the services' INFO lines (an erasure's counts) are
    for the functions' logs, not this terminal, so they are held back while it runs."""
    from hermes_gateway.observability import logger

    level = logger.log_level
    logger.setLevel("WARNING")
    try:
        yield
    finally:
        logger.setLevel(level)


def _person(args: argparse.Namespace) -> Person | None:
    try:
        return Person.parse(args.user, PLATFORMS)
    except BadRequest as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _confirmed(person: Person, args: argparse.Namespace) -> bool:
    if args.yes:
        return True
    print(
        f"This deletes what the gateway holds about {person.label} in every profile: their direct sessions "
        "(messages, files), memory notes, pairing, usage counts and the cron jobs they made in a direct chat; "
        "their own messages in group chats are redacted, and jobs they made in groups lose their name. "
        "It cannot be undone.",
        file=sys.stderr,
    )
    try:
        typed = input(f"Type {person.label} to go ahead: ")
    except EOFError:
        print("no answer (use --yes where nobody can type one): nothing deleted", file=sys.stderr)
        return False
    if typed.strip() != person.label:
        print("cancelled: nothing deleted", file=sys.stderr)
        return False
    return True


def _forget(args: argparse.Namespace) -> int:
    from hermes_gateway.services.forget import ScanPace, forget

    person = _person(args)
    if person is None:
        return 2
    if not _confirmed(person, args):
        return 1
    stores = _stores(args)
    for attempt in range(BUSY_TRIES):
        try:
            with _answer_only():
                report = forget(stores, person, time.time(), ScanPace())
            break
        except SessionBusy:
            if attempt + 1 == BUSY_TRIES:
                print("error: a reply is being written in one of their sessions; run it again in a minute",
                      file=sys.stderr)  # fmt: skip
                return 3
            time.sleep(BUSY_PAUSE_SECONDS)
    if args.json:
        print(json.dumps({"user": person.label, "deleted": report.counts.to_dict(), "not_covered": report.not_covered}))
        return 0
    print(f"forgot {person.label}: {report.summary()}")
    for note in report.not_covered:
        print(f"note: {note}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from hermes_gateway.services.export import export_person
    from hermes_gateway.services.forget import ScanPace

    person = _person(args)
    if person is None:
        return 2
    stores = _stores(args)
    with _answer_only():
        exported = export_person(stores, person, time.time(), ScanPace())
    out = Path(args.out or f"hermes-export-{person.platform}-{person.handle}")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)  # a person's data: the operator's alone
    written, missing = [], []
    for key in exported.media_keys:
        found = stores.media.get(key) if stores.media is not None else None
        target = _file_path(out, key)
        if found is None or target is None:
            missing.append(key)  # expired by the bucket's lifecycle, or not a key to write
            continue
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(target, found[0])
        written.append(key)
    exported.data["files"] = {"written": written, "not_found": missing}
    _write(out / "export.json", json.dumps(exported.data, indent=2, ensure_ascii=False).encode("utf-8"))
    sessions = sum(len(p["sessions"]) for p in exported.data["profiles"].values())
    print(f"exported {person.label} to {out}: {sessions} direct sessions, "
          f"{len(exported.data['messages_in_groups'])} group messages, {len(written)} files")  # fmt: skip
    for note in exported.data["not_covered"]:
        print(f"note: {note}")
    return 0


def _file_path(out: Path, key: str) -> Path | None:
    """Where a stored file is written: under `files/`, never outside it."""
    parts = PurePosixPath(key).parts
    if not parts or key.startswith("/") or ".." in parts:
        return None
    return out.joinpath("files", *parts)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
