"""Serve under load: up to which request rate does LR still beat target-only decoding?

Run: python examples/serve_under_load.py   (about ten seconds on two cores; small on purpose)
"""

import lrsim

hw = lrsim.hardware("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b")
s = lrsim.simulate_serving(
    [0.5, 2.0, 4.0, 8.0], modes=("ar", "lr-async"), hardware=hw,
    alpha1=0.55, k1=4, verifier_latency=0.013, step_tokens="lognormal:52,0.5",
    prompt_tokens=256, output_tokens="lognormal:1024,0.5", requests=120, replications=2, warmup=0.2, workers=1,
)
print(s)  # the text of `lrsim serve`
print()
for row in s.table:  # one dict per mode and rate
    print(f"  {row['mode']:8s} {row['rate']:5.2f} req/s: TPOT {1000 * row['tpot_mean']:6.1f} ms, "
          f"{row['running_mean']:5.1f} requests running")
print("lr-async stops beating ar at", s.crossover("lr-async"), "req/s (None: not within the rates)")
