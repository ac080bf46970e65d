"""The package data ``paged.data`` (the project's ``data/`` folder): committed traces and files.

Read through :mod:`importlib.resources`, so a wheel install finds them with no checkout around. Where
``paged`` is imported from a checkout's source folder that was not installed (Python puts the
working folder first on its path: a kernel or script started in a clone's root imports ``./paged``
even when the wheel is installed), ``paged.data`` does not exist and the checkout's ``data/`` beside
``paged/`` is read instead.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["counted_file_name", "data_path", "data_root"]


def data_root() -> Path:
    """The folder of the package data (module docstring).

    Raises:
        FileNotFoundError: neither ``paged.data`` nor a checkout's ``data/`` is there.
    """
    try:
        return Path(str(resources.files("paged.data")))
    except ModuleNotFoundError:  # the source folder, not installed: its checkout's data/
        root = Path(__file__).resolve().parents[2] / "data"
        if not root.is_dir():
            raise FileNotFoundError(f"no package data: paged.data is not installed and {root} does not exist "
                                    "(pip install the project, or run from a checkout)") from None
        return root


def data_path(name: str) -> Path:
    """Path of a file (or folder) of the package data ``paged.data`` (the project's ``data/``).

    Raises:
        FileNotFoundError: naming the file, if the package data does not hold it.
    """
    path = data_root() / name
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
