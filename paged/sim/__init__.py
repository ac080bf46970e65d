"""The simulated executor (§6): paper-scale models and servers, time from a GPU cost model.

* :mod:`~paged.sim.model_spec`: model shapes and KV bytes per token (§3, Table 1);
  :mod:`~paged.sim.model_config`: the same from a Hugging Face ``config.json`` (GQA / MQA models of
  today, shipped in ``data/configs/``); :mod:`~paged.sim.gpu_spec`: GPUs from their datasheets;
  :mod:`~paged.sim.deployment`: a model on ``tp`` of them, its KV cache memory or why it does not fit;
* :mod:`~paged.sim.cost_model`: how long an iteration takes on Table 1's A100 servers (GPU work and
  the sourced host costs), :mod:`~paged.sim.linear_cost`: the same form fitted to a profile of the
  real engine, :mod:`~paged.sim.iteration_cost`: the dispatch both share;
* :mod:`~paged.sim.config`: :class:`~paged.sim.config.ServingConfig`, one run's settings, building the
  cost model, the KV cache manager and the scheduler's budgets;
* :mod:`~paged.sim.simulator`: :func:`simulate`, the real scheduler and KV cache managers with simulated
  time, through the serving loop the real engine uses (:mod:`paged.core.serving_loop`) with the
  :class:`~paged.sim.executor.SimulatedExecutor`; :mod:`~paged.sim.beam_replay`: recorded beam searches;
* :mod:`~paged.sim.fast`: the same results sooner (fast-forward, calendars), behind one switch;
* :mod:`~paged.sim.static_batching`: FasterTransformer's request-level batching (§6.1).

Memory behaviour is never modelled: it is the real allocators'. Only time is.
"""

from paged.sim.config import ServingConfig
from paged.sim.cost_model import CostModel, get_cost_model
from paged.sim.executor import SimulatedExecutor
from paged.sim.model_spec import ModelSpec, get_model
from paged.sim.simulator import simulate

__all__ = ["CostModel", "ModelSpec", "ServingConfig", "SimulatedExecutor", "get_cost_model", "get_model", "simulate"]
