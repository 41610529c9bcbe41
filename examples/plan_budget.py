"""Plan a budget from my acceptance numbers: how should I split M between k1 and k2?

Run: python examples/plan_budget.py   (closed forms, well under a second)
"""

import lrsim

p = lrsim.plan(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=16, mode="async")
print(p)  # the text of `lrsim plan`
print()
print(f"best: k1 = {p.k1}, k2 = {p.k2}, {p.speedup:.3f}x; pure token SD {p.pure_token:.3f}x, pure LR {p.pure_step:.3f}x")

# the ranked table is a small pandas-free Table: rows as dicts, columns, CSV
top = p.table[0]
assert (top["k1"], top["k2"]) == (p.k1, p.k2)
print("speedups of the top 3:", [round(s, 3) for s in p.table.column("speedup")[:3]])

# the same numbers as `lrsim plan --json`
d = p.to_dict()
print("JSON keys:", ", ".join(sorted(d)[:6]), "...")

# how the best split moves with the budget
for m in (4, 8, 16, 32, 64):
    q = lrsim.plan(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=m)
    print(f"  M = {m:3d}: k1 = {q.k1:2d}, k2 = {q.k2:2d} -> {q.speedup:.3f}x")
