"""Deploy fidelity: every function's handler imports from the built layer, its own asset and boto3 alone.

The layer is built once per session by the stack's own bundler (`infra.capabilities.layer`:
pip `--target` with `--no-deps --only-binary=:all: --platform … --python-version …` from
`requirements/layer.txt`, the `hermes_gateway` package copied beside it, `.pyc` compiled by the
runtime's Python). Then each `functions/<name>/handler.py` is imported by `python -I -S -B` whose
`sys.path` is exactly what a Lambda function's is made of: the function's asset, the layer's
`python/`, and the boto3 the Lambda runtime provides (boto3, botocore and their dependencies,
taken from this environment), after the interpreter's standard library. No site-packages: a
dependency the layer lacks, or an import of the CLI (`hermes_cli`), local mode or moto, fails here
as it would at a cold start. A further import walks every module of the layer's package and every
third-party module it or a handler imports, even inside a function body (a platform's
`cryptography` or `jwt`, imported only when a webhook needs it).

Where this differs from Lambda, on purpose:
- Architecture: the stack deploys arm64 (`manylinux2014_aarch64` wheels). On another machine the
  same pins are built for the machine's architecture (same versions, same pip flags otherwise),
  since aarch64 code cannot be loaded here; `test_infra_app` synthesizes the real arm64 layer.
- Python: the runtime's version (PYTHON_VERSION, 3.13) when an interpreter of it is on the machine
  (found as the bundler finds its compiler: PATH or pyenv); otherwise this interpreter (3.11), with
  the layer built for 3.11 and a warning saying so: what differs between 3.11 and the runtime's
  version (removed standard-library modules, changed behaviour) then goes unseen.
- boto3 is this environment's (requirements/dev.txt's pin), not the runtime's bundled version.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import platform
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.resources import FUNCTIONS, repo_root
from infra.capabilities.layer import (
    PIP_PLATFORM,
    PIP_TARGET_ARGS,
    PYTHON_VERSION,
    LayerBundler,
    matching_python,
    pip_target_args,
)

pytestmark = pytest.mark.infra

ROOT = repo_root()
PACKAGE = ROOT / "layers" / "common" / "hermes_gateway"
# What the Lambda Python runtime has besides the standard library: boto3 and its dependencies.
RUNTIME_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six", "urllib3")
# Imported by the layer's code but never in a function: `settings.load_settings_file` reads
# gateway.yaml for the CLI, the CDK app and local mode; the functions get their settings from
# their environment. Anything else the package imports must be importable from the layer.
OPERATOR_ONLY = frozenset({"yaml"})

# Run inside the isolated interpreter: put the given roots before the standard library, import the
# given modules, and report what else is on the path (nothing but the standard library should be)
# and every loaded module's file that lies outside those roots and the standard library.
PROBE = """
import importlib, json, sys, sysconfig
roots = json.loads(sys.argv[1])
sys.path[:0] = roots
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
allowed = [*roots, sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")]
strays = sorted(
    f"{name}: {module.__file__}"
    for name, module in list(sys.modules.items())
    if getattr(module, "__file__", None) and not any(module.__file__.startswith(root) for root in allowed)
)
beyond = [path for path in sys.path[len(roots):] if not path.startswith(sys.base_prefix)]
print(json.dumps({"python": sys.version.split()[0], "beyond_stdlib": beyond, "strays": strays}))
"""


@dataclass(frozen=True)
class BuiltLayer:
    python: Path  # the layer's python/ (what Lambda mounts at /opt/python)
    runtime: Path  # boto3 and its dependencies, as the Lambda runtime provides them
    interpreter: str
    python_version: str


def _runtime_dir(target: Path) -> Path:
    """Links to this environment's boto3, botocore and their dependencies, and nothing else."""
    target.mkdir()
    for name in RUNTIME_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} is not installed (requirements/dev.txt)"
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (target / source.name).symlink_to(source, target_is_directory=source.is_dir())
    return target


@pytest.fixture(scope="module")
def built_layer(tmp_path_factory: pytest.TempPathFactory) -> BuiltLayer:
    interpreter = matching_python()
    version = PYTHON_VERSION
    if interpreter is None:
        interpreter, version = sys.executable, f"{sys.version_info.major}.{sys.version_info.minor}"
        warnings.warn(f"no python{PYTHON_VERSION} here: the layer is built for and imported by {version}", stacklevel=1)
    machine = platform.machine().lower()
    pip_platform = PIP_PLATFORM if machine in PIP_PLATFORM else f"manylinux2014_{machine}"
    out = tmp_path_factory.mktemp("layer")
    bundler = LayerBundler(
        requirements=ROOT / "requirements" / "layer.txt",
        package=PACKAGE,
        compiler=interpreter,
        target_args=pip_target_args(pip_platform, version),
    )
    assert bundler.try_bundle(str(out), image=None)
    runtime = _runtime_dir(tmp_path_factory.mktemp("runtime") / "site-packages")
    return BuiltLayer(out / "python", runtime, interpreter, version)


def _probe(layer: BuiltLayer, roots: list[Path], modules: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [layer.interpreter, "-I", "-S", "-B", "-c", PROBE, json.dumps([str(r) for r in roots]), json.dumps(modules)],
        cwd=roots[0],
        env={"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1", "LANG": "C.UTF-8", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finished(process: subprocess.Popen[str], what: str) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"{what} does not import from the layer alone:\n{err[-4000:]}"
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def _third_party_imports(*folders: Path) -> set[str]:
    """Every module outside the standard library and `hermes_gateway` that code in these folders
    imports, at module level or inside functions (typing-only imports under `if TYPE_CHECKING:`
    left out): a lazy import of the CLI or local mode is found here too."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for path in (path for folder in folders for path in folder.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")))
    top = {"__future__", PACKAGE.name, *sys.stdlib_module_names}
    return {name for name in found if name.partition(".")[0] not in top}


def _package_modules(package: Path) -> list[str]:
    """Every module of the package by dotted name (a hook's folder has no `__init__.py`: its
    handler is loaded by path, and its imports are checked with the rest)."""
    modules = []
    for path in sorted(package.rglob("*.py")):
        if (path.parent / "__init__.py").is_file():
            parts = path.relative_to(package.parent).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def test_the_stack_builds_the_layer_for_its_own_runtime_and_architecture() -> None:
    from infra.capabilities.layer import ARCHITECTURE, RUNTIME

    assert RUNTIME.name == f"python{PYTHON_VERSION}"
    assert {"arm64": "aarch64", "x86_64": "x86_64"}[ARCHITECTURE.name] in PIP_PLATFORM
    assert pip_target_args(PIP_PLATFORM, PYTHON_VERSION) == PIP_TARGET_ARGS
    assert "--only-binary=:all:" in PIP_TARGET_ARGS and "--no-deps" in PIP_TARGET_ARGS


def test_the_layer_carries_the_runtime_package_only(built_layer: BuiltLayer) -> None:
    layer = built_layer.python
    assert (layer / "hermes_gateway" / "__init__.py").is_file()
    # The operator's tooling and its dependencies stay out; boto3 is the runtime's.
    for absent in ("hermes_cli", "hermes_local", "moto", "yaml", "boto3", "botocore", "hermes_gateway/cli"):
        assert not (layer / absent).exists(), absent
    compiled = f"cpython-{built_layer.python_version.replace('.', '')}.pyc"
    assert list((layer / "hermes_gateway").rglob(f"*.{compiled}")), "the layer ships without .pyc"


def test_every_handler_imports_with_only_the_layer_its_asset_and_boto3(built_layer: BuiltLayer) -> None:
    # Given the built layer and each function's asset; when each handler module is imported by an
    # isolated interpreter that sees nothing else (all at once: each is its own cold start)
    running = {
        spec.name: _probe(
            built_layer,
            [ROOT / spec.code_dir, built_layer.python, built_layer.runtime],
            [spec.handler.rpartition(".")[0]],
            {"AWS_LAMBDA_FUNCTION_NAME": f"hermes-gateway-{spec.name}", "LAMBDA_TASK_ROOT": str(ROOT / spec.code_dir)},
        )
        for spec in FUNCTIONS
    }
    # Then every one imports, on the runtime's Python, and loads nothing from anywhere else
    # (two functions may share one asset: the attachments function runs the agent's handler)
    code = {spec.name: spec.code_dir for spec in FUNCTIONS}
    assert {Path(c).name for c in code.values()} == {
        path.parent.name for path in (ROOT / "functions").glob("*/handler.py")
    }
    for name, process in running.items():
        report = _finished(process, f"{code[name]}/handler.py ({name})")
        assert report["python"].startswith(built_layer.python_version + "."), report["python"]
        assert report["beyond_stdlib"] == [] and report["strays"] == [], name


def test_every_module_of_the_package_and_what_it_imports_load_from_the_layer(built_layer: BuiltLayer) -> None:
    # Given every module of the layer's package, and every third-party module it or a handler imports
    # (platforms import cryptography and jwt only when a webhook needs them)
    third_party = _third_party_imports(PACKAGE, ROOT / "functions")
    wanted = [
        *_package_modules(built_layer.python / "hermes_gateway"),
        *sorted(name for name in third_party if name.partition(".")[0] not in OPERATOR_ONLY),
    ]
    assert {"cryptography.hazmat.primitives.asymmetric.ed25519", "jwt", "pynamodb.models"} <= set(wanted)
    # When they are imported with only the layer and boto3 on the path
    report = _finished(_probe(built_layer, [built_layer.python, built_layer.runtime], wanted, {}), "the package")
    # Then all of them load, from there
    assert report["beyond_stdlib"] == [] and report["strays"] == []
