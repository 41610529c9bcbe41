"""The machine a run times on: its CPU (and the dtype ``--dtype auto`` picks there), and what else ran on it."""
