"""Cold-start cost of the settings: `import hermes_gateway.settings`, then building the settings
as `wiring.settings()` does, in fresh interpreters, for the defaults and for the largest valid
configuration (every platform, ten named profiles each on every platform with its own model).

`file`: from the settings file a deployment ships (GATEWAY_SETTINGS_FILE), as deployed;
`env`: from environment variables alone (`Settings.to_env`), as functions were configured before.
CPU time (process_time), median of --runs fresh interpreters; the .pyc files are warm.
Usage: .venv/bin/python bench/settings_load.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMON = ROOT / "layers" / "common"
sys.path.insert(0, str(COMMON))

from hermes_gateway.platforms.catalog import CATALOG  # noqa: E402
from hermes_gateway.settings import (  # noqa: E402
    MAX_PROFILES,
    SETTINGS_FILE_ENV,
    Settings,
    load_settings,
    settings_env,
    write_settings_file,
)

PROBE = """
import os, sys, time
sys.path.insert(0, {common!r})
t0 = time.process_time()
import hermes_gateway.settings as settings
t1 = time.process_time()
settings.load_shipped_settings(os.environ)
t2 = time.process_time()
print(t1 - t0, t2 - t1)
"""


def largest_config() -> dict[str, Any]:
    # every platform on (e-mail needs its address), e-mail for the deployment's own profile alone
    every = {spec.name: {"enabled": True} for spec in CATALOG if not spec.local_only}
    every["email"]["address"] = "hermes@example.com"
    named = {name: value for name, value in every.items() if name != "email"}
    profiles = {
        f"bot{i}": {"provider": {"name": "bedrock", "model": f"us.anthropic.model-{i}-v1:0"}, "platforms": named}
        for i in range(MAX_PROFILES)
    }
    return {"provider": {"name": "bedrock", "model": "anthropic.model-v1:0"}, "platforms": every, "profiles": profiles}


def measure(env: dict[str, str], runs: int) -> tuple[float, float]:
    code = PROBE.format(common=str(COMMON))
    base = {"PATH": "/usr/bin:/bin", "POWERTOOLS_METRICS_DISABLED": "true"}
    samples = [
        tuple(map(float, subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**base, **env}
        ).stdout.split()))
        for _ in range(runs)
    ]  # fmt: skip
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in (("defaults", {}), ("largest", largest_config())):
            settings: Settings = load_settings(env={}, config=config)
            path = Path(tmp) / f"{name}.json"
            write_settings_file(settings, path)
            env_form = settings_env(settings, changed_only=True)
            for mode, env in (("file", {SETTINGS_FILE_ENV: str(path)}), ("env", env_form)):
                imported, loaded = measure(env, args.runs)
                size = os.path.getsize(path) if mode == "file" else sum(len(k) + len(v) for k, v in env.items())
                print(
                    f"{name:<8} {mode:<4} import {imported * 1000:5.1f} ms  load {loaded * 1000:5.2f} ms  "
                    f"({size} bytes of {'file' if mode == 'file' else 'environment'})"
                )
    print(json.dumps({"runs_per_median": args.runs, "python": sys.version.split()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
