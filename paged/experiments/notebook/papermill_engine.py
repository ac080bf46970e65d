"""Papermill engine ``paged``: papermill's nbclient engine on this interpreter's kernel.

``papermill --engine paged ...`` (the package's entry point ``papermill.engine``) runs a notebook
as papermill's default engine does, with the kernel started by
:class:`paged.experiments.notebook.kernel.ThisPythonKernelManager` (``python3`` is this
interpreter's ipykernel, over CurveZMQ). Papermill imports this module while it is first imported
itself, so it imports nothing from papermill but :mod:`papermill.engines`, which is complete by then.
"""

from __future__ import annotations

from papermill.engines import NBClientEngine

from paged.experiments.notebook.kernel import ThisPythonKernelManager

__all__ = ["ThisPythonEngine"]


class ThisPythonEngine(NBClientEngine):
    """Papermill's nbclient engine on :class:`~paged.experiments.notebook.kernel.ThisPythonKernelManager`."""

    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
        """Execute ``nb_man``'s notebook as :class:`NBClientEngine` does, on this interpreter's kernel."""
        kwargs.setdefault("kernel_manager_class", ThisPythonKernelManager)
        return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
