"""Run every bench and write bench/results/latest.json: the numbers a change is compared on.

Each bench runs in its own interpreter (`python bench/<name>.py`) and writes its own
`results/<name>-latest.json`; this script then merges them: the cost per message and its split by
service (message_cost), the read growth and cost of a 200-message session (long_session), how
far one deployment goes (capacity, fed with message_cost's service times, so it runs after it),
the cost of a photo, a voice note, a PDF and a reply with a photo beside a text message
(media_cost), a real conversation's cost with a model that takes seconds and the answer streamed,
split into work and waiting, and what the streaming adds (real_profile), what WhatsApp's status
reports of each reply cost (receipts_cost), an e-mail's cost with SES's own (email_cost), an
iMessage message through BlueBubbles with the echoes of its reply (bluebubbles_cost), a Signal
message with the forwarder's mailbox calls and the forwarder's idle calls (signal_cost), the idle
monthly cost (idle_cost), the ingress handler's import time as a ratio of `import boto3`
(cold_start), the ack path and the hops (ack_path), local throughput (throughput), and the
delivery-under-faults
outcome when `results/delivery-faults-latest.json` exists (`make faults` writes it; it is not run
here). Every source file's own date is kept under `sources`, so a number merged from an older run
shows as such.

Usage: .venv/bin/python bench/run_all.py [--quick] [--skip NAME ...] [--merge-only]
Compare two runs with: .venv/bin/python bench/compare.py OLD.json bench/results/latest.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

# As the Makefile exports them: jsii's warnings about this machine's Node.js version, silenced.
QUIET_NODE = {
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}
# name -> (script, arguments, arguments with --quick, extra environment, result file)
BENCHES: dict[str, tuple[str, list[str], list[str], dict[str, str], str]] = {
    "cold_start": ("cold_start.py", [], ["--runs", "3"], {}, "cold-start-latest.json"),
    "idle_cost": ("idle_cost.py", [], [], {"HERMES_SKIP_BUNDLING": "1", **QUIET_NODE}, "idle-cost-latest.json"),
    "ack_path": ("ack_path.py", [], ["--requests", "100"], {}, "ack-path-latest.json"),
    "message_cost": ("message_cost.py", [], ["--quick"], {}, "message-cost-latest.json"),
    "media_cost": ("media_cost.py", [], ["--quick"], {}, "media-cost-latest.json"),
    "real_profile": ("real_profile.py", [], ["--quick"], {}, "real-profile-latest.json"),
    "receipts_cost": ("receipts_cost.py", [], ["--quick"], {}, "receipts-cost-latest.json"),
    "email_cost": ("email_cost.py", [], ["--quick"], {}, "email-cost-latest.json"),
    "bluebubbles_cost": ("bluebubbles_cost.py", [], ["--quick"], {}, "bluebubbles-cost-latest.json"),
    "chat_extras_cost": ("chat_extras_cost.py", [], ["--messages", "20"], {}, "chat-extras-cost-latest.json"),
    "signal_cost": ("signal_cost.py", [], ["--quick"], {}, "signal-cost-latest.json"),
    # 200 messages in both: the read growth is measured at the 200th
    "long_session": ("long_session.py", [], [], {}, "long-session-latest.json"),
    "capacity": ("capacity.py", ["--all"], ["--all", "--seconds", "20"], {}, "capacity-latest.json"),
    "throughput": ("throughput.py", [], ["--quick"], {}, "throughput-latest.json"),
}
DELIVERY_FAULTS = "delivery-faults-latest.json"
DELIVERY_FAULT_KEYS = (
    "jobs", "jobs_sent", "jobs_dead_lettered", "gone", "unknown", "duplicated", "lost",
    "order_violations", "order_violations_unexplained",
)  # fmt: skip


def run_bench(name: str, quick: bool) -> tuple[bool, float]:
    script, arguments, quick_arguments, extra_env, _ = BENCHES[name]
    command = [sys.executable, str(ROOT / "bench" / script), *(quick_arguments if quick else arguments)]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **extra_env}, check=False)
    return done.returncode == 0, time.perf_counter() - started


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def git_commit() -> tuple[str, bool | None]:
    """HEAD and whether tracked files differ from it (read-only git commands: no index refresh)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        diff = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=ROOT, capture_output=True, check=False)
    except (OSError, subprocess.CalledProcessError):
        return "", None
    return head.stdout.strip(), diff.returncode != 0


def merge(results: dict[str, dict[str, Any] | None], faults: dict[str, Any] | None) -> dict[str, Any]:
    """The summary: the issue's keys first, then what helps read them."""
    cost, idle, cold = results.get("message_cost"), results.get("idle_cost"), results.get("cold_start")
    ack, throughput = results.get("ack_path"), results.get("throughput")
    commit, dirty = git_commit()
    latest: dict[str, Any] = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs",
    }
    if cost:
        latest.update(cost_keys(cost))
    for name, keys in (("media_cost", media_cost_keys), ("long_session", long_session_keys),
                       ("capacity", capacity_keys), ("receipts_cost", receipts_cost_keys),
                       ("real_profile", real_profile_keys),
                       ("email_cost", email_cost_keys),
                       ("bluebubbles_cost", bluebubbles_cost_keys),
                       ("chat_extras_cost", chat_extras_keys),
                       ("signal_cost", signal_cost_keys)):  # fmt: skip
        if results.get(name):
            latest.update(keys(results[name] or {}))
    if idle:
        latest["idle_cost_per_month_usd"] = idle["idle_cost_per_month_usd"]
    if cold:
        latest["ingress_import_ratio"] = cold["handlers"]["ingress"]["ratio_to_boto3"]
        latest["import_ms"] = {
            "boto3": round(cold["import_boto3_seconds"] * 1000, 1),
            **{name: round(row["import_seconds"] * 1000, 1) for name, row in cold["handlers"].items()},
        }
    if ack:
        for key in ("ack_aws_calls", "ack_aws_calls_duplicate", "ack_p50_ms", "ack_p99_ms", "ack_network_connections"):
            latest[key] = ack[key]
        if "hops" in ack:
            latest.update(hops=ack["hops"], hops_list=ack["hops_list"], hops_new_session=ack["hops_new_session"])
    if throughput:
        latest["local_messages_per_second"] = throughput["local_messages_per_second"]
    if faults:
        latest["delivery_faults"] = {key: faults[key] for key in DELIVERY_FAULT_KEYS if key in faults}
    latest["sources"] = {
        name: {"file": f"bench/results/{BENCHES[name][4]}", "measured_at": (data or {}).get("measured_at", "")}
        for name, data in results.items()
        if data is not None
    }
    if faults:
        latest["sources"]["delivery_faults"] = {"file": f"bench/results/{DELIVERY_FAULTS}", "measured_at": ""}
    return latest


def cost_keys(cost: dict[str, Any]) -> dict[str, Any]:
    """The headline and what it is made of, from message_cost."""
    apart = cost["not_in_total"]
    per = cost["per_message"]
    by_function = {
        f"{r['function']} {r['service']}.{r['operation']} {r['resource']}".rstrip(): r["per_message"]
        for r in cost["function_requests"]
    }
    return {
        "cost_per_million_usd": cost["cost_per_million_usd"],
        "cost_by_service": cost["cost_by_service"],
        "cost_in_total": cost["in_total"],
        "webhook_endpoint": cost.get("webhook_endpoint", "http_api"),
        "cost_per_million_usd_function_url": cost.get("cost_per_million_usd_function_url"),
        # The same total with Lambda billed by each invocation's elapsed time alone instead of the CPU model.
        "cost_per_million_usd_lambda_wall_clock": round(
            cost["cost_per_million_usd"]
            - cost["cost_by_service"]["lambda"]
            + apart["lambda_usd_per_million_wall_clock"],
            2,
        ),
        "cost_not_in_total": {
            "lambda_usd_per_million_wall_clock": apart["lambda_usd_per_million_wall_clock"],
            "stepfunctions_usd_per_million_measured_duration": apart["stepfunctions_usd_per_million_measured_duration"],
            "model_wait_usd_per_million_per_model_second": apart["model_wait_usd_per_million_per_model_second"],
            "xray_usd_per_million_by_traffic_when_traced": apart["xray_usd_per_million_by_traffic_when_traced"],
            "custom_metrics": apart["custom_metrics"],
            "custom_metrics_usd_per_month": apart["custom_metrics_usd_per_month"],
        },
        "messages_tested": cost["messages_tested"],
        "model_wait_seconds_per_message": cost["model_wait_seconds_per_message"],
        "aws_requests_per_message": round(
            sum(n for operations in cost["aws_requests_per_message"].values() for n in operations.values()), 3
        ),
        "aws_requests_per_message_by_function": by_function,
        "lambda_poller_requests_per_message": round(
            sum(v for k, v in per["sqs_requests_by_function_and_poller"].items() if k.startswith("poller")), 3
        ),
        "dynamodb_write_units_per_message": per["dynamodb_write_units"],
        "dynamodb_read_units_per_message": per["dynamodb_read_units"],
        "lambda_gb_seconds_per_message": per["lambda_gb_seconds"],
        "lambda_gb_seconds_per_message_wall_clock": per["lambda_gb_seconds_wall_clock"],
        "lambda_invocations_per_message": round(sum(per["lambda_invocations"].values()), 3),
        "busy_retries": cost["busy_retries"],
        "failed_invocations": cost.get("failed_invocations", 0),
    }


def media_cost_keys(media: dict[str, Any]) -> dict[str, Any]:
    """USD per million media messages by kind (requests; storage apart), their difference from the
    text message of the same run, and whether every kind kept within the item and state limits."""
    summary = media.get("summary", {})
    kinds = [name for name in summary if name != "text"]
    return {
        "media_cost_per_million_usd": {name: summary[name]["usd_per_million"] for name in kinds},
        "media_cost_delta_vs_text_usd_per_million": {
            name: summary[name]["delta_vs_text_usd_per_million"] for name in kinds
        },
        "media_s3_storage_usd_per_million": {name: summary[name]["s3_storage_usd_per_million"] for name in kinds},
        "media_limits_ok": media.get("limits_ok"),
        # a spoken answer's price at the speech API, apart from the AWS cost (a model cost)
        "media_speech_usd_per_million": {
            name: found["speech_usd_per_million_messages"]
            for name, found in media.get("speech", {}).items()
            if isinstance(found, dict)
        },
    }


def chat_extras_keys(extras: dict[str, Any]) -> dict[str, Any]:
    """What issue 39's chat extras add, each per million of what it happens on (chat_extras_cost.py)."""
    return {
        "chat_extras_usd_per_million": {
            "heard_at_per_whatsapp_message": extras["heard_at"]["usd_per_million_whatsapp_messages"],
            "window_check_per_whatsapp_push": extras["window_check"]["usd_per_million_pushes"],
            "voice_command_write": extras["voice_command"]["write_usd_per_million_commands"],
            "quote_lookup_per_id_only_reply": extras["quote_lookup"]["usd_per_million_quoted_replies"],
        }
    }


def bluebubbles_cost_keys(bluebubbles: dict[str, Any]) -> dict[str, Any]:
    """An iMessage message through BlueBubbles, with and without the two echoes of its reply."""
    return {
        "bluebubbles_usd_per_million_messages": bluebubbles["usd_per_million_messages"],
        "bluebubbles_usd_per_million_messages_without_echoes": bluebubbles["usd_per_million_messages_without_echoes"],
    }


def real_profile_keys(real: dict[str, Any]) -> dict[str, Any]:
    """A real conversation (a model that takes seconds, the answer streamed): its cost, split into
    work and waiting, what the streaming adds, and the seconds before the typing indicator."""
    return {
        "cost_per_million_usd_real_profile": real["cost_per_million_usd_real_profile"],
        "cost_per_million_usd_real_profile_split": real["cost_per_million_usd_real_profile_split"],
        "model_seconds_per_message_real_profile": real["model_seconds_per_message"],
        "model_wait_usd_per_million_per_model_second_measured": real[
            "model_wait_usd_per_million_per_model_second_measured"
        ],
        "streaming_extra_usd_per_million": real["streaming_extra_usd_per_million"],
        "seconds_from_webhook_local_mode": {
            name: real["seconds_from_webhook_local_mode"][name] for name in ("to_typing_indicator", "to_model_request")
        },
    }


def receipts_cost_keys(receipts: dict[str, Any]) -> dict[str, Any]:
    """What WhatsApp's status reports (sent, delivered, read) cost beside each reply."""
    return {
        "whatsapp_receipts_usd_per_million_replies": receipts["usd_per_million_whatsapp_replies"],
    }


def email_cost_keys(email: dict[str, Any]) -> dict[str, Any]:
    """USD per million e-mails by kind (SES's own receiving and sending in it), and the functions' part."""
    kinds = email.get("kinds", {})
    return {
        "email_cost_per_million_usd": {name: kind["cost_per_million_usd"] for name, kind in kinds.items()},
        "email_functions_cost_per_million_usd": {
            name: kind["functions_cost_per_million_usd"] for name, kind in kinds.items()
        },
    }


def signal_cost_keys(signal: dict[str, Any]) -> dict[str, Any]:
    """A Signal message with its mailbox calls (both endpoints), and the forwarder's idle month."""
    idle = signal["empty_polls"]
    return {
        "signal_usd_per_million_messages": {
            "http_api": signal["usd_per_million_messages"],
            "function_url": signal["usd_per_million_messages_function_url"],
        },
        "signal_mailbox_calls_per_message": signal["webhook_requests_per_message"].get("outbox", 0.0),
        "signal_idle_usd_per_month": {
            name: idle[name]["usd_per_month_at_30_s"] for name in ("http_api", "function_url")
        },
    }


def long_session_keys(long: dict[str, Any]) -> dict[str, Any]:
    growth = long["read_units_growth"]
    at = growth["at_message"]
    return {
        f"read_units_growth_{at}": growth["ratio"],
        "read_units_per_message_at_1": growth["first"],
        f"read_units_per_message_at_{at}": growth["last"],
        "cost_per_million_usd_long_session": long["cost_per_million_usd"],
        "cost_per_million_usd_long_session_function_url": long.get("cost_per_million_usd_function_url"),
    }


def capacity_keys(capacity: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, key in (("defaults", ""), ("new-account", "_new_account"), ("busy_group", "_busy_group"),
                      ("function-url", "_function_url")):  # fmt: skip
        if name in capacity:
            out[f"capacity{key}_messages_per_second"] = capacity[name]["knee_messages_per_second"]
            out[f"capacity{key}_binding_limit"] = capacity[name]["binding_limit"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs of every bench (a smoke run)")
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(BENCHES), help="benches not to run")
    parser.add_argument("--merge-only", action="store_true", help="run nothing; merge the existing result files")
    args = parser.parse_args()
    failed = []
    for name in BENCHES:
        if args.merge_only or name in args.skip:
            continue
        ok, seconds = run_bench(name, args.quick)
        print(f"== {name}: {'done' if ok else 'FAILED'} in {seconds:.0f} s", flush=True)
        if not ok:
            failed.append(name)
    results = {name: (None if name in failed else load(spec[4])) for name, spec in BENCHES.items()}
    latest = merge(results, load(DELIVERY_FAULTS))
    latest["quick"] = args.quick
    if failed:
        latest["failed"] = failed
    missing = [key for key in REQUIRED if key not in latest]
    out = RESULTS / "latest.json"
    out.write_text(json.dumps(latest, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({key: latest.get(key) for key in REQUIRED}, indent=2))
    print(f"written to {out.relative_to(ROOT)}" + (f"; missing: {', '.join(missing)}" if missing else ""))
    return 1 if failed or missing else 0


REQUIRED = (
    "cost_per_million_usd",
    "cost_by_service",
    "aws_requests_per_message",
    "read_units_growth_200",
    "capacity_messages_per_second",
    "idle_cost_per_month_usd",
    "cost_per_million_usd_real_profile",
    "streaming_extra_usd_per_million",
    "ingress_import_ratio",
    "ack_aws_calls",
    "hops",
    "local_messages_per_second",
)


if __name__ == "__main__":
    raise SystemExit(main())
