"""Cold-start import cost of each handler module, against `import boto3` alone, and the memory
the interpreter holds then (peak RSS with the handler and the AWS clients a message uses built),
which with the Lambda runtime's own ~20 MB is the floor a function's memory size must clear.

Each measurement is a fresh interpreter (so nothing is cached in-process; the .pyc files on disk
are warm, as in a Lambda sandbox that ships them). Prints a table and writes
bench/results/cold-start-latest.json. Usage: .venv/bin/python bench/cold_start.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "common"))

from hermes_gateway.resources import FUNCTIONS  # noqa: E402

PROBE = """
import importlib.util, resource, sys, time
sys.path.insert(0, {common!r})
t0 = time.perf_counter()
{body}
seconds = time.perf_counter() - t0
import boto3
session = boto3.session.Session(region_name="us-east-1")
clients = [session.client(name) for name in ("dynamodb", "lambda", "stepfunctions", "ssm", "sqs", "s3")]
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def load_handler(path: Path) -> str:
    return (
        f"spec = importlib.util.spec_from_file_location('handler', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)"
    )


def measure(body: str, runs: int) -> tuple[float, float]:
    """Median import seconds and the largest peak RSS (MB) over `runs` fresh interpreters."""
    code = PROBE.format(common=str(ROOT / "layers" / "common"), body=body)
    samples, rss = [], 0.0
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"POWERTOOLS_METRICS_DISABLED": "true", "PATH": "/usr/bin:/bin"},
        )
        seconds, peak = out.stdout.strip().splitlines()[-1].split()
        samples.append(float(seconds))
        rss = max(rss, float(peak))
    return statistics.median(samples), rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    boto3_seconds, _ = measure("import boto3", args.runs)
    rows = {}
    for spec in FUNCTIONS:
        module_file = spec.handler.split(".", 1)[0] + ".py"
        seconds, rss = measure(load_handler(ROOT / spec.code_dir / module_file), args.runs)
        rows[spec.name] = {
            "import_seconds": round(seconds, 4),
            "ratio_to_boto3": round(seconds / boto3_seconds, 2),
            "peak_rss_mb": round(rss, 1),
            "memory_mb": spec.memory_mb,
        }
    result = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "runs_per_median": args.runs,
        "import_boto3_seconds": round(boto3_seconds, 4),
        "handlers": rows,
    }
    out = ROOT / "bench" / "results" / "cold-start-latest.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"import boto3 alone: {boto3_seconds * 1000:.0f} ms (median of {args.runs})")
    for name, row in rows.items():
        print(
            f"  {name:<11} {row['import_seconds'] * 1000:6.0f} ms  = {row['ratio_to_boto3']:.2f} x boto3, "
            f"{row['peak_rss_mb']:.0f} MB held of {row['memory_mb']} MB"
        )
    print(f"written to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
