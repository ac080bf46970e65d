"""The models shipped inside the package, by name: ``LLM("paged-tiny")`` from a checkout or a wheel.

The small Llama-architecture model trained on ShareGPT (``make model``; ``data/README.md`` says how)
is installed with the package as ``paged.data/models/sharegpt-llama-tiny``, so its directory is found
wherever the package is installed; no hub download, no path into a checkout.
"""

from __future__ import annotations

from pathlib import Path

from paged.workloads.package_data import data_path

__all__ = ["SHIPPED_MODELS", "shipped_model_path"]

#: Names of the shipped models -> their directory inside ``paged.data``.
SHIPPED_MODELS = {"paged-tiny": "models/sharegpt-llama-tiny"}


def shipped_model_path(name: str = "paged-tiny") -> Path:
    """The directory of a shipped model (a transformers model directory: ``config.json``, weights,
    tokenizer), e.g. ``shipped_model_path()`` for the default ``"paged-tiny"``.

    Raises:
        ValueError: if ``name`` is not in :data:`SHIPPED_MODELS` (the message lists them).
        FileNotFoundError: if the installation lacks the model's files.
    """
    if name not in SHIPPED_MODELS:
        raise ValueError(f"no shipped model named {name!r}; the shipped models are {sorted(SHIPPED_MODELS)}")
    path = data_path(SHIPPED_MODELS[name])
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"shipped model {name!r}: {path} has no config.json (an incomplete installation)")
    return path
