"""Packages by concept (issue 43): the old module names import, warn and are the new modules; lrsim.adaptive's
policy loads neither the simulator nor SimPy (lrref's decoder imports it)."""

import importlib
import subprocess
import sys
import warnings

import pytest

MOVED = {"lrsim.calibrate": "lrsim.prediction.calibrate", "lrsim.compose": "lrsim.prediction.compose",
         "lrsim.replay": "lrsim.prediction.replay", "lrsim.vllm_metrics": "lrsim.prediction.vllm_metrics",
         "lrsim.symbolic": "lrsim.theory.symbolic", "lrsim.adaptive_sim": "lrsim.adaptive.sim",
         "lrsim.adaptive_trace": "lrsim.adaptive.trace"}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_name_is_the_new_module_with_a_warning(old):
    code = (f"import warnings, sys; warnings.simplefilter('error')\n"
            f"try:\n    import {old}\nexcept DeprecationWarning as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{old} moved to {MOVED[old]}; the old name goes in the next release"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_packages_keep_their_public_names():
    from lrsim import adaptive, prediction, theory
    from lrsim.adaptive.policy import Policy
    from lrsim.prediction.outcome import Prediction
    from lrsim.theory.costaware import speedup
    from lrsim.theory.forms import f_async

    assert theory.f_async is f_async and theory.speedup is speedup and adaptive.speedup is speedup
    assert adaptive.Policy is Policy and prediction.Prediction is Prediction


def test_the_policy_loads_no_simulator():
    code = ("import sys, lrsim.adaptive, lrref.decode.auto\n"
            "print(sorted(m for m in sys.modules if m in ('simpy', 'lrsim.sim', 'lrsim.adaptive.sim', 'scipy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
