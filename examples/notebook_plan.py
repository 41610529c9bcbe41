# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lookahead Reasoning in a notebook
#
# Open with Jupyter through jupytext (`jupytext --to notebook examples/notebook_plan.py`), or run it as a
# script: `python examples/notebook_plan.py`. Every cell runs in seconds on embedded data.

# %%
import lrsim

p = lrsim.plan(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=16)
p  # one line in a notebook; print(p) for the full report

# %% [markdown]
# The ranked configurations are a `lrsim.Table`: it renders as HTML in a notebook, prints aligned in a
# terminal, and turns into dicts (`to_dicts()`), columns (`column(name)`) or CSV (`to_csv()`).

# %%
p.table

# %% [markdown]
# How does the best split move with the step acceptance?

# %%
rows = []
for a1 in (0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
    q = lrsim.plan(alpha1=a1, c1=0.1, alpha2=0.6, c2=0.05, budget=16)
    rows.append({"alpha1": a1, "k1": q.k1, "k2": q.k2, "speedup": q.speedup, "pure_token": q.pure_token,
                 "pure_step": q.pure_step})
by_alpha = lrsim.Table.from_dicts(rows, title="best split by step acceptance (M = 16, async)")
print(by_alpha)

# %% [markdown]
# The same question on a GPU: the embedded H100 profile prices every pass.

# %%
hw = lrsim.hardware("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b", verifier_latency=0.013)
pred = lrsim.predict("async", k1=4, alpha1=0.6, hardware=hw, steps=4000)
print(pred)

# %% [markdown]
# And as pictures: one self-contained page (`lrsim plan --html FILE` writes the same from a shell).

# %%
import os
import tempfile

out = os.path.join(tempfile.mkdtemp(), "notebook-plan.html")
lrsim.write_html(out, p, pred, hardware=hw)
print("wrote", out, os.path.getsize(out) // 1024, "kB")
