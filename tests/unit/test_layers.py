"""The package's shape, read from its syntax trees: no module asks a point of an axis its name
outside that point's own module; no import cycle, function-local imports included; and the
modules that only describe a run (analysis, renderers, the dashboard, the run directory, the
scenario) import neither the launch side nor the workflows."""

import ast
from collections import defaultdict
from pathlib import Path

from pipeprof import plugins

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pipeprof"


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root``, by its dotted name."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in it (in a function too)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            # a module's own package (its __init__) is where it is found, not a dependency
            if target and target != name and not name.startswith(f"{target}."):
                found.add(target)
    return found


def cycles(root: Path) -> list[list[str]]:
    """The package's import cycles: its strongly connected components of more than one module
    (Tarjan's algorithm)."""
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_a_function_local_import_closes():
    assert cycles(Path(__file__).parent / "cycle_fixture") == [
        ["tests.unit.cycle_fixture.a", "tests.unit.cycle_fixture.b"]
    ]


def test_pipeprof_has_no_import_cycle():
    assert cycles(PACKAGE) == []


DESCRIBING = ("pipeprof.analysis", "pipeprof.renderers", "pipeprof.tui", "pipeprof.rundir")
DESCRIBING += ("pipeprof.scenario",)
RUNNING = ("pipeprof.launch", "pipeprof.workflows")


def test_what_describes_a_run_imports_neither_the_launch_side_nor_the_workflows():
    known = modules(PACKAGE)
    broken = defaultdict(set)
    for name, path in known.items():
        if name.startswith(DESCRIBING):
            for target in imports(name, path, known):
                if target.startswith(RUNNING):
                    broken[name].add(target)
    assert not broken, dict(broken)


def own_modules() -> dict[str, set[str]]:
    """Each registered name, and the modules its points live in."""
    out: dict[str, set[str]] = defaultdict(set)
    for points in plugins.BUILT_IN.values():
        for name, factory in points.items():
            out[name].add(str(factory).partition(":")[0])
    return out


def test_no_module_compares_a_registered_name_outside_its_points_own_module():
    """Capabilities are attributes of a point's class (``plugins.kind``): code that asks an
    engine, framework, input library or launcher its name is where a new point breaks."""
    owners = own_modules()
    asked = []
    for name, path in modules(PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Compare, ast.MatchValue)):
                continue
            for part in ast.walk(node):
                if (
                    isinstance(part, ast.Constant)
                    and part.value in owners
                    and name not in owners[part.value]
                ):
                    asked.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not asked, asked


def test_the_name_scan_sees_a_comparison_and_its_points_own_module(tmp_path):
    """The scan above reads what it should: a comparison with a registered name is found, and
    the points' own modules are the ones the registry names."""
    owners = own_modules()
    assert owners["horovod"] == {"pipeprof.distributions.horovod"}
    assert owners["horovodrun"] == {"pipeprof.launch.horovod"}
    tree = ast.parse("if engine == 'mirrored' or name in ('local', 'x'):\n    pass\n")
    found = [
        part.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for part in ast.walk(node)
        if isinstance(part, ast.Constant) and part.value in owners
    ]
    assert found == ["mirrored", "local"]
