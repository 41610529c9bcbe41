"""Serving simulation of Lookahead Reasoning under load (``lrsim serve``)."""
