"""The project's data, installed as the package ``paged.data``: committed length-only traces and the small model.

Read them through :func:`paged.workloads.data_path` (``importlib.resources``), so a wheel install finds
them with no checkout around. ``data/README.md`` says where every file came from and how to rebuild it.
"""
