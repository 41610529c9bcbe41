"""Decode from Python: load the models once, then decode a prompt and benchmark modes (lrref.Session).

Run: python examples/decode_session.py          (random weights of the shipped tiny architecture: no download,
                                                 seconds; the text is placeholder dots, the timings are real)
     python examples/decode_session.py --real   (the default Qwen pair: `lrref models prepare` first)
"""

import sys

from lrref import Session
from lrref.bench import dataset_path, load_dataset

real = "--real" in sys.argv[1:]
models = {"verifier": "math"} if real else {"backend": "hf", "random_weights": "tiny"}  # math: see its steps pass
question = "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"

with Session(modes=("ar", "lr-sync"), max_tokens=64, **models) as s:  # models load here, once
    print(s)
    r = s.generate(question, "lr-sync", trace="runs/example.jsonl")  # default mode: the first of modes
    print(r.text if real else f"({r.tokens} tokens of random weights)")
    print(f"[{r.mode}] {r.tokens} tokens in {r.wall_s:.1f} s, {r.accepted_steps} accepted drafts; trace {r.trace}")
    b = s.bench(load_dataset(dataset_path("bundled"), 2), out="runs/example-bench")  # every mode, both problems
    for row in b.rows:
        print(f"{row['mode']:>8}: {row['tokens_per_s']:.2f} tok/s, accuracy {row['accuracy']}, "
              f"step acceptance {row['step_acceptance']}")
    print(f"results: {b.results}")
