"""`hermes-gateway cron list|add|pause|resume|remove|run`: scheduled jobs (BEHAVIOUR §7).

Works on a deployed stack or, with `--local`, on the running local mode's embedded AWS. A job's
targets are checked when it is added (a target that names nothing is refused with the reason);
its schedule is read in the configured time zone. `cron run ID` starts a run now, whatever the
job's schedule (its next scheduled run is unchanged).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from hermes_cli.target import add_target_arguments, bindings_for, cli_events, stack_outputs
from hermes_gateway.domain.cron import Job
from hermes_gateway.domain.events import LoggedEvents
from hermes_gateway.errors import BadRequest, ConfigError
from hermes_gateway.outputs import state_machine_output_key
from hermes_gateway.resources import TURN_STATE_MACHINE, Bindings
from hermes_gateway.settings import Settings, load_settings_file

STATE_MACHINE_OUTPUT = state_machine_output_key(TURN_STATE_MACHINE.name)


def add_commands(commands: Any) -> None:
    cron = commands.add_parser("cron", help="scheduled jobs: list, add, pause, resume, remove, run now")
    actions = cron.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="every job with its state, next run and last outcome")
    _common(listing, _list)

    add = actions.add_parser("add", help="add a job")
    add.add_argument("--schedule", required=True, help="every 30m | every monday 9am | weekdays at 9:30pm | "
                     "'0 9 * * 1-5' | 2026-12-01T09:00 | in 30m")  # fmt: skip
    add.add_argument("--prompt", required=True, help="what the agent is asked at each run")
    add.add_argument("--deliver", required=True, action="append", help="a target (repeatable): telegram, "
                     "slack:C123, telegram:-100:5, #ops, local")  # fmt: skip
    add.add_argument("--name", default="", help="a short name (default: the prompt's first line)")
    add.add_argument("--repeat", type=int, default=None, help="stop after this many runs (default: forever)")
    add.add_argument("--profile", default=None, help="run as a named profile (default: the deployment's)")
    _common(add, _add)

    for action, help_text, run in (
        ("pause", "stop a job from firing (it keeps its schedule)", _pause),
        ("resume", "let a paused job fire again, from now on", _resume),
        ("remove", "delete a job", _remove),
        ("run", "start a run of a job now, whatever its schedule", _run),
    ):
        parser = actions.add_parser(action, help=help_text)
        parser.add_argument("job_id", help="the job's id (cron list shows it)")
        _common(parser, run)


def _common(parser: argparse.ArgumentParser, run: Any) -> None:
    parser.set_defaults(run=run)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_arguments(parser)


def _settings() -> Settings:
    return load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))


def _store(bindings: Bindings) -> Any:
    from hermes_gateway.adapters.dynamo_jobs import DynamoJobStore

    return DynamoJobStore(bindings)


def _when(epoch: float | None, settings: Settings) -> str:
    if epoch is None:
        return "-"
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return datetime.fromtimestamp(epoch, ZoneInfo(settings.time_zone)).strftime("%Y-%m-%d %H:%M %Z")


def _show(job: Job, args: argparse.Namespace, settings: Settings) -> None:
    if args.json:
        print(json.dumps(job.to_dict()))
        return
    print(f"{job.id}  {job.name}")
    print(f"  schedule   {job.schedule}  ({job.state}{', ' + job.retired_reason if job.retired_reason else ''})")
    print(f"  next run   {_when(job.next_run_at, settings)}")
    print(f"  deliver    {', '.join(job.deliver)}")
    runs = f"{job.repeat.completed}/{job.repeat.times}" if job.repeat.times else str(job.repeat.completed)
    last = f"{job.last_status or '-'} at {_when(job.last_run_at, settings)}" if job.last_run_at else "-"
    print(f"  runs       {runs}; last {last}; delivery {_delivery(job.last_delivery_status)}")
    if job.last_error:
        print(f"  last error {job.last_error}")


_DELIVERY_SAYS = {
    # domain/service_window.py: the run's answer was refused, not retried
    "outside_window": "outside_window (the person last wrote over 24 hours ago: WhatsApp takes only a template "
    "then; set platforms.whatsapp.reengage_template)",
}


def _delivery(status: str | None) -> str:
    return _DELIVERY_SAYS.get(status or "", status or "-")


def _fail(args: argparse.Namespace, message: str) -> int:
    if args.json:
        print(json.dumps({"error": message}))
    else:
        print(f"error: {message}", file=sys.stderr)
    return 1


def _list(args: argparse.Namespace) -> int:
    settings, store = _settings(), _store(bindings_for(args))
    jobs = store.list()
    if args.json:
        print(json.dumps([job.to_dict() for job in jobs]))
        return 0
    if not jobs:
        print("no jobs")
    for job in jobs:
        _show(job, args, settings)
    return 0


def _add(args: argparse.Namespace) -> int:
    from hermes_cli.send import home_channels
    from hermes_gateway.adapters.dynamo_directory import DynamoDirectory
    from hermes_gateway.domain.profiles import directory_for
    from hermes_gateway.domain.targets import resolve_target
    from hermes_gateway.services.cron import create_job

    try:
        settings = _settings().for_profile(args.profile)
    except BadRequest as exc:  # UnknownProfile
        return _fail(args, str(exc))
    bindings = bindings_for(args)
    directory = directory_for(DynamoDirectory(bindings), settings.served_profile)

    def check(target: str) -> None:
        resolve_target(target, origin=None, home_channels=home_channels(settings), directory=directory)

    try:
        job = create_job(
            _store(bindings),
            prompt=args.prompt,
            schedule=args.schedule,
            deliver=args.deliver,
            name=args.name,
            repeat=args.repeat,
            now=time.time(),
            time_zone=settings.time_zone,
            profile=settings.profile,
            check_target=check,
        )
    except BadRequest as exc:
        return _fail(args, str(exc))
    _show(job, args, settings)
    return 0


def _pause(args: argparse.Namespace) -> int:
    from hermes_gateway.services.cron import pause_job

    return _change(args, lambda store, settings: pause_job(store, args.job_id, time.time()))


def _resume(args: argparse.Namespace) -> int:
    from hermes_gateway.services.cron import resume_job

    return _change(args, lambda store, settings: resume_job(store, args.job_id, time.time(), settings.time_zone))


def _change(args: argparse.Namespace, change: Any) -> int:
    settings, store = _settings(), _store(bindings_for(args))
    try:
        job = change(store, settings)
    except BadRequest as exc:
        return _fail(args, str(exc))
    _show(job, args, settings)
    return 0


def _remove(args: argparse.Namespace) -> int:
    from hermes_gateway.services.cron import remove_job

    store = _store(bindings_for(args))
    try:
        remove_job(store, args.job_id)
    except BadRequest as exc:
        return _fail(args, str(exc))
    print(json.dumps({"removed": args.job_id}) if args.json else f"removed {args.job_id}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from hermes_gateway.adapters.aws import StepFunctionsStarter
    from hermes_gateway.services.cron import CronDeps, run_now

    settings, bindings = _settings(), bindings_for(args)
    starter = StepFunctionsStarter(_state_machine(args, bindings))
    deps = CronDeps(
        jobs=_store(bindings),
        starter=starter,
        events=_events(),
        time_zone=settings.time_zone,
        grace_seconds=settings.cron.grace_seconds,
    )
    try:
        turn_id = run_now(deps, args.job_id, time.time())
    except BadRequest as exc:
        return _fail(args, str(exc))
    print(json.dumps({"job_id": args.job_id, "turn_id": turn_id}) if args.json else f"started {turn_id}")
    return 0


def _state_machine(args: argparse.Namespace, bindings: Bindings) -> str:
    if args.local:
        return bindings.state_machine(TURN_STATE_MACHINE.name)
    outputs = stack_outputs(args.stage or _settings().stage)
    if STATE_MACHINE_OUTPUT not in outputs:
        raise ConfigError(f"the stack has no {STATE_MACHINE_OUTPUT} output; deploy the current version first")
    return outputs[STATE_MACHINE_OUTPUT]


def _events() -> LoggedEvents:
    return cli_events()
