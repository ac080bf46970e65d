"""Prose stands on its own: no reference to a work item ("issue 10") a reader of the repository cannot open.

References to other projects' trackers (``vLLM issue #249``) name the project and stay.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATTERN = re.compile(r"(?<!vLLM )(?<!vllm )\bissues?\s*#?\d+", re.IGNORECASE)
PLACES = ["paged", "tests", "notebooks", "docs", "Makefile", "README.md", "data/README.md", "pyproject.toml", ".ci"]


def _files():
    for place in PLACES:
        path = ROOT / place
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in path.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".ipynb", ".toml", ""}
                        and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts)


def test_no_work_item_references():
    found = []
    for path in _files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if PATTERN.search(line) and path.name != Path(__file__).name:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "work-item references a reader cannot follow:\n" + "\n".join(found)
