"""The layout of ../shared/DESIGN.md, checked: no import circle between tracekit's modules nor
between its packages, no private name of one module used by another, no module over
MAX_LINES lines, a small top level, and one meaning per table-column constant. Read from the source with ast, so a lazy import inside a function
counts as much as one at the top."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracekit"
MAX_LINES = 400  # a module longer than this does more than one job: split it by job


def _modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import of a tracekit module."""
    out = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    out.append((full, "", node.lineno))
                elif base in modules:
                    out.append((base, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(alias.name, "", node.lineno) for alias in node.names if alias.name in modules]
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {target for target, _, _ in _imports(name, path, modules) if target != name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def _package(module: str) -> str:
    """tracekit.X.anything -> X; a top-level module (tracekit.api) is its own node (api)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded into packages: X -> Y when a module of X imports one of Y."""
    packages: dict[str, set[str]] = {_package(m): set() for m in graph}
    for module, targets in graph.items():
        packages[_package(module)] |= {_package(t) for t in targets} - {_package(module)}
    return packages


def test_the_package_cycle_finder_finds_a_cycle_no_module_cycle_shows():
    # a.x -> b.y -> a.z: no module imports itself back, but packages a and b import each other
    modules = {"tracekit.a.x": {"tracekit.b.y"}, "tracekit.b.y": {"tracekit.a.z"}, "tracekit.a.z": set()}
    assert _cycles(modules) == []
    assert _cycles(_package_graph(modules)) == [["a", "b"]]
    # a top-level module is a node of its own, a package's __init__ belongs to the package
    assert _cycles(_package_graph({"tracekit.api": {"tracekit.a"}, "tracekit.a": {"tracekit.a.x"}, "tracekit.a.x": {"tracekit.api"}})) == [["a", "api"]]
    assert _cycles(_package_graph({"tracekit.a.x": {"tracekit.a.y"}, "tracekit.a.y": {"tracekit.b.z"}, "tracekit.b.z": set()})) == []


def test_no_package_cycles():
    """Packages import one way (parsers -> trace -> costs/attribution/model -> analysis ->
    reports/compare/ranks/projection -> cli/api); lazy imports inside functions count."""
    assert _cycles(_package_graph(_graph())) == []


def _long_modules(paths, limit: int = MAX_LINES) -> dict[str, int]:
    """{path: lines} of the files longer than `limit` lines."""
    lengths = {str(p): len(pathlib.Path(p).read_text().splitlines()) for p in paths}
    return {p: n for p, n in lengths.items() if n > limit}


def test_the_length_check_finds_a_long_module(tmp_path):
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * MAX_LINES)
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    assert _long_modules([short, long]) == {str(long): MAX_LINES + 1}


def test_every_module_is_at_most_max_lines():
    assert _long_modules(sorted(PACKAGE.rglob("*.py"))) == {}


def test_no_private_name_used_across_modules():
    modules = _modules()
    uses = []
    for name, path in modules.items():
        for target, imported, line in _imports(name, path, modules):
            if imported.startswith("_") and not imported.startswith("__") and target != name:
                uses.append(f"{path.relative_to(ROOT)}:{line} imports {target}.{imported}")
        aliases = {}
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and aliases.get(node.value.id, name) != name):
                uses.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert uses == []


def test_the_top_level_is_small():
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top


def test_every_package_says_what_it_takes_and_gives():
    for init in PACKAGE.rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(ROOT)} has no docstring"


def test_column_constants_have_one_meaning():
    """A name like OP_COLUMNS is assigned in one module only: two lists of the same name with
    different contents were how a report printed the wrong columns."""
    where: dict[str, list[str]] = {}
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id.endswith("_COLUMNS"):
                        where.setdefault(target.id, []).append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


DESIGN = ROOT / "docs" / "DESIGN.md"


def _unnamed_in_design(layout: str, paths) -> list[str]:
    """The packages (`name/`) and modules (`name`) of `paths` that the layout text never names."""
    import re

    missing = []
    for path in paths:
        name = path.parent.name + "/" if path.name == "__init__.py" else path.stem
        if not re.search(r"(?<![\w/])" + re.escape(name) + (r"" if name.endswith("/") else r"\b"), layout):
            missing.append(str(path.relative_to(ROOT)))
    return missing


def test_the_design_document_names_every_package_and_module():
    """docs/DESIGN.md's layout section is the reader's map: every package and module is in it."""
    text = DESIGN.read_text()
    layout = text[text.index("## Layout"):text.index("## The Trace model")]
    paths = [p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.name != "__init__.py"]
    assert _unnamed_in_design(layout, paths) == []
    assert _unnamed_in_design("costs/ gemm", [PACKAGE / "costs" / "gemm.py", PACKAGE / "costs" / "nothere.py"]) == [
        "tracekit/costs/nothere.py"]
