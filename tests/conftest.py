import os

import pytest


def require_models(*names: str):
    """Skip when a model is not prepared, unless LRREF_REQUIRE_MODELS is set (CI): then fail."""
    from lrref import models

    cache = models.cache_dir()
    missing = [n for n in names if not models.is_ready(n, cache)]
    if missing:
        msg = f"models not prepared in {cache}: {', '.join(missing)} (lrref models prepare --models {','.join(missing)})"
        if os.environ.get("LRREF_REQUIRE_MODELS"):
            pytest.fail(msg + " and LRREF_REQUIRE_MODELS is set")
        pytest.skip(msg)
    return [models.model_dir(n, cache) for n in names]
