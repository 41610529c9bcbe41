"""``lrref profile``: latency profiles of forward passes, on torch (random weights) or on llama.cpp."""
