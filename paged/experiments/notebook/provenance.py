"""What made a figure: the notebook, its parameters, the package code it uses and the environment, as one fingerprint.

A notebook's results depend on four things, and :func:`fingerprint` hashes each of them:

* **the notebook**: its cells' text (outputs, execution counts and metadata do not count);
* **the code it uses**: the modules of ``paged`` its cells import, and the modules those import, at
  any depth (:func:`code_dependencies`; an import inside a function counts, since it runs in a worker
  process too), with the non-Python files of their folders (the C kernel's source). A module the
  notebook never reaches (``paged/cli.py`` for every notebook, the engine for notebook 01) is not
  part of its fingerprint, so changing it reruns nothing;
* **the data**: every file of the package data ``paged.data`` (the traces, model configurations and
  the small model; the notebooks share them, so a change reruns every notebook);
* **the environment**: the versions of the packages that shape numbers and file bytes, the font the
  figures embed and the libraries that draw and compress them (:func:`environment`).

The parameters complete the fingerprint. ``make reproduce`` (:mod:`paged.experiments.notebook.reproduce`)
reruns a notebook exactly when its fingerprint or any of its figures differs from what
``figures/MANIFEST.json`` records. A runner hands the fingerprint of a run to its kernel in the
environment variable :data:`RUN_ENV` (:func:`run_context` reads it), so each saved figure records it.
Cost: hashing the sources (under 1 MB) and the package data (about 20 MB), tens of milliseconds.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import zlib
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

__all__ = ["RUN_ENV", "PACKAGE_ROOT", "code_dependencies", "data_digest", "environment", "environment_digest",
           "fingerprint", "notebook_digest", "run_context", "digest", "FIGURE_PACKAGES", "FONT_FAMILY", "FILE_RC",
           "pinned_font"]

#: Environment variable through which a runner tells its kernel about the run (JSON, :func:`run_context`).
RUN_ENV = "PAGED_RUN"
#: The folder of the package ``paged`` (a checkout's ``paged/`` or an installed one).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: Distributions whose versions shape the numbers or the bytes of the figure files.
FIGURE_PACKAGES = ("paged", "numpy", "pandas", "matplotlib", "seaborn", "fonttools", "pillow", "kiwisolver", "cycler",
                   "contourpy", "pyparsing", "torch", "triton", "transformers", "tokenizers", "tiktoken", "datasets",
                   "joblib", "papermill", "nbformat", "nbconvert", "ipykernel", "ipywidgets")


#: The one font family of every figure: DejaVu Sans from matplotlib's own data folder, the same file
#: on every machine with the same matplotlib (seaborn's default list starts with Arial, which a
#: machine may or may not have).
FONT_FAMILY = "DejaVu Sans"
#: Settings that decide the saved files' bytes besides the drawing (recorded in the manifest's environment).
FILE_RC = {"savefig.dpi": 150, "savefig.bbox": "tight", "svg.hashsalt": "paged", "pdf.compression": 6,
           "pdf.fonttype": 42, "ps.fonttype": 42}


def pinned_font() -> dict:
    """The font files figures embed (:func:`paged.experiments.notebook.plotting.use_style` pins them): ``{"family", "files": {"normal"|"bold": {"file", "sha256"}},
    "rc": FILE_RC}``, each file as matplotlib's font lookup finds it (a path inside matplotlib's data
    folder, ``mpl-data/...``, where it comes from there, as it should)."""
    import hashlib

    from matplotlib import font_manager

    import matplotlib

    data = Path(matplotlib.get_data_path()).resolve()
    files = {}
    for weight in ("normal", "bold"):
        path = Path(font_manager.findfont(font_manager.FontProperties(family=FONT_FAMILY, weight=weight),
                                          fallback_to_default=False)).resolve()
        shown = f"mpl-data/{path.relative_to(data).as_posix()}" if path.is_relative_to(data) else str(path)
        files[weight] = {"file": shown, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {"family": FONT_FAMILY, "files": files, "rc": dict(FILE_RC)}


def digest(value) -> str:
    """SHA-256 (hex) of ``value``: bytes as they are, anything else as canonical JSON."""
    data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()


def notebook_digest(notebook: str | Path) -> str:
    """SHA-256 of a notebook's cells (type and source only): what a rerun would execute and show.

    Raises:
        OSError: the notebook cannot be read; ValueError: it is not JSON.
    """
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    return digest([[c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]]
                   for c in cells])


def _module_path(name: str) -> Path | None:
    """The file of module ``name`` (``paged.x.y``) under :data:`PACKAGE_ROOT`, or None."""
    parts = name.split(".")
    if parts[0] != "paged":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _lazy_names(tree: ast.Module) -> dict[str, str]:
    """A package's ``_LAZY`` map (public name -> module imported on first access by its ``__getattr__``)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            value = eval(compile(ast.Expression(node.value), "<_LAZY>", "eval"), {"__builtins__": {"dict": dict}})  # noqa: S307
            return {str(k): str(v) for k, v in value.items()}
    return {}


@lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imports(tree: ast.AST, package: str) -> set[str]:
    """The ``paged`` modules that the import statements of ``tree`` name (at any depth), from ``package``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from package's parents
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if _module_path(sub) is not None:
                    found.add(sub)
                else:  # a name a package imports lazily (paged.LLM -> paged.engine.llm)
                    init = _module_path(base)
                    if init is not None and init.name == "__init__.py":
                        lazy = _lazy_names(_parsed(init)).get(alias.name)
                        if lazy:
                            found.add(lazy)
    return {m for m in found if m == "paged" or m.startswith("paged.")}


def _closure(start: set[str]) -> set[str]:
    """Every module reachable from ``start``, with the packages (``__init__``) above each."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen or _module_path(name) is None:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a and a.b first
        path = _module_path(name)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = _parsed(path)
        todo += _imports(tree, package)
    return seen


def _notebook_imports(notebook: str | Path) -> set[str]:
    """The ``paged`` modules the notebook's code cells import (IPython magics and shell lines skipped)."""
    found: set[str] = set()
    for cell in json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        try:
            found |= _imports(ast.parse(code), "paged")
        except SyntaxError:
            continue
    return found


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def code_dependencies(notebook: str | Path) -> dict[str, str]:
    """``{path relative to the package's parent: SHA-256}`` of every ``paged`` file the notebook's
    code can run (module docstring): the import closure of its cells' imports, and the non-Python
    files (``*.c``) in the folders of those modules.

    Raises:
        OSError: the notebook cannot be read.
    """
    files: set[Path] = set()
    for name in _closure(_notebook_imports(notebook)):
        path = _module_path(name)
        files.add(path)
        files.update(p for p in path.parent.glob("*.c"))
    return {p.relative_to(PACKAGE_ROOT.parent).as_posix(): _file_sha(p) for p in sorted(files)}


def _data_root() -> Path | None:
    try:
        return Path(str(resources.files("paged.data")))
    except ModuleNotFoundError:  # the source folder without installation: the checkout's data/
        root = PACKAGE_ROOT.parent / "data"
        return root if root.is_dir() else None


def data_digest() -> str | None:
    """SHA-256 over every file of the package data (names and bytes; ``*.md`` prose and caches
    excluded), or None where there is no package data."""
    root = _data_root()
    if root is None:
        return None
    entries = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if path.suffix in (".md", ".pyc") or "__pycache__" in rel.parts:
            continue
        entries.append([rel.as_posix(), _file_sha(path)])
    return digest(entries)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """What shapes the figure files besides the code: Python's and :data:`FIGURE_PACKAGES`' versions,
    the font every figure uses (:func:`pinned_font`), FreeType (glyph outlines and PNG
    rendering) and zlib (Python's, for PDF streams; Pillow's, for PNG) versions."""
    try:
        from PIL import features
        pillow_zlib = features.version("zlib")
    except ImportError:  # pragma: no cover - matplotlib needs Pillow
        pillow_zlib = None
    from matplotlib import ft2font

    return {"python": platform.python_version(), "packages": {n: _version(n) for n in FIGURE_PACKAGES},
            "font": pinned_font(), "freetype": ft2font.__freetype_version__,
            "zlib": {"python": zlib.ZLIB_RUNTIME_VERSION, "pillow": pillow_zlib}}


def environment_digest(env: dict | None = None) -> str:
    """The first 16 hex digits of :func:`digest` of ``env`` (default: :func:`environment`): the
    environment's key in the manifest."""
    return digest(environment() if env is None else env)[:16]


def fingerprint(notebook: str | Path, parameters: dict, *, env: dict | None = None) -> dict:
    """The fingerprint of running ``notebook`` with ``parameters`` here (module docstring).

    Returns:
        ``{"fingerprint": SHA-256 of the rest, "notebook": cells' SHA-256, "code": {path: SHA-256},
        "data": SHA-256, "environment": :func:`environment_digest`, "parameters": parameters}``.

    Raises:
        OSError: the notebook cannot be read.
    """
    env = environment() if env is None else env
    parts = {"notebook": notebook_digest(notebook), "code": code_dependencies(notebook), "data": data_digest(),
             "environment": environment_digest(env), "parameters": json.loads(json.dumps(parameters, default=str))}
    return {"fingerprint": digest(parts), **parts}


def run_context() -> dict | None:
    """What the runner that started this kernel said about the run (:data:`RUN_ENV`): ``{"notebook",
    "fingerprint", "runner", "target", "staging"}``; None in a kernel no runner started (JupyterLab,
    plain papermill) or when the variable is not valid JSON."""
    text = os.environ.get(RUN_ENV)
    if not text:
        return None
    try:
        context = json.loads(text)
    except ValueError:
        return None
    return context if isinstance(context, dict) else None
