"""The experiments (§6, §7): one package per notebook, the notebooks' machinery, the paper's numbers.

The top of the library: drivers turn runs of the simulator and the engine into the paper's tables and
figures; notebooks hold parameters, a few calls into these modules and the figures.

* ``notebook/``: the notebooks' machinery (papermill parameters and engine, figure style and saving,
  the manifest, the report, the claims table, sweeps, every number of the paper in ``paper.py``);
* ``serving/``: simulated serving shared by several notebooks (one run and its metrics, sweeps of runs,
  the sustained-rate search, paper-length runs);
* ``nbNN_<name>/``: one package per notebook ``notebooks/NN_<name>.ipynb``: its runs, its figures and
  its paper-vs-this-run table.

The infrastructure imports no notebook package; notebook packages import it, ``serving`` and (without
cycles) one another. docs/architecture.md says which file holds what.
"""
