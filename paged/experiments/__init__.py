"""The experiments (§6, §7): one driver per notebook, the figures, the paper's numbers.

The top of the library: drivers turn runs of the simulator and the engine into the paper's
tables and figures. Notebooks hold parameters, a few calls into these modules and the figures.

* :mod:`~paged.experiments.fragmentation`: notebook 01 (Fig. 2, waste vs block size);
* :mod:`~paged.experiments.serving` and :mod:`~paged.experiments.throughput`: notebook 03;
* :mod:`~paged.experiments.kernel`: notebook 04 (Fig. 18a);
* :mod:`~paged.experiments.engine` and :mod:`~paged.experiments.engine_profile`: notebook 05;
* :mod:`~paged.experiments.paper`: every number of the paper the notebooks compare with;
* :mod:`~paged.experiments.plotting`, :mod:`~paged.experiments.notebook`: figure style and papermill checks.
"""
