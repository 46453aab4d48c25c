"""The validated settings, shipped with the functions: one JSON file in a small layer of its own.

Every function mounts it (`/opt/hermes-gateway/settings.json`, `GATEWAY_SETTINGS_FILE`) and reads
it once per cold start (`hermes_gateway.settings.shipped`); the environment keeps only resource
names and what differs per function, so named profiles no longer count against Lambda's 4 KB of
environment. The layer's asset hash is the file's content: an unchanged configuration publishes
nothing, a changed one a new layer version, which updates every function (they all read it).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Stage
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from hermes_gateway.settings import Settings, write_settings_file
from hermes_gateway.settings.shipped import LAYER_FILE
from infra.capabilities.layer import ARCHITECTURE, RUNTIME

# The layer's content is written here, inside the cloud assembly, before the CDK stages it.
STAGING_DIR = "gateway-settings"


class SettingsLayer(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
        super().__init__(scope, construct_id)
        stage = Stage.of(self)
        if stage is None:
            raise ValueError("the settings layer belongs in a stack of an App")
        staging = Path(stage.outdir) / STAGING_DIR
        (staging / LAYER_FILE).parent.mkdir(parents=True, exist_ok=True)
        write_settings_file(settings, staging / LAYER_FILE)
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            description="Hermes Gateway settings: gateway.yaml as validated at synth (no secrets)",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            code=lambda_.Code.from_asset(str(staging)),
        )
