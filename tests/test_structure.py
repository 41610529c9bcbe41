"""Structure of the code: no import cycles in lrsim and lrref, between modules or between packages; no long
functions; no reaching into another object's private attributes in lrsim.

The checks read the source (``ast``), so they see imports inside functions too (a lazy import hides a cycle from
Python, not from these tests) and run without torch.

Package cycles.  The package graph collapses every module of a sub-package into one node named after the
sub-package, one level below the top (``lrref.decode.lr_async`` -> ``lrref.decode``, ``lrsim.cost.library`` ->
``lrsim.cost``, ``lrsim.serve.x.y`` -> ``lrsim.serve``); an import is an edge between the nodes of the two modules
(none within a node).  The top-level package is the exception, as the root: it is not collapsed, so each of its
modules stays a node of its own (``lrref.cli``, ``lrref.config``; ``lrref`` is its ``__init__``).  The root holds
the entry points (``cli``), which import every sub-package, and the shared leaves (``config``, ``models``), which
sub-packages import; collapsed into one node they would make a cycle of every sub-package that imports a leaf,
and exempting that node would hide every cycle that passes through a top-level module.  As separate nodes they
catch both: no sub-package may import a top-level module that imports it back, directly or through another
package (``lrref.decode -> lrref.config -> lrref.backends -> lrref.decode`` fails).  Cycles among the modules of
one node are the module check's business.  Package cycles that exist and have an owner are listed in
:data:`KNOWN_CYCLES`; any other fails.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lrsim", "lrref")  # checked for import cycles
LENGTH_CHECKED = ("lrsim", "lrref")  # no function over 60 lines in either package
MAX_LINES = 60
# declarative argparse builders: one add_argument per line, nothing to split
LONG_OK: set[str] = set()
# package cycles that exist today, each with why and who removes it (a cycle inside an entry passes; one that
# reaches a package outside every entry fails); remove an entry once its cycle is gone (test_known_cycles_are_current
# skips, saying so)
KNOWN_CYCLES: tuple[frozenset[str], ...] = (
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def resolve(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (``level`` dots relative to ``here``)."""
    if not node.level:
        return node.module or ""
    base = here.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ``known`` that ``name`` imports anywhere in its body (module granularity: ``from a import b``
    is an edge to ``a.b`` when that is a module, else to ``a``; parent packages are not implied)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node, name, path.name == "__init__.py")
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in out if m in known and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph as a list of nodes (first = last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def module_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_import_graph_has_no_cycles():
    graph = module_graph()
    assert len(graph) > 20 and graph["lrsim.cli"]  # the walk did find the modules and their imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def node_of(name: str, path: Path) -> str:
    """The package-graph node of module ``name`` at ``path``: its sub-package one level below the top, or itself
    when it is a top-level module (or the top-level ``__init__``) (module docstring)."""
    return ".".join(name.split(".")[:2]) if len(path.relative_to(ROOT).parts) > 2 else name


def package_graph(graph: dict[str, set[str]], known: dict[str, Path]) -> dict[str, set[str]]:
    """``graph`` (module -> modules it imports) with every module replaced by its node, edges within a node dropped."""
    node = {name: node_of(name, path) for name, path in known.items()}
    out: dict[str, set[str]] = {n: set() for n in node.values()}
    for a, targets in graph.items():
        out[node[a]] |= {node[b] for b in targets} - {node[a]}
    return out


def cyclic_groups(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node: each a set of nodes that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(n: str) -> None:  # Tarjan's algorithm
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in sorted(graph[n]):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            group = {stack.pop()}
            while n not in group:
                group.add(stack.pop())
            if len(group) > 1:
                out.append(frozenset(group))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return out


def test_nodes_and_groups_on_small_graphs():
    known = modules()
    assert node_of("lrref.decode.lr_async", known["lrref.decode.lr_async"]) == "lrref.decode"
    assert node_of("lrsim.cost.library", known["lrsim.cost.library"]) == "lrsim.cost"
    assert node_of("lrsim.gpu", known["lrsim.gpu"]) == "lrsim.gpu"  # a sub-package's __init__
    assert node_of("lrref.config", known["lrref.config"]) == "lrref.config"  # the root's modules stay apart
    assert node_of("lrref", known["lrref"]) == "lrref"
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert sorted(map(sorted, cyclic_groups(g))) == [["a", "b", "c"], ["d", "e"]]
    assert cyclic_groups({"a": {"b"}, "b": set()}) == []


def test_package_graph_has_no_cycles_but_the_known_ones():
    known = modules()
    graph = package_graph(module_graph(), known)
    assert {"lrref.backends", "lrref.decode", "lrsim.sim"} <= set(graph) and graph["lrref.cli"]
    found = cyclic_groups(graph)
    new = [g for g in found if not any(g <= k for k in KNOWN_CYCLES)]
    paths = [" -> ".join(find_cycle({n: graph[n] & g for n in g})) for g in new]
    assert new == [], "package import cycle(s): " + "; ".join(paths)


def test_known_cycles_are_current():
    """An entry whose cycle is gone no longer hides anything: remove it (a skip says so, rather than failing the
    change that removed the cycle)."""
    known = modules()
    found = cyclic_groups(package_graph(module_graph(), known))
    for k in KNOWN_CYCLES:
        assert k <= {node_of(n, p) for n, p in known.items()}, f"KNOWN_CYCLES names no package: {sorted(k)}"
    gone = [" <-> ".join(sorted(k)) for k in KNOWN_CYCLES if not any(len(g & k) > 1 for g in found)]
    if gone:
        pytest.skip(f"no longer a cycle, remove from KNOWN_CYCLES: {', '.join(gone)}")


def long_functions(pkg: str) -> list[str]:
    out = []
    for p in sorted((ROOT / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                where = f"{p.relative_to(ROOT).as_posix()}:{node.name}"
                if n > MAX_LINES and where not in LONG_OK:
                    out.append(f"{where} ({n} lines)")
    return out


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_long_functions(pkg):
    found = long_functions(pkg)
    if pkg not in LENGTH_CHECKED:
        pytest.skip(f"{pkg}: length not enforced yet ({len(found)} function(s) over {MAX_LINES} lines)")
    assert found == [], f"functions over {MAX_LINES} lines: {', '.join(found)}"


def test_allowlist_is_current():
    """Every allowlisted function exists and is still long (a stale entry would hide nothing but mislead)."""
    for where in LONG_OK:
        file, name = where.split(":")
        nodes = [n for n in ast.walk(ast.parse((ROOT / file).read_text()))
                 if isinstance(n, ast.FunctionDef) and n.name == name]
        assert nodes and nodes[0].end_lineno - nodes[0].lineno + 1 > MAX_LINES, where


def test_lrsim_uses_no_private_attribute_of_another_object():
    """``x._name`` only on ``self``/``cls``: no reaching into SimPy's (or any other object's) internals."""
    found = []
    for p in sorted((ROOT / "lrsim").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and ast.unparse(node.value) not in ("self", "cls")):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
