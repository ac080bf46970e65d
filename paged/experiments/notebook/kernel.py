"""The kernel the project's notebook runs start: this interpreter's, over an encrypted connection.

The notebooks name the kernel ``python3``, the one every environment with ipykernel has (a
``pip install`` of the wheel, the conda environment, ``make venv``). Jupyter finds a kernel by
name along its search path (``jupyter kernelspec list``), where a ``python3`` of another
environment can come before this environment's own: one registered per user
(``python -m ipykernel install --user`` without ``--name``) outside a virtual environment, or
one on ``JUPYTER_PATH``. The project's runners (``make reproduce``, ``make quick``,
``python -m paged sweep-notebook``, the tests) therefore start ``python3`` from
``sys.executable`` explicitly, through :class:`ThisPythonKernelManager`; any other kernel name
(e.g. one registered with ``python -m ipykernel install --user --name paged``) is looked up as
usual.

Transport: the manager talks to its local kernel over ZeroMQ on 127.0.0.1, and ipykernel logs a
warning ("Kernel is running over TCP without encryption") for a connection without CurveZMQ
keys. The manager provisions them (jupyter_client's ``transport_encryption="auto"``: keys for
kernels whose spec declares ``supported_encryption: ["curve"]``, as ipykernel's does) wherever
pyzmq has CurveZMQ; with an older jupyter_client, or a pyzmq built without libsodium, the
connection stays plain TCP on the loopback interface, as Jupyter's default is.

Use :func:`execute_notebook` from Python, or papermill's command line with the engine of
:mod:`paged.experiments.notebook.papermill_engine` (papermill engine ``paged``, registered by the
package's entry points)::

    papermill --engine paged notebooks/00_tour.ipynb build/00_tour.ipynb

This module imports papermill only inside :func:`execute_notebook`: papermill loads the engines of
its entry points while it is first imported, and the engine's module imports this one.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import zmq
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpec
from jupyter_client.manager import AsyncKernelManager

__all__ = ["KERNEL_NAME", "ENGINE_NAME", "ThisPythonKernelManager", "execute_notebook", "encrypts_transport"]

#: The kernel the notebooks name in their metadata (ipykernel's native kernel).
KERNEL_NAME = NATIVE_KERNEL_NAME
#: The papermill engine that runs notebooks on :class:`ThisPythonKernelManager`
#: (:class:`paged.experiments.notebook.papermill_engine.ThisPythonEngine`).
ENGINE_NAME = "paged"


def encrypts_transport() -> bool:
    """True where :class:`ThisPythonKernelManager` provisions CurveZMQ keys: jupyter_client has
    the ``transport_encryption`` setting and pyzmq was built with CurveZMQ (libsodium)."""
    return "transport_encryption" in AsyncKernelManager.class_trait_names() and bool(zmq.has("curve"))


class ThisPythonKernelManager(AsyncKernelManager):
    """jupyter_client's kernel manager, with ``python3`` meaning this interpreter's ipykernel
    (``sys.executable -m ipykernel_launcher``) wherever Jupyter's search path would find one, and
    CurveZMQ keys provisioned for the connection where :func:`encrypts_transport`.

    Other kernel names resolve through Jupyter's kernel-spec search path unchanged.

    Shutdown is quiet: jupyter_client interrupts a kernel before every shutdown (SIGINT to its
    process group), which makes an idle ipykernel log "KeyboardInterrupt caught in kernel" and a
    busy one print a traceback; this manager does not, and after a runner's Ctrl-C
    (:attr:`abandoned`, set by :func:`paged.experiments.notebook.execute.run_notebook`) it kills the
    kernel and its worker processes at once instead of waiting for a graceful exit.
    """

    #: Set by a runner on Ctrl-C: kernels shut down now (killed), not after a graceful wait.
    abandoned = threading.Event()

    def __init__(self, **kwargs):
        if encrypts_transport():
            kwargs.setdefault("transport_encryption", "auto")
        super().__init__(**kwargs)

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down:  # shutting down: the kernel is told to exit (or killed), not interrupted
            return
        await super()._async_interrupt_kernel()

    async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Shut the kernel down (at once, ``now``, after a runner's Ctrl-C: :attr:`abandoned`)."""
        await super().shutdown_kernel(now=now or self.abandoned.is_set(), restart=restart)

    @property
    def kernel_spec(self) -> KernelSpec | None:
        """This interpreter's ipykernel spec for ``python3``; any other name's from the search path."""
        if self._kernel_spec is None and self.kernel_name == KERNEL_NAME:
            from ipykernel.kernelspec import RESOURCES, get_kernel_dict

            spec = get_kernel_dict()
            spec["argv"][0] = sys.executable  # get_kernel_dict's default; stated, not assumed
            self._kernel_spec = KernelSpec(resource_dir=RESOURCES, **spec)
        return super().kernel_spec


def execute_notebook(notebook: str | Path, output: str | Path, parameters: dict | None = None, *,
                     cwd: str | Path | None = None, kernel: str | None = None, **kwargs):
    """Run ``notebook`` with papermill into ``output`` on this interpreter's kernel.

    Args:
        notebook, output: paths of the notebook and of the executed copy (written after every cell).
        parameters: papermill parameters (injected after the cell tagged ``parameters``).
        cwd: the kernel's working directory (default: the notebook's folder, where the notebooks'
            relative paths, e.g. ``output_dir="../figures"``, start).
        kernel: a kernel name; None: :data:`KERNEL_NAME` (this interpreter).
        kwargs: passed on to :func:`papermill.execute_notebook` (default ``progress_bar=False``).

    Returns:
        The executed notebook (an ``nbformat`` node), as papermill returns it.

    Raises:
        papermill.PapermillExecutionError: a cell raised (``output`` holds the notebook up to it).
    """
    import papermill as pm

    kwargs.setdefault("progress_bar", False)
    # Papermill's default engine with this module's kernel manager: what engine "paged" does, and
    # independent of whether the package's entry points are installed (a checkout on PYTHONPATH).
    return pm.execute_notebook(str(notebook), str(output), parameters=parameters or {},
                               cwd=str(cwd if cwd is not None else Path(notebook).parent),
                               kernel_name=kernel or KERNEL_NAME, kernel_manager_class=ThisPythonKernelManager,
                               **kwargs)
