"""lrref writes the header's `setting`; it says what lrsim decodes from the same header's lrref config."""

import dataclasses

import pytest

pytest.importorskip("torch")

from lrref.decode.decoder import DecodeConfig, make_header  # noqa: E402
from lrsim.trace import Setting, recorded_setting  # noqa: E402


@pytest.mark.parametrize("kw, expected", [
    (dict(mode="ar"), Setting("ar", 1, 1, 1, "one", "threads=2")),
    (dict(mode="sd", threads=3), Setting("ar", 1, 5, 1, "one", "threads=3")),
    (dict(mode="lr-sync", gamma=3), Setting("sync", 4, 1, 1, "per_pair", "threads=2", colocated="draft+verifier")),
    (dict(mode="lr-sync+sd", gamma=2, ngram=6),
     Setting("sync", 3, 7, 1, "per_pair", "threads=2", colocated="draft+verifier")),
    (dict(mode="lr-sync", gamma=2, width=2, draft_temperature=0.7),
     Setting("sync", 3, 1, 2, "per_pair", "threads=2", colocated="draft+verifier")),
    (dict(mode="lr-async", gamma=3, target_threads=1), Setting("async", 3, 1, 1, "one", "threads=1", colocated="verifier")),
    (dict(mode="lr+sd", gamma=2), Setting("async", 2, 5, 1, "one", "threads=1", colocated="verifier")),
])
def test_make_header_writes_the_setting_lrsim_would_decode(kw, expected):
    header = make_header(DecodeConfig(**kw), {}, "hf", None)
    assert recorded_setting(header) == expected
    # an older lrref trace of the same run did not record where its roles ran: lrsim reads "none" (devices of
    # their own), as it priced such traces before
    legacy = dataclasses.replace(header, setting=None)
    assert recorded_setting(legacy) == dataclasses.replace(expected, colocated="none")
