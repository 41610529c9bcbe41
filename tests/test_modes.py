"""The mode registry (lrsim.modes): every mode rule has one home, and the tuples, the gamma -> k1 rule, lrref's
parse_mode and thread rule read it."""

import re
from pathlib import Path

import pytest

from lrsim.modes import (
    ALL_DECODE_MODES,
    DECODE_MODES,
    LR_DECODE_MODES,
    REGISTRY,
    SERVE_MODES,
    SIM_MODE,
    decode_mode,
    gamma_of_k1,
    k1_of_gamma,
    lookahead_schedule,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_tuples_come_from_the_registry():
    assert DECODE_MODES == ("ar", "sd", "lr-sync", "lr-async")
    assert SERVE_MODES == DECODE_MODES + ("auto",)
    assert LR_DECODE_MODES == ("lr-sync", "lr-async")
    assert ALL_DECODE_MODES == ("ar", "sd", "lr-sync", "lr-sync+sd", "lr-async", "lr-async+sd")
    assert SIM_MODE == {"ar": "ar", "sd": "ar", "lr-sync": "sync", "lr-async": "async"}


@pytest.mark.parametrize("gamma", [1, 2, 5])
def test_gamma_to_k1_and_back(gamma):
    assert lookahead_schedule("lr-sync", gamma) == ("sync", gamma + 1, "per_pair")  # drafts + the target's step
    assert lookahead_schedule("lr-async+sd", gamma) == ("async", gamma, "one")
    assert lookahead_schedule("sd", gamma) == ("ar", 1, "one")
    for sim in ("sync", "async"):
        assert gamma_of_k1(sim, k1_of_gamma(sim, gamma)) == gamma


def test_what_each_mode_needs():
    assert [n for n, m in REGISTRY.items() if m.draft] == ["lr-sync", "lr-async", "auto"]
    assert [n for n, m in REGISTRY.items() if m.widths] == ["lr-sync"]
    assert REGISTRY["lr-async"].threads_field == "target_threads" and REGISTRY["lr-sync"].threads_field == "threads"
    with pytest.raises(ValueError, match="unknown decoding mode 'lr-fast'"):
        decode_mode("lr-fast")
    with pytest.raises(ValueError, match="no one schedule"):
        lookahead_schedule("auto", 2)


def test_lrref_reads_the_registry():
    from lrref.config import DRAFT_IN_PROCESS, DRAFT_MODES, DecodeConfig, parse_mode

    assert DRAFT_IN_PROCESS == ("lr-sync", "auto") and DRAFT_MODES == ("lr-sync", "lr-async", "auto")
    assert parse_mode("sd") == ("ar", True) and parse_mode("lr+sd") == ("lr-async", True)
    assert DecodeConfig(mode="lr-async", target_threads=3, threads=2).main_threads == 3
    assert DecodeConfig(mode="lr-sync+sd", target_threads=3, threads=2).main_threads == 2


def test_the_decoder_dispatches_on_the_registry_not_on_names():
    for path in ("lrref/decode/decoder.py", "lrref/decode/cycles.py", "lrref/session.py"):
        text = (ROOT / path).read_text()
        assert not re.findall(r"(?:==|!=) \"(?:sd|lr-sync|lr-async)\"|base (?:==|!=) \"ar\"", text), path
