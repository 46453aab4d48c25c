"""`hermes-gateway sessions list|show|rename|rewind|branch|delete`: sessions through the session API.

A deployed stack's API is IAM-signed: requests are signed with SigV4 (service `execute-api`) with
your AWS credentials and sent to the stack's `SessionApiUrl` output. With `--local` they go to the
running local mode with the token it wrote to its state file.

A mutation carries the fences it read (`revision`, `execution_generation`): the command reads the
session first unless they are given, and a session that changed in between is refused (`conflict`)
rather than changed blindly. Every mutation sends a `request_id` (`--request-id` to retry one).
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hermes_cli.pairing import served_profile
from hermes_cli.target import add_target_arguments, local_state, stack_outputs
from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import SESSION_API_OUTPUT

TIMEOUT_SECONDS = 15


@dataclass(frozen=True)
class SessionApiClient:
    """POSTs JSON to the session API: SigV4-signed (deployed) or with a bearer token (local)."""

    url: str
    token: str | None = None  # local mode
    region: str | None = None  # deployed: the API's region (read from its URL when None)
    profile: str | None = None  # a named profile's sessions (None: the deployment's own)

    def call(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        import urllib.error
        import urllib.request

        url = profile_url(self.url, self.profile) if self.profile else self.url
        data = json.dumps(body).encode("utf-8")
        headers = {"content-type": "application/json"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        else:
            headers = self._signed(data, headers, url)
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise ConfigError(f"cannot reach the session API: {type(exc).__name__}") from None
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if "ok" not in answer:  # API Gateway's own refusal (e.g. a missing signature): {"message": ...}
            reason = "permission_denied" if status == 403 else "unavailable"
            answer = {"ok": False, "error": {"reason": reason, "message": str(answer.get("message") or status)}}
        return status, answer

    def _signed(self, data: bytes, headers: dict[str, str], url: str | None = None) -> dict[str, str]:
        url = url or self.url
        import boto3
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        session = boto3.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise ConfigError("no AWS credentials found to sign the session API request")
        region = self.region or region_of(url) or session.region_name
        if not region:
            raise ConfigError("cannot tell the session API's region: set AWS_DEFAULT_REGION or pass --region")
        request = AWSRequest(method="POST", url=url, data=data, headers=headers)
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
        return dict(request.headers.items())


def profile_url(url: str, profile: str) -> str:
    """A named profile's session API (`…/p/<profile>/api/sessions`) beside the deployment's own
    (`…/api/sessions`): each is its own route, granted on its own."""
    base = url.rstrip("/").removesuffix("/api/sessions")
    return f"{base}/p/{profile}/api/sessions"


def region_of(url: str) -> str | None:
    """`https://<id>.execute-api.<region>.amazonaws.com/...` -> the region."""
    from urllib.parse import urlsplit

    parts = (urlsplit(url).hostname or "").split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "execute-api" else None


def client_for(args: argparse.Namespace) -> SessionApiClient:
    profile = served_profile(args)  # the deployment's own profile by name is its plain route
    if args.local:
        api = local_state().get("session_api")
        if not isinstance(api, dict) or not api.get("url") or not api.get("token"):
            raise ConfigError("the running local mode has no session API (restart it with this version)")
        return SessionApiClient(str(api["url"]), token=str(api["token"]), profile=profile)
    stage = args.stage
    if stage is None:
        from pathlib import Path

        from hermes_gateway.settings import load_settings_file

        stage = load_settings_file(Path("gateway.yaml")).stage
    url = stack_outputs(stage).get(SESSION_API_OUTPUT)
    if not url:
        raise ConfigError(f"the stack has no {SESSION_API_OUTPUT} output: deploy this version first")
    return SessionApiClient(url, profile=profile)


def add_commands(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help="list, show, rename, rewind, branch and delete sessions")
    actions = sessions.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, run: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        parser.add_argument("--json", action="store_true", help="print the API's JSON answer")
        parser.add_argument("--profile", default=None, help="a named profile's sessions (default: the deployment's)")
        add_target_arguments(parser)
        parser.set_defaults(run=run)
        return parser

    listing = action("list", "the profile's sessions, newest first", _list)
    listing.add_argument("--limit", type=int, default=20, help="at most this many (1-100)")
    show = action("show", "one session: its record, fences and transcript", _show)
    show.add_argument("session_id")
    show.add_argument("--limit", type=int, default=50, help="the newest this many messages (1-500)")
    rename = action("rename", "give a session a title (unique in the profile)", _mutation("rename"))
    rename.add_argument("session_id")
    rename.add_argument("title")
    rewind = action("rewind", "make every message after --to inactive (kept, not deleted)", _mutation("rewind"))
    rewind.add_argument("session_id")
    rewind.add_argument("--to", dest="to_seq", type=int, required=True, help="the last message id to keep")
    branch = action("branch", "copy the session's transcript into a new child session", _mutation("branch"))
    branch.add_argument("session_id")
    branch.add_argument("--title", default=None)
    delete = action("delete", "delete a session and its transcript", _mutation("delete"))
    delete.add_argument("session_id")
    for parser in (rename, rewind, branch, delete):
        parser.add_argument("--request-id", default=None, help="retry an earlier request (default: a new id)")
        parser.add_argument("--revision", type=int, default=None, help="the revision read (default: read it now)")
        parser.add_argument(
            "--execution-generation", type=int, default=None, help="the generation read (default: read it now)"
        )


def _print(answer: dict[str, Any], as_json: bool, text: str | None = None) -> int:
    if not answer.get("ok"):
        error = answer.get("error") or {}
        if as_json:
            print(json.dumps(answer, indent=2))
        print(f"error: {error.get('reason', 'unavailable')}: {error.get('message', '')}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if as_json or text is None else text)
    return 0


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M") if epoch else "-"


def _list(args: argparse.Namespace) -> int:
    _, answer = client_for(args).call({"verb": "session.list", "limit": max(1, min(args.limit, 100))})
    lines = [
        f"{s['session_id']:<26} {_when(s['started_at'])}  {s['message_count']:>4} msgs  "
        f"{'ended ' + (s['end_reason'] or '') if s['ended_at'] else ('current' if s['current'] else 'open'):<14} "
        f"{s['title'] or ''}"
        for s in answer.get("sessions", [])
    ]
    return _print(answer, args.json, "\n".join(lines) or "no sessions")


def _show(args: argparse.Namespace) -> int:
    body = {"verb": "session.resume", "session_id": args.session_id, "limit": max(1, min(args.limit, 500))}
    _, answer = client_for(args).call(body)
    text = None
    if answer.get("ok"):
        session = answer["session"]
        info = session["info"]
        lines = [
            f"{session['id']}  {session['title'] or '(untitled)'}",
            f"  revision {session['revision']}, execution generation {session['execution_generation']}",
            f"  {info['message_count']} messages, {info['tokens']['total']} tokens, "
            f"started {_when(info['started_at'])}" + (f", ended ({info['end_reason']})" if info["ended_at"] else ""),
        ]
        for message in session["messages"]:
            content = message["content"].replace("\n", " ")
            lines.append(f"  [{message['id']}] {message['role']}: {content[:100]}")
        text = "\n".join(lines)
    return _print(answer, args.json, text)


def _mutation(op: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        client = client_for(args)
        revision, generation = args.revision, args.execution_generation
        if revision is None or (generation is None and op != "rename"):
            _, read = client.call({"verb": "session.resume", "session_id": args.session_id, "limit": 1})
            if not read.get("ok"):
                return _print(read, args.json)
            revision = read["session"]["revision"] if revision is None else revision
            generation = read["session"]["execution_generation"] if generation is None else generation
        body: dict[str, Any] = {
            "verb": "session.mutate",
            "op": op,
            "request_id": args.request_id or f"cli-{uuid.uuid4().hex}",
            "session_id": args.session_id,
            "revision": revision,
        }
        if op != "rename":
            body["execution_generation"] = generation
        if op == "rename":
            body["title"] = args.title
        elif op == "rewind":
            body["to_seq"] = args.to_seq
        elif op == "branch" and args.title:
            body["title"] = args.title
        _, answer = client.call(body)
        return _print(answer, args.json, _summary(op, answer, body["request_id"]))

    return run


def _summary(op: str, answer: dict[str, Any], request_id: str) -> str:
    session = answer.get("session") or {}
    done = {
        "rename": f"renamed {session.get('id')} to {session.get('title')!r}",
        "rewind": f"rewound: {answer.get('removed')} message(s) made inactive, last kept {answer.get('rewound_to')}",
        "branch": f"branched {answer.get('parent')} into {session.get('id')}",
        "delete": f"deleted {answer.get('deleted')}",
    }[op]
    return f"{done} (request {request_id})"
