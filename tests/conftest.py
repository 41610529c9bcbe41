import os

import pytest

_current: dict = {}


# The longest files of real-model tests (about 100 s and 60 s on a 2-core Zen 4, the others 50 s or less): handed
# out first to pytest-xdist's workers (--dist loadfile gives files out in collection order), so that neither is what
# one worker still runs after the other has finished (longest first: the makespan of the two workers is shortest).
LONG_FIRST = ("test_lrref_real_qwen.py", "test_lrref_real_cli.py")


def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "numprocesses", None):
        rank = {name: i for i, name in enumerate(LONG_FIRST)}
        items.sort(key=lambda it: rank.get(it.path.name, len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current["item"] = item


def require_models(*names: str, gguf: bool = False):
    """Skip when a model is not prepared, unless LRREF_REQUIRE_MODELS is set (CI): then fail.

    The calling test must carry the ``models`` marker (so that ``pytest -m "not models"`` leaves it out).
    Returns the model directories, or with ``gguf`` the joined, verified GGUF files (``--backend llamacpp``).
    """
    from lrref import models

    item = _current.get("item")
    if item is not None and item.get_closest_marker("models") is None:
        pytest.fail(f"{item.nodeid} needs models: mark it @pytest.mark.models")
    cache = models.cache_dir()
    ready = models.gguf_ready if gguf else models.is_ready
    missing = [n for n in names if not ready(n, cache)]
    if missing:
        fmt = " --format gguf" if gguf else " --format hf"
        msg = (f"models not prepared in {cache}: {', '.join(missing)} "
               f"(lrref models prepare --models {','.join(missing)}{fmt})")
        if os.environ.get("LRREF_REQUIRE_MODELS"):
            pytest.fail(msg + " and LRREF_REQUIRE_MODELS is set")
        pytest.skip(msg)
    return [models.gguf_path(n, cache) if gguf else models.model_dir(n, cache) for n in names]


class SlowTarget:
    """A target backend whose engine pauses before every forward pass (lr-async tests).

    Draft and target are the same tiny model in the lossless tests, so an unslowed draft process is
    not reliably ahead of the target (it depends on how the two cores are shared at that moment) and
    lr-async might never verify a draft; the pause plays a target that costs more than its draft.
    """

    def __init__(self, be, pause: float):
        self.be, self.pause = be, pause

    def __getattr__(self, name):
        return getattr(self.be, name)

    def __setattr__(self, name, value):
        if name == "pass_log":  # the decoder attaches its trace's pass log to the backend it was given
            setattr(self.be, name, value)
        else:
            object.__setattr__(self, name, value)

    def engine(self, *a, **kw):
        import time

        eng = self.be.engine(*a, **kw)
        step = eng.step
        eng.step = lambda: (time.sleep(self.pause), step())[1]
        return eng


@pytest.fixture(scope="session")
def html_pages(tmp_path_factory):
    """Every command's ``--html`` page (tests/html_pages.py), written once per session."""
    from html_pages import write_pages

    return write_pages(tmp_path_factory.mktemp("html"))
