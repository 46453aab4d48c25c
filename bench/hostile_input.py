"""Hostile input: how long ingress takes per KB on mutated, signed bodies, per platform adapter.

The ingress service (`handle_webhook`) in-process, every platform on, with the platforms' own
signers (tests/fakes/webhook_signers.py; the Bot Framework's and Google's keys from loopback fakes):
for each platform, N mutations of its well-formed body (a value replaced by a hostile literal: a
lone surrogate, a 5,000-digit number, nesting 20,000 deep, 3,000 `<at>` tags; random bytes
changed; the body padded to 8, 32 or 64 KB with hostile text), each signed correctly so that
verification passes and the parser meets it. Time is measured around `handle_webhook` only (not
the signing), as CPU time of the answering thread. A platform's deadline (Slack 3 s, Discord 3 s)
is for the whole answer; the aim is a few milliseconds per KB at worst. Named cases measure the
rows of the "Hostile input" issue: 65 KB of Teams `<at>` tags (4.7 s before), a Feishu body nested
20,000 deep, a 5,000-digit timestamp, 64 KB of lone surrogates.

The body limit is raised to 1 MiB for the run, so the parsers (not the 413) meet the large bodies.

Usage: .venv/bin/python bench/hostile_input.py [--requests N] [--seed S]
Writes bench/results/hostile-input-latest.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import urllib.parse
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from hermes_gateway.observability import logger, metrics  # noqa: E402
from hermes_gateway.services.ingress import HttpRequest, handle_webhook, webhook_route  # noqa: E402
from hermes_gateway.settings import load_settings  # noqa: E402
from tests.fakes.jwt import NOW  # noqa: E402
from tests.fakes.platforms import adapters  # noqa: E402
from tests.fakes.webhook_signers import (  # noqa: E402
    EVERY_PLATFORM,
    Keys,
    Request,
    Sign,
    accepting_every_platform,
)

RESULTS = ROOT / "bench" / "results" / "hostile-input-latest.json"
PLATFORMS = EVERY_PLATFORM
HOST = "gateway.test"
BODY_LIMIT = 1024 * 1024
HOSTILE = (
    '"\\ud800"',
    '"a\\udfffb"',
    "9" * 5000,
    "1" + "0" * 400,
    "1e999",
    "NaN",
    "[" * 20_000 + "]" * 20_000,
    "[" * 70 + "1" + "]" * 70,
    '"' + "<at>" * 3000 + '"',
    '"' + "\\ud83d\\ude00" * 2000 + '"',
    '"../../etc/passwd"',
    "null",
    "{}",
)
PADDING = ("<at>", "\\ud800", "<at>x</at>", "x:y#%", "[", "9")


class Gateway:
    def __init__(self, keys: Keys, env: dict[str, str]) -> None:
        self.keys = keys
        self.settings = replace(load_settings(env=env, config={}), max_body_bytes=BODY_LIMIT)
        self.lookup = adapters(self.settings, env, clock=lambda: NOW)

    def signed(self, name: str, body: bytes, n: int) -> Request:
        return PLATFORMS[name].sign(Sign(self.keys, HOST, NOW, False), n, body)

    def timed(self, request: Request) -> tuple[int, float]:
        """The status, and the CPU milliseconds this thread spent answering (a wall clock on a shared
        machine would count the time other processes ran)."""
        path, _, query = request.path.partition("?")
        http = HttpRequest(
            method=request.method,
            path=path,
            headers={**{k.lower(): v for k, v in request.headers.items()}, "host": HOST},
            body=request.body,
            query=dict(urllib.parse.parse_qsl(query)),
            raw_query=query,
        )
        started = time.thread_time()
        answer = handle_webhook(
            webhook_route(path)[1],
            http,
            settings=self.settings,
            adapters=self.lookup,
            enqueue_once=lambda envelope: True,
            received_at=NOW,
        )
        elapsed = (time.thread_time() - started) * 1000
        metrics.clear_metrics()  # as each invocation's flush does; unflushed, they pile up and print
        return answer.status, elapsed


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += _paths(value, (*prefix, index))
    return found


def _replaced(body: bytes, path: tuple[Any, ...], literal: str) -> bytes:
    tree = json.loads(body)
    node = tree
    for step in path[:-1]:
        node = node[step]
    marker = "\u0001hostile\u0001"
    node[path[-1]] = marker
    return json.dumps(tree).encode().replace(json.dumps(marker).encode(), literal.encode())


def mutated(rng: random.Random, body: bytes) -> bytes:
    """One mutation of a platform's body: a hostile value, changed bytes, or hostile padding."""
    try:
        json.loads(body)
        is_json = True
    except ValueError:
        is_json = False
    kind = rng.choice(["value", "bytes", "pad"] if is_json else ["bytes", "form"])
    if kind == "value":
        return _replaced(body, rng.choice(_paths(json.loads(body))), rng.choice(HOSTILE))
    if kind == "pad":
        strings = [p for p in _paths(json.loads(body)) if isinstance(_at(json.loads(body), p), str)]
        size = rng.choice([8, 32, 64]) * 1024
        unit = rng.choice(PADDING)
        return _replaced(body, rng.choice(strings), '"' + unit * (size // len(unit)) + '"')
    if kind == "form":
        pairs = urllib.parse.parse_qsl(body.decode())
        index = rng.randrange(len(pairs))
        raw = rng.choice(["%ED%A0%80", "%FF", "9" * 5000, "a%00b", "%3Cat%3E" * 2000])
        encoded = [f"{urllib.parse.quote_plus(k)}={urllib.parse.quote_plus(v)}" for k, v in pairs]
        encoded[index] = f"{urllib.parse.quote_plus(pairs[index][0])}={raw}"
        return "&".join(encoded).encode()
    changed = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(changed))
        changed[at : at + 1] = bytes([rng.randrange(256)])
    return bytes(changed)


def _at(tree: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        tree = tree[step]
    return tree


def platform_run(gateway: Gateway, name: str, requests: int, rng: random.Random) -> dict[str, Any]:
    base = PLATFORMS[name].payload(1, PLATFORMS[name].chat)
    per_kb: list[float] = []
    times: list[float] = []
    statuses: Counter[int] = Counter()
    for n in range(requests):
        body = mutated(rng, base)
        status, ms = gateway.timed(gateway.signed(name, body, 1000 + n))
        statuses[status] += 1
        times.append(ms)
        per_kb.append(ms / max(len(body) / 1024, 1.0))  # a body under 1 KB counts as 1 KB
    per_kb.sort()
    return {
        "requests": requests,
        "p50_ms_per_kb": round(statistics.median(per_kb), 3),
        "p99_ms_per_kb": round(per_kb[int(len(per_kb) * 0.99) - 1], 3),
        "max_ms_per_kb": round(per_kb[-1], 3),
        "max_ms": round(max(times), 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


def named_cases(gateway: Gateway) -> dict[str, dict[str, Any]]:
    teams = json.loads(PLATFORMS["teams"].payload(1, PLATFORMS["teams"].chat))
    cases: dict[str, tuple[str, bytes, dict[str, str]]] = {
        "teams_unclosed_at_tags_65kb": ("teams", json.dumps({**teams, "text": "<at>" * 16_640}).encode(), {}),
        "teams_mentions_65kb": (
            "teams",
            json.dumps(
                {
                    **teams,
                    "text": "<at>Hermes</at> " * 2000,
                    "entities": [
                        {"type": "mention", "text": f"<at>{i}</at>", "mentioned": {"id": teams["recipient"]["id"]}}
                        for i in range(500)
                    ],
                }
            ).encode(),
            {},
        ),
        "feishu_nested_20000_deep": ("feishu", b"[" * 20_000 + b"]" * 20_000, {}),
        "slack_lone_surrogates_64kb": (
            "slack",
            json.dumps({**json.loads(PLATFORMS["slack"].payload(1, "D1")), "padding": "\ud800" * 10_000}).encode(),
            {},
        ),
        "discord_timestamp_5000_digits": (
            "discord",
            PLATFORMS["discord"].payload(1, PLATFORMS["discord"].chat),
            {"x-signature-timestamp": "9" * 5000},
        ),
    }
    results = {}
    for case, (name, body, headers) in cases.items():
        request = gateway.signed(name, body, 1)
        status, ms = gateway.timed(replace(request, headers={**request.headers, **headers}))
        results[case] = {
            "platform": name,
            "bytes": len(body),
            "status": status,
            "ms": round(ms, 2),
            "ms_per_kb": round(ms / max(len(body) / 1024, 1.0), 3),
        }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="mutated requests per platform")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logger.setLevel("ERROR")  # every refusal logs a warning: thousands of lines, none of them news
    rng = random.Random(args.seed)
    keys = Keys.generate()
    with accepting_every_platform(keys) as env:
        gateway = Gateway(keys, env)
        for name in PLATFORMS:  # warm: key fetches, lazy imports, first-use caches
            gateway.timed(gateway.signed(name, PLATFORMS[name].payload(1, PLATFORMS[name].chat), 1))
        platforms = {name: platform_run(gateway, name, args.requests, rng) for name in sorted(PLATFORMS)}
        cases = named_cases(gateway)
    result = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "requests_per_platform": args.requests,
        "seed": args.seed,
        "body_limit_bytes": BODY_LIMIT,
        "worst_ms_per_kb": max(p["max_ms_per_kb"] for p in platforms.values()),
        "worst_p99_ms_per_kb": max(p["p99_ms_per_kb"] for p in platforms.values()),
        "platforms": platforms,
        "cases": cases,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "platforms"}, indent=2))
    for name, row in platforms.items():
        quantiles = f"p50 {row['p50_ms_per_kb']:7.3f}  p99 {row['p99_ms_per_kb']:7.3f}  max {row['max_ms_per_kb']:7.3f}"
        print(f"{name:12} {quantiles} ms/KB  {row['statuses']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
