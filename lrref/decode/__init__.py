"""Decoding modes on backends: the decoder (ar/sd), lr-sync, lr-async, the jobs and the closed loop that drive
them, lr-async's draft process, requests, trace rows and the per-step seeds every mode uses.
"""
