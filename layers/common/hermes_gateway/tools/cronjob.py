"""The `cronjob` tool: create, list, pause, resume and remove scheduled jobs (BEHAVIOUR §7).

Not offered inside cron runs (a job may not schedule jobs). Schedules and delivery targets are
checked when the job is made, so a mistake is the model's to fix now, not a failure at run time.
A job created by a tool call gets an id derived from the turn and the call, so a task that runs
twice creates the job once. Jobs belong to the profile and to the user who made them: another
profile's jobs, and another user's (but for admins), are never shown or changed. A job reaches
what its creator may (BEHAVIOUR §11): delivering outside their chat needs an admin's approval.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hermes_gateway.domain.cron import (
    MAX_NAME,
    MAX_PROMPT,
    MAX_TARGETS,
    Job,
    JobStore,
    Repeat,
    check_job_fields,
    check_job_id,
)
from hermes_gateway.domain.schedule import ACCEPTED_FORMS, parse_schedule
from hermes_gateway.domain.source import SessionSource, compact_source, user_handle
from hermes_gateway.domain.targets import UnresolvableTarget, resolve_target
from hermes_gateway.errors import BadRequest, Conflict
from hermes_gateway.providers.base import ToolSpec
from hermes_gateway.tools.base import SpecTool, ToolContext, ToolError, result_text

CRONJOB_SPEC = ToolSpec(
    name="cronjob",
    description=(
        "Scheduled jobs: at each scheduled time the prompt runs as a fresh agent turn and its answer is "
        "sent to the deliver targets (default: this chat). action=create needs prompt and schedule "
        "(optional name, deliver, repeat); list shows this profile's jobs; pause, resume and remove need id. "
        "Schedules: " + "; ".join(ACCEPTED_FORMS) + ". For a reminder, write the prompt as the instruction "
        "to carry out then (e.g. 'Remind the user to call Sam')."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["create", "list", "pause", "resume", "remove"]},
            "id": {"type": "string", "minLength": 1, "maxLength": 40},
            "name": {"type": "string", "maxLength": MAX_NAME},
            "prompt": {"type": "string", "minLength": 1, "maxLength": MAX_PROMPT},
            "schedule": {"type": "string", "minLength": 1, "maxLength": 200},
            "deliver": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 300}},
            "repeat": {"type": "integer", "minimum": 1, "maximum": 100_000},
        },
        "required": ["action"],
        "additionalProperties": False,
    },
)


def job_id_for(turn_id: str, call_id: str) -> str:
    """A job id (`j` + 12 hex) that is the same for a repeated task: the job is created once."""
    return "j" + hashlib.sha256(f"{turn_id}\n{call_id}".encode()).hexdigest()[:12]


def cronjob(arguments: dict[str, Any], ctx: ToolContext) -> str:
    jobs: JobStore = ctx.require("jobs")
    action = arguments["action"]
    try:
        if action == "create":
            return _create(arguments, ctx, jobs)
        if action == "list":
            listed = [job for job in jobs.list(profile=ctx.profile) if _mine(job, ctx)]
            return result_text({"jobs": [_shown(job) for job in listed], "count": len(listed)})
        job = _own_job(jobs, arguments, ctx)
        if action == "pause":
            return result_text({"paused": _shown(jobs.pause(job.id, ctx.now) or job)})
        if action == "resume":
            return _resume(job, ctx, jobs)
        if action == "remove":
            jobs.remove(job.id)
            return result_text({"removed": job.id})
    except BadRequest as exc:
        raise ToolError(str(exc)) from None
    raise ToolError("action must be create, list, pause, resume or remove")


def _create(arguments: dict[str, Any], ctx: ToolContext, jobs: JobStore) -> str:
    job_id = job_id_for(ctx.turn_id, ctx.call_id)
    existing = jobs.get(job_id)
    if existing is not None:  # the same call, run again
        return result_text({"created": _shown(existing)})
    prompt = str(arguments.get("prompt") or "").strip()
    deliver = [str(t).strip() for t in arguments.get("deliver") or ["origin"]]
    repeat = arguments.get("repeat")
    name = " ".join(str(arguments.get("name") or prompt[:60]).split())
    if len(deliver) > MAX_TARGETS:
        raise ToolError(f"at most {MAX_TARGETS} delivery targets")
    check_job_fields(name, prompt, deliver, repeat)
    schedule = parse_schedule(str(arguments.get("schedule") or ""), ctx.now, ctx.time_zone)
    for target in deliver:
        _check_target(target, ctx)
    next_run_at = schedule.next_after(ctx.now)
    if next_run_at is None:
        raise ToolError("that time has already passed")
    job = Job(
        id=job_id,
        name=name,
        prompt=prompt,
        schedule=schedule.text,
        deliver=tuple(deliver),
        origin=_origin(ctx),
        creator=_creator(ctx),
        created_at=ctx.now,
        next_run_at=next_run_at,
        repeat=Repeat(times=1 if schedule.once else repeat),
        profile=ctx.profile,
        updated_at=ctx.now,
    )
    try:
        stored = jobs.create(job)
    except Conflict:
        stored = jobs.get(job_id) or job
    return result_text({"created": _shown(stored)})


def _resume(job: Job, ctx: ToolContext, jobs: JobStore) -> str:
    schedule = parse_schedule(job.schedule, ctx.now, ctx.time_zone)
    next_run_at = schedule.next_after(ctx.now, anchor=job.last_run_at)
    if next_run_at is None:
        raise ToolError("the job's time has passed; create a new one")
    resumed = jobs.resume(job.id, next_run_at, ctx.now)
    if resumed is None:
        raise ToolError(f"there is no job {job.id}")
    return result_text({"resumed": _shown(resumed)})


def _own_job(jobs: JobStore, arguments: dict[str, Any], ctx: ToolContext) -> Job:
    job_id = check_job_id(str(arguments.get("id") or ""))
    job = jobs.get(job_id)
    if job is None or (job.profile or ctx.profile) != ctx.profile or not _mine(job, ctx):
        raise ToolError(f"there is no job {job_id}; use action=list to see the ids")
    return job


def _mine(job: Job, ctx: ToolContext) -> bool:
    """A job is its creator's to see and change (and every job an admin's); a job the operator
    made (no creator) is only an admin's."""
    if ctx.reach is not None and ctx.reach.admin:
        return True
    creator = job.creator or {}
    return (
        bool(ctx.user_hash)
        and user_handle(str(creator.get("platform") or ""), creator.get("user_id_alt") or creator.get("user_id"))
        == ctx.user_hash
    )


def _creator(ctx: ToolContext) -> dict[str, Any] | None:
    """Who makes the job: its runs reach what they may (BEHAVIOUR §11)."""
    return compact_source(SessionSource.from_dict(ctx.source)) if ctx.source else None


def outside_reach(arguments: dict[str, Any], ctx: ToolContext) -> str | None:
    """A new job that delivers outside the turn's own chat, the home channels and the operator's
    list: an admin or approver must approve it, as they would a send there."""
    if arguments.get("action") != "create" or ctx.reach is None or ctx.directory is None:
        return None
    outside = []
    for spec in [str(t).strip() for t in arguments.get("deliver") or ["origin"]][:MAX_TARGETS]:
        try:
            target = resolve_target(spec, origin=ctx.origin, home_channels=ctx.home_channels, directory=ctx.directory)
        except UnresolvableTarget:
            continue  # the call's own error, when it runs
        if ctx.reach.send.needs_approval(spec, target):
            outside.append(target.label or target.platform)
    return f"schedule messages to {', '.join(outside)}, outside this chat" if outside else None


def _origin(ctx: ToolContext) -> dict[str, Any] | None:
    """Where `origin` points, and (for a named profile) the bot that answers there: a failure
    notice goes straight to this target, so it must say which bot sends it."""
    if ctx.origin is None:
        return None
    return ctx.origin.to_dict(ctx.sends_as)


def _check_target(target: str, ctx: ToolContext) -> None:
    try:
        resolve_target(target, origin=ctx.origin, home_channels=ctx.home_channels, directory=ctx.require("directory"))
    except UnresolvableTarget as exc:
        raise ToolError(f"cannot deliver to {target[:60]!r}: {exc}") from None


def _shown(job: Job) -> dict[str, Any]:
    """What the model needs of a job (not its origin ids)."""
    shown = job.to_dict()
    shown.pop("origin", None)
    shown.pop("profile", None)
    shown.pop("creator", None)
    return shown


CRONJOB = SpecTool(CRONJOB_SPEC, cronjob, gate=outside_reach)
