"""The package's modules import each other one way (router -> commands -> lifecycle -> domain):
no cycle, counting imports inside functions too (a lazy import may save cold-start time, never
dodge a cycle) and imports under `if TYPE_CHECKING:` (a type two modules share goes down into the
lower one). The domain imports no service, no adapter and no settings: the settings import the
domain, and what a domain rule reads of them is a Protocol beside the rule. The benchmarks'
modules (`bench/`) import each other one way too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "layers" / "common"
PACKAGE = ROOT / "hermes_gateway"


def _module(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str], type_checking: bool) -> None:
        self.module, self.is_package, self.known = module, is_package, known
        self.type_checking = type_checking
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if not self.type_checking and isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _add(self, name: str) -> None:
        while name and name not in self.known:
            name = name.rpartition(".")[0]
        if name and name != self.module:
            self.found.add(name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _resolve(self.module, node, self.is_package)
        for alias in node.names:
            self._add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in self.known else base)


def import_graph(package: Path = PACKAGE, root: Path = ROOT, *, type_checking: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports; `type_checking`: imports under
    `if TYPE_CHECKING:` count too."""
    files = {_module(p, root): p for p in package.rglob("*.py")}
    known = set(files)
    graph = {}
    for module, path in files.items():
        visitor = _Imports(module, path.name == "__init__.py", known, type_checking)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        # a module's own package (its __init__) is imported with it: not an edge back
        graph[module] = {m for m in visitor.found if m != module.rpartition(".")[0]}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if state.get(nxt) is None and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if state.get(node) is None and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_package_has_no_import_cycle_at_run_time_either() -> None:
    # (implied by the test above; kept apart so a type-only cycle and a run-time one read differently)
    cycle = find_cycle(import_graph(type_checking=False))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_benchmarks_have_no_import_cycle() -> None:
    cycle = find_cycle(import_graph(REPO / "bench", REPO))
    assert cycle is None, " -> ".join(cycle or [])


DOMAIN_MAY_NOT_IMPORT = ("hermes_gateway.services", "hermes_gateway.adapters", "hermes_gateway.settings")


def test_the_domain_imports_no_service_no_adapter_and_no_settings() -> None:
    graph = import_graph()
    for module, imported in graph.items():
        if module.startswith("hermes_gateway.domain."):
            wrong = {m for m in imported if m.startswith(DOMAIN_MAY_NOT_IMPORT)}
            assert not wrong, f"{module} imports {sorted(wrong)}"
        if module.startswith("hermes_gateway.services."):
            wrong = {m for m in imported if m.startswith("hermes_gateway.adapters")}
            assert not wrong, f"{module} imports {sorted(wrong)}"


def test_a_detected_cycle_is_reported() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
