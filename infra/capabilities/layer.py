"""The common Lambda layer: the `hermes_gateway` package plus `requirements/layer.txt`, built without docker.

Only what the functions import: the operator's CLI (`cli/hermes_cli`) and local mode are separate
packages that never reach the layer (tests/infra/test_layer_imports.py imports every handler from
a built layer with nothing else on the path).

The layer is bundled by a local hook that runs pip with the Lambda target platform (arm64, CPython
3.13, wheels only, no dependencies: boto3/botocore come with the runtime). The asset hash is the
content of the inputs, so an unchanged layer is not rebuilt on the next synth.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"
_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")


def pip_target_args(platform: str = PIP_PLATFORM, python_version: str = PYTHON_VERSION) -> tuple[str, ...]:
    """What decides which distributions pip picks: the Lambda target by default (another platform
    only for the layer-import test, whose machine cannot load aarch64 code)."""
    return (
        "--no-deps",
        "--only-binary=:all:",
        "--platform", platform,
        "--implementation", "cp",
        "--python-version", python_version,
    )  # fmt: skip


PIP_TARGET_ARGS = pip_target_args()  # part of the layer's content hash


def pip_install_command(requirements: Path, target: Path, target_args: tuple[str, ...] = PIP_TARGET_ARGS) -> list[str]:
    return [
        sys.executable, "-m", "pip", "install", "--no-compile", "--disable-pip-version-check", "--quiet",
        *target_args, "--target", str(target), "-r", str(requirements),
    ]  # fmt: skip


def matching_python() -> str | None:
    """An interpreter of the runtime's version, to precompile the layer; None when there is none."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == PYTHON_VERSION:
        return sys.executable
    # On PATH, or installed by pyenv without being selected (its shim then refuses to run it).
    candidates = [shutil.which(f"python{PYTHON_VERSION}")]
    candidates += sorted(
        str(p) for p in Path.home().glob(f".pyenv/versions/{PYTHON_VERSION}.*/bin/python{PYTHON_VERSION}")
    )
    for candidate in filter(None, candidates):
        probe = subprocess.run(  # noqa: S603 - fixed arguments, an interpreter found by name
            [candidate, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == PYTHON_VERSION:
            return candidate
    return None


@jsii.implements(ILocalBundling)
class LayerBundler:
    """Builds `<out>/python/` on this machine; docker is never used.

    With an interpreter of the runtime's version (`compiler`), the layer ships .pyc files: /opt is
    read-only in Lambda, so without them every cold start compiles the layer again. They are
    hash-based (unchecked), so they stay valid whatever timestamps the asset zip gives the sources.
    """

    def __init__(
        self,
        *,
        requirements: Path,
        package: Path,
        compiler: str | None,
        target_args: tuple[str, ...] = PIP_TARGET_ARGS,
    ) -> None:
        self.requirements = requirements
        self.package = package
        self.compiler = compiler
        self.target_args = target_args

    def try_bundle(self, output_dir: str, *, image: DockerImage, **options: Any) -> bool:
        """Called by CDK before docker bundling; returning True means docker is never run."""
        target = Path(output_dir) / "python"
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(pip_install_command(self.requirements, target, self.target_args), check=True)  # noqa: S603
        shutil.copytree(self.package, target / self.package.name, ignore=_SKIPPED, dirs_exist_ok=True)
        if self.compiler is None:
            print(
                f"note: no python{PYTHON_VERSION} found; the layer ships without .pyc (slower cold starts)",
                file=sys.stderr,
            )
        else:
            subprocess.run(  # noqa: S603
                [
                    self.compiler,
                    "-m",
                    "compileall",
                    "-q",
                    "-j",
                    "0",
                    "--invalidation-mode",
                    "unchecked-hash",
                    str(target),
                ],
                check=True,
            )
        return True


def content_hash(requirements: Path, package: Path, *, precompiled: bool) -> str:
    """Hash of everything that decides the layer's content: requirements, package sources, pip target."""
    digest = hashlib.sha256()
    digest.update(" ".join((*PIP_TARGET_ARGS, f"precompiled={precompiled}")).encode())
    digest.update(requirements.read_bytes())
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class CommonLayer(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, requirements: Path, package: Path) -> None:
        super().__init__(scope, construct_id)
        compiler = matching_python()
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            description="hermes_gateway package and its dependencies (without boto3, which the runtime has)",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            code=lambda_.Code.from_asset(
                str(package.parent),
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=content_hash(requirements, package, precompiled=compiler is not None),
                bundling=BundlingOptions(
                    image=DockerImage.from_registry("none"),  # required by the API; local bundling always succeeds
                    local=LayerBundler(requirements=requirements, package=package, compiler=compiler),
                ),
            ),
        )
