"""A picture of my plan: one self-contained HTML page (plotly inline, opens without a network).

Run: python examples/html_report.py [OUT.html]   (default runs/examples/plan.html)
"""

import sys

import lrsim

out = sys.argv[1] if len(sys.argv) > 1 else "runs/examples/plan.html"
plan = lrsim.plan(alpha1=0.7, c1=0.2, alpha2=0.5, c2=0.02, budget=24)
hw = lrsim.hardware("h100-context-kernel", "qwen2.5-32b", "qwen2.5-1.5b")
lrsim.write_html(out, plan, hardware=hw, title="My plan on an H100")
print(f"wrote {out}: the (k1, k2) map with the optimum, the pure-method lines, the H100 pass costs")
