"""The experiments (§6, §7): one driver per notebook, the figures, the paper's numbers.

The top of the library: drivers turn runs of the simulator and the engine into the paper's
tables and figures. Notebooks hold parameters, a few calls into these modules and the figures.

* :mod:`~paged.experiments.fragmentation`: notebook 01 (Fig. 2, waste vs block size);
* :mod:`~paged.experiments.serving` (points, sweeps, saturated throughput, sustained rates),
  :mod:`~paged.experiments.run_length` (paper-length traces, convergence, early stop),
  :mod:`~paged.experiments.capacity` (Fig. 12/13/17 runs, ratio tables, host-cost sensitivity) and
  :mod:`~paged.experiments.throughput` (figures): notebook 03;
* :mod:`~paged.experiments.kernel`: notebook 04 (Fig. 18a);
* :mod:`~paged.experiments.engine` (interleaved rounds), :mod:`~paged.experiments.hf_baselines`,
  :mod:`~paged.experiments.engine_profile` and :mod:`~paged.experiments.validation` (the simulator
  checked against the engine): notebook 05;
* :mod:`~paged.experiments.today`: notebook 06 (today's GQA / MQA models on A100, H100, H200 and L4);
* :mod:`~paged.experiments.paper`: every number of the paper the notebooks compare with;
* :mod:`~paged.experiments.plotting`, :mod:`~paged.experiments.notebook`: figure style and papermill checks.
"""
