"""The package's shape: the paper's layers, imports that point one way, no cycles, the paper's mechanisms
apart from the simulator's fast path, and no reads of another object's private attributes
(docs/architecture.md).

Every ``import`` and ``from ... import`` of every module under ``paged/`` is read with ``ast`` (module
level, inside functions and under ``TYPE_CHECKING`` alike: a lazy import is still a dependency), and
each one that names another part of ``paged`` must point to a lower layer of :data:`LAYERS` or stay
inside its own package; the import graph between modules must have no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "paged"

#: The notebook packages of paged/experiments/ (``nbNN_<name>``); the layer rules cover each one found.
NOTEBOOK_PACKAGES = tuple(sorted(f"paged.experiments.{p.name}" for p in (ROOT / "experiments").glob("nb[0-9][0-9]_*")
                                 if (p / "__init__.py").exists()))

#: Bottom to top. A module may import from its own package or from any package of a lower rank.
LAYERS = [
    ("paged.atomic",),  # files written to a temporary name and renamed
    ("paged.workloads", "paged.core"),  # traces; sequences, the KV cache manager interface, the scheduler
    ("paged.block", "paged.contiguous"),  # the paged manager; the Orca baselines
    ("paged.systems", "paged.kernels"),  # the system registry and manager factory; attention kernels
    ("paged.sim", "paged.engine"),  # the two executors
    ("paged.experiments.notebook", "paged.tools"),  # the notebooks' machinery; model training
    ("paged.experiments.serving",),  # simulated serving shared by several notebooks
    ("paged.experiments", *NOTEBOOK_PACKAGES),  # one package per notebook (they may import one another's)
    ("paged.cli",),  # python -m paged
    ("paged.bench", "paged.__main__", "paged"),  # benchmarks (they reuse the CLI's helpers), the package face
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _owner(module: str) -> str:
    """The layer entry a module belongs to (``paged.block.manager`` -> ``paged.block``)."""
    while module not in RANK:
        module = module.rsplit(".", 1)[0]
    return module


def _imports(module: str) -> set[str]:
    """The ``paged`` modules ``module`` imports (a ``from pkg import sub`` of a submodule counts as ``sub``)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
            found.update(subs if len(subs) == len(node.names) else subs + [base])
    return {m for m in found if m == "paged" or m.startswith("paged.")}


GRAPH = {module: _imports(module) for module in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        assert _owner(module) in RANK


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    own = _owner(module)
    for target in GRAPH[module]:
        assert target in MODULES, f"{module} imports {target}, which does not exist"
        other = _owner(target)
        if other == own or {own, other} <= set(NOTEBOOK_PACKAGES):  # a notebook may reuse another's (no cycle)
            continue
        assert RANK[other] < RANK[own], (
            f"{module} (layer {RANK[own]}: {own}) imports {target} (layer {RANK[other]}: {other}): "
            f"imports must point down {[list(layer) for layer in LAYERS]}")


def test_no_import_cycle():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in GRAPH[v]:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_every_experiments_module_sits_in_a_notebook_or_infrastructure_package():
    """paged/experiments/ holds only its packages: the infrastructure (notebook, serving) and one per notebook."""
    loose = sorted(p.name for p in (ROOT / "experiments").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside a package of paged/experiments/: {loose}"
    assert len(NOTEBOOK_PACKAGES) >= 6
    for module in MODULES:
        if module.startswith("paged.experiments."):
            assert _owner(module) != "paged.experiments", module


def test_the_infrastructure_imports_no_notebook_package():
    for module, targets in GRAPH.items():
        if _owner(module) in ("paged.experiments.notebook", "paged.experiments.serving"):
            bad = sorted(t for t in targets if _owner(t) in NOTEBOOK_PACKAGES)
            assert not bad, f"{module} imports notebook code {bad}"


def test_a_handful_of_modules_at_the_top():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "atomic.py", "cli.py", "systems.py"]


def test_the_simulator_path_imports_neither_torch_nor_transformers():
    """``python -m paged simulate`` must start fast: nothing it imports may pull in torch."""
    heavy = {"torch", "transformers", "triton", "matplotlib", "seaborn", "datasets", "tokenizers"}
    seen, todo = set(), ["paged.cli", "paged.experiments.serving", "paged.sim", "paged.sim.simulator"]
    third_party = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = MODULES[module]
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only: function-level imports run when called
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            third_party.update(n.split(".")[0] for n in names if not n.startswith("paged"))
        todo += [m for m in GRAPH[module] if m not in seen]
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
    assert not third_party & heavy, sorted(third_party & heavy)


def _private_names_defined_here() -> set[str]:
    """Names starting with one underscore that the package itself defines: methods, class attributes and
    ``__slots__``, attributes set on ``self`` or ``cls``, and module-level functions, classes and constants
    (not an attribute set on a third-party object)."""
    names = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                      for t in node.targets):
                names.update(e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)
                             and isinstance(e.value, str))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_module_reads_another_objects_private_attribute():
    """``obj._name`` of a name the package defines is read or set only on ``self`` / ``cls`` (a subclass's own
    inherited state included) or through ``super()``: a class's private fields are its own business, so a
    reader of one class never has to know another's insides. Third-party privates (e.g. transformers'
    ``config._attn_implementation``) are not the package's to rename."""
    private = _private_names_defined_here()
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr in private):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "reads of another object's private attribute:\n" + "\n".join(found)


def test_the_papers_mechanisms_never_import_the_fast_path():
    """paged/block/ and paged/core/ are the reference (§4): the simulator's fast path (paged/sim/fast/) builds on
    them, never the other way, so deleting it changes nothing they do."""
    for module, targets in GRAPH.items():
        if module.startswith(("paged.block", "paged.core", "paged.contiguous", "paged.systems")):
            bad = sorted(t for t in targets if t.startswith("paged.sim"))
            assert not bad, f"{module} imports {bad}"
    users = sorted(m for m, targets in GRAPH.items() if any(t.startswith("paged.sim.fast") for t in targets)
                   and not m.startswith(("paged.sim.fast", "paged.bench")))  # benchmarks time both paths
    assert users == ["paged.sim.config", "paged.sim.simulator"], users  # the switch is reached from these alone


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_docstrings_fit_a_screen(module):
    """A module's opening says what it is and why in a screen (at most 30 lines); measurement logs belong
    in docs/benchmarks.md."""
    doc = ast.get_docstring(ast.parse(MODULES[module].read_text()), clean=False) or ""
    assert doc.count("\n") + 1 <= 30, f"{module}: a {doc.count(chr(10)) + 1}-line module docstring"
