"""lrsim: analytical and simulated speedups of Lookahead Reasoning (arXiv 2506.19830).

The public API (:mod:`lrsim.api`, typed results in :mod:`lrsim.results`)::

    import lrsim
    p = lrsim.plan(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=16)   # closed-form budget split
    print(p); p.k1, p.k2, p.speedup                                        # (4, 4, 3.817...)

:func:`plan`, :func:`simulate`, :func:`predict` (replay traces, or numbers on a
profile), :func:`simulate_serving`, :func:`check_theorems`, :func:`hardware`,
:func:`load_traces`, :func:`load_profile`, :func:`write_html`.  They import
numpy, scipy, simpy and plotly on first use, so ``import lrsim`` stays light.

Never imports torch.  Modules:

- :mod:`lrsim.theory`     the closed forms in one package: the paper's forms (g, f_sync, S1, S2, f_async, h),
                          the cost-aware speedup, their sympy derivations
- :mod:`lrsim.theorems`   automatic checks of Theorems 1-4 and the SD ceiling (closed forms, Monte Carlo, planner)
- :mod:`lrsim.montecarlo` vectorised Monte Carlo of the theorems' stochastic models
- :mod:`lrsim.planner`    exact optimum split of a parallel budget M into (k1, k2)
- :mod:`lrsim.sim`        simulator of the LR pipeline (SimPy events; sync and ar also vectorised over cycles):
                          sync/async, token SD, W, M, latencies
- :mod:`lrsim.latency`    the latency-profile format and its interpolation (below both ``cost`` and ``gpu``)
- :mod:`lrsim.cost`       the one pass-cost model: profiles by name, file or ``model:``, ``PassCost``,
                          ``HardwareSpec``, calibration of a profile from traces (docs/cost-model.md)
- :mod:`lrsim.gpu`        operator-level hardware model of GPUs nobody here measured (``model:DEVICE[:tpN]...``),
                          engine releases as versioned models (``lrsim.gpu.engines``)
- :mod:`lrsim.prediction` prediction from traces: calibrate, compose (behaviour + a hardware spec), replay,
                          vLLM's spec-decode metrics, what predictions return, a plan's workers (every core)
- :mod:`lrsim.adaptive`   adaptive LR: the policy (numpy only), its simulation, its traces
- :mod:`lrsim.serve`      serving under load: batched engines, requests, TTFT/TPOT/goodput, crossover rates
- :mod:`lrsim.dists`      distributions of step lengths, request lengths and verifier latencies
- :mod:`lrsim.sweep`      grid sweeps of the simulator (process pool or Dask), CSV/Parquet
- :mod:`lrsim.trace`      the lr-trace format shared with the reference decoder, and the run's ``setting``
- :mod:`lrsim.format`     the text of a closed-form plan and of a simulation (the CLI's and the API's)
- :mod:`lrsim.stats`      Wilson interval and batch means
- :mod:`lrsim.progress`   progress bars on stderr that start no thread (so that a process may still fork)
- :mod:`lrsim.processes`  the cores this process may use and whether it may fork (plan workers, sweeps)
- :mod:`lrsim.atomic`     atomic file writes
- :mod:`lrsim.modes`      the mode registry (each mode's rules), every mode tuple, the gamma -> k1 rule
- :mod:`lrsim.errors`     domain errors and the one CLI boundary (one line, exit 2) shared with lrref
- :mod:`lrsim.fields`     dataclass fields with help text
- :mod:`lrsim.cli`        the ``lrsim`` command (one module per subcommand in :mod:`lrsim.commands`)
- :mod:`lrsim.report_html` ``--html``: a command's findings as one self-contained page
- :mod:`lrsim.plots`      plotly figures of the closed forms and theorem regions

Old module names (``lrsim.calibrate``, ``lrsim.compose``, ``lrsim.replay``, ``lrsim.vllm_metrics``,
``lrsim.symbolic``, ``lrsim.adaptive_sim``, ``lrsim.adaptive_trace``) still import, with a
DeprecationWarning, for one release.
"""

__version__ = "0.1.0"

__all__ = ["plan", "simulate", "predict", "simulate_serving", "check_theorems", "hardware", "load_traces",
           "load_profile", "write_html", "Table", "PlanResult", "SimulationResult", "PredictionResult",
           "ServeResult", "TheoremsResult", "__version__"]

#: the public names and their modules, imported on first use (PEP 562): a command that needs none of them (the
#: ``lrsim`` CLI) does not pay for the API's imports
_API = {"plan": "api", "simulate": "api", "predict": "api", "simulate_serving": "api", "check_theorems": "api",
        "hardware": "api", "load_traces": "api", "load_profile": "api", "write_html": "api", "Table": "results",
        "PlanResult": "results", "SimulationResult": "results", "PredictionResult": "results",
        "ServeResult": "results", "TheoremsResult": "results"}


def __getattr__(name: str):
    if name in _API:
        import importlib

        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module 'lrsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
