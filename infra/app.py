"""CDK app entry point (`cdk.json` runs it; `python infra/app.py` synthesizes into cdk.out offline).

Reads `gateway.yaml` at the repository root (or the file named by GATEWAY_CONFIG), validates it, and
synthesizes the stack `HermesGateway-<stage>` with the cdk-nag AwsSolutions checks. A configuration
error stops synthesis with the setting's key and the reason, before the CDK is even loaded.
HERMES_SKIP_BUNDLING=1 skips building the layer (quick checks: the template is complete, the layer
asset is not).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
_INFRA_DIR = Path(__file__).resolve().parent


def _use_repository_imports() -> None:
    # `python infra/app.py` puts infra/ first on sys.path; import `infra.*` and the shared package
    # from the repository instead.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _INFRA_DIR]
    for path in (REPO_ROOT / "layers" / "common", REPO_ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


_use_repository_imports()

from hermes_gateway.errors import ConfigError  # noqa: E402
from hermes_gateway.settings import Settings, load_settings_file  # noqa: E402

if TYPE_CHECKING:
    import aws_cdk as cdk

    from infra.stack import HermesGatewayStack

SKIP_BUNDLING: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


def cdk_json_context() -> dict[str, Any]:
    """The feature flags in cdk.json, so a direct run synthesizes exactly what `cdk synth` does."""
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text(encoding="utf-8")).get("context", {})
    return context


def build_app(
    settings: Settings,
    *,
    context: Mapping[str, Any] | None = None,
    outdir: str | None = None,
    deploy_region: str | None = None,
) -> tuple[cdk.App, HermesGatewayStack]:
    """The app with its one stack and the cdk-nag checks; `context` overrides cdk.json's;
    `deploy_region` the region `cdk deploy` targets, when known."""
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from hermes_gateway.outputs import stack_name
    from infra.stack import HermesGatewayStack

    app = cdk.App(context={**cdk_json_context(), **(context or {})}, outdir=outdir)
    stack = HermesGatewayStack(app, stack_name(settings.stage), settings=settings, deploy_region=deploy_region)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks())
    return app, stack


def target_region(env: Mapping[str, str]) -> str | None:
    """The region a deploy targets: the CDK CLI says it in CDK_DEFAULT_REGION, else the AWS
    environment's; None for an offline synth with no region."""
    return env.get("CDK_DEFAULT_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def config_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("GATEWAY_CONFIG") or REPO_ROOT / "gateway.yaml")


def main() -> int:
    try:
        settings = load_settings_file(config_path(os.environ), os.environ)
    except ConfigError as exc:
        print(f"error: invalid gateway configuration: {exc}", file=sys.stderr)
        return 2
    context = SKIP_BUNDLING if os.environ.get("HERMES_SKIP_BUNDLING") == "1" else {}
    try:
        app, _ = build_app(
            settings,
            context=context,
            outdir=os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"),
            deploy_region=target_region(os.environ),
        )
    except ConfigError as exc:  # found while building the stack: a function's environment too large
        print(f"error: invalid gateway configuration: {exc}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
