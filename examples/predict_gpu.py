"""Predict my GPU: my models' acceptance, an embedded H100 latency profile's timing.

Run: python examples/predict_gpu.py   (a few seconds; `lrsim profiles` lists the profiles)
"""

import lrsim

# one H100 per model, kernel sums at context 0; a 13 ms verifier per step pair
hw = lrsim.hardware("h100-ctx0-kernel", target_arch="qwen2.5-32b", draft_arch="qwen2.5-1.5b", verifier_latency=0.013)

p = lrsim.predict("async", k1=4, alpha1=0.6, hardware=hw, steps=4000)
print(p)  # the text of `lrsim replay --hardware ...`
print()
print(f"async k1 = 4 on {hw.name}: {p.speedup:.2f}x (closed form {p.closed_form:.2f}x, c1 = {p.c1:.3f})")

# the best (mode, k1, k2) under a budget of 8 target positions, every candidate simulated
plan = lrsim.plan(alpha1=0.6, alpha2=0.4, budget=8, hardware=hw)
print(f"plan on {hw.name}: {plan.mode} k1 = {plan.k1}, k2 = {plan.k2} -> {plan.speedup:.2f}x")
print(plan.table.to_dicts()[:3])

# a GPU nobody profiled: the hardware model's modelled profile (two H200s, tensor parallel)
h200 = lrsim.hardware("model:h200:tp2", target_arch="qwen2.5-32b", draft_arch="qwen2.5-1.5b", verifier_latency=0.013)
q = lrsim.predict("async", k1=4, alpha1=0.6, hardware=h200, steps=4000)
print(f"async k1 = 4 on {h200.name}: {q.speedup:.2f}x")
