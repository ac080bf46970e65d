"""The package data ``paged.data`` (the project's ``data/`` folder): committed traces and files.

Read through :mod:`importlib.resources`, so a wheel install finds them with no checkout around.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["counted_file_name", "data_path"]


def data_path(name: str) -> Path:
    """Path of a file (or folder) of the package data ``paged.data`` (the project's ``data/``).

    Raises:
        FileNotFoundError: naming the file, if the package data does not hold it.
    """
    path = Path(str(resources.files("paged.data").joinpath(name)))
    if not path.exists():
        raise FileNotFoundError(f"package data file {name!r} not found (looked for {path})")
    return path


def counted_file_name(stem: str, tokenizer: str) -> str:
    """The file name of a committed trace counted with ``tokenizer`` (a canonical name or a
    tokenizer directory): ``<stem>.csv`` for cl100k (the project's first tokenizer, so the
    original ShareGPT files keep their names), ``<stem>_gpt2.csv`` for GPT-2, else
    ``<stem>_<directory name>.csv``."""
    suffix = "" if tokenizer == "cl100k" else "_gpt2" if tokenizer == "gpt2" else "_" + Path(tokenizer).name
    return f"{stem}{suffix}.csv"
