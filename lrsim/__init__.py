"""lrsim: analytical and simulated speedups of Lookahead Reasoning (arXiv 2506.19830).

Never imports torch.  Modules:

- :mod:`lrsim.theory`     closed forms g, f_sync, S1, S2, f_async, parallel_dim, h
- :mod:`lrsim.symbolic`   sympy derivations of those forms and checks of the seeds' versions
- :mod:`lrsim.montecarlo` vectorised Monte Carlo of the theorems' stochastic models
- :mod:`lrsim.theorems`   automatic checks of Theorems 1-4 and the SD ceiling
- :mod:`lrsim.planner`    exact optimum split of a parallel budget M into (k1, k2)
- :mod:`lrsim.sim`        simulator of the LR pipeline (SimPy events; sync and ar also vectorised over cycles):
                          sync/async, token SD, W, M, latencies
- :mod:`lrsim.latency`    latency models T(batch, tokens) and distributions (step lengths, verifier)
- :mod:`lrsim.serve`      serving under load: batched engines, requests, TTFT/TPOT/goodput, crossover rates
- :mod:`lrsim.sweep`      grid sweeps of the simulator (process pool or Dask), CSV/Parquet
- :mod:`lrsim.trace`      the lr-trace format shared with the reference decoder, and the run's ``setting``
- :mod:`lrsim.calibrate`  fit the simulator's parameters from traces
- :mod:`lrsim.replay`     replay recorded workloads, plan from traces
- :mod:`lrsim.stats`      Wilson interval and batch means
- :mod:`lrsim.atomic`     atomic file writes
- :mod:`lrsim.modes`      mode names
- :mod:`lrsim.errors`     domain errors and the one CLI boundary (one line, exit 2) shared with lrref
- :mod:`lrsim.fields`     dataclass fields with help text
- :mod:`lrsim.cli`        the ``lrsim`` command
"""

__version__ = "0.1.0"
