import os

import pytest

_current: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current["item"] = item


def require_models(*names: str):
    """Skip when a model is not prepared, unless LRREF_REQUIRE_MODELS is set (CI): then fail.

    The calling test must carry the ``models`` marker (so that ``pytest -m "not models"`` leaves it out).
    """
    from lrref import models

    item = _current.get("item")
    if item is not None and item.get_closest_marker("models") is None:
        pytest.fail(f"{item.nodeid} needs models: mark it @pytest.mark.models")
    cache = models.cache_dir()
    missing = [n for n in names if not models.is_ready(n, cache)]
    if missing:
        msg = f"models not prepared in {cache}: {', '.join(missing)} (lrref models prepare --models {','.join(missing)})"
        if os.environ.get("LRREF_REQUIRE_MODELS"):
            pytest.fail(msg + " and LRREF_REQUIRE_MODELS is set")
        pytest.skip(msg)
    return [models.model_dir(n, cache) for n in names]
