"""The experiments (§6, §7): one package per notebook, the notebooks' machinery, the paper's numbers.

The top of the library: drivers turn runs of the simulator and the engine into the paper's
tables and figures. Notebooks hold parameters, a few calls into these modules and the figures.
Layout (which file holds what):

* ``notebook/`` (infrastructure, imports no notebook package): ``parameters.py`` (papermill
  parameter checks), ``kernel.py`` (the kernel notebook runs start: this interpreter's),
  ``papermill_engine.py`` (papermill ``--engine paged``), ``progress.py`` (progress bars of long
  steps), ``outputs.py`` (what an executed notebook must not hold), ``quick.py`` (``make quick``),
  ``plotting.py`` (figure style, saving, metadata), ``execute.py`` (one notebook run: figures
  committed as a set, quiet on Ctrl-C), ``reproduce.py`` (``make reproduce``: what is out of date),
  ``provenance.py`` (what made a figure: code, data, environment fingerprint), ``figure_set.py``
  (figure files and manifest entries changed together), ``manifest.py`` (``MANIFEST.json``),
  ``report.py`` (the report of executed notebooks),
  ``claims.py`` (README.md's claims table from the figures' CSVs), ``tables.py`` (tables shown whole),
  ``jobs.py`` (many calls of one function, here or on a Dask / Ray cluster, past failures),
  ``sweep.py`` (notebook sweeps: one run per parameter set, resumable), ``run_folder.py`` (a sweep on
  disk: run folders, records, the lock), ``sweep_summary.py`` (a sweep's summary table and figure),
  ``fingerprint.py`` (the package's code as one hash), ``paper.py`` (every number of the paper the
  notebooks compare with);
* ``serving/`` (simulated serving shared by notebooks 02, 03, 05; imports no notebook package):
  ``point.py`` (one simulated run and its metrics, the systems, the thresholds), ``sweeps.py``
  (many points in parallel, known rows reused), ``sustained.py`` (saturated throughput, the
  sustained-rate search), ``run_length.py`` (paper-length traces, convergence, early stop);
* ``nb00_tour/``: ``tour.py`` (the steps of the tour), ``tour_figures.py``, ``explorer.py``;
* ``nb01_fragmentation/``: ``fragmentation.py`` (Fig. 2, waste vs block size), ``workloads.py``
  (Fig. 11, trace lengths);
* ``nb02_sharing/``: ``sharing.py`` (Fig. 14-16 runs), ``sharing_figures.py``, ``comparison.py``
  (the paper-vs-this-run table);
* ``nb03_throughput/``: ``throughput.py`` (Fig. 12/13/17 runs, ratio tables, host-cost
  sensitivity), ``efficiency_sensitivity.py`` (the efficiency-factor panel), ``throughput_figures.py``,
  ``comparison.py`` (the paper-vs-this-run table);
* ``nb04_kernel/``: ``kernel.py`` (Fig. 18a runs, roofline, figure);
* ``nb05_engine/``: ``engine.py`` (interleaved rounds on the real-model engine),
  ``hf_baselines.py``, ``engine_profile.py``, ``validation.py`` (the simulator checked against the engine);
* ``nb06_today/``: ``today.py`` (today's GQA / MQA models on A100, H100, H200 and L4),
  ``iteration_bounds.py`` (what bounds a run's iterations: compute, prefills, KV reads, host).

Notebook packages import the infrastructure, ``serving`` and (without cycles) one another.
"""
