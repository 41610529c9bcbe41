"""Prediction from traces: behaviour calibrated from lrref's traces, priced on a hardware spec, replayed or planned.

- :mod:`lrsim.prediction.calibrate`     fit the simulator's parameters (acceptance, step lengths, costs) from traces
- :mod:`lrsim.prediction.vllm_metrics`  token acceptance from a dump of vLLM's speculative-decoding counters
- :mod:`lrsim.prediction.compose`       a prediction = behaviour (from traces or numbers) + a hardware spec; plans
- :mod:`lrsim.prediction.replay`        replay recorded workloads on the traces' own costs; plan from traces
- :mod:`lrsim.prediction.outcome`       what predictions and plans return

The package exports :mod:`~lrsim.prediction.outcome`'s names (light); import the others by name.  (Not
``lrsim.predict``: that is the API's function.)
"""

from .outcome import TINY_C2, Prediction, TracePlan, candidates, format_prediction, format_trace_plan

__all__ = ["TINY_C2", "Prediction", "TracePlan", "candidates", "format_prediction", "format_trace_plan"]
