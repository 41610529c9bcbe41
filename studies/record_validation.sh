#!/bin/bash
# Records the traces of studies/data/validation (and the embedded default lrsim/data/default):
# two lrref benchmark runs on the default CPU pair, each mode side by side on the same 10 bundled problems.
# Needs `pip install torch==2.13.0 && pip install -e '.[ref]' && lrref models prepare`; ~45 min on 2 idle cores.
# Then: gzip -9 the trace-*.jsonl files into studies/data/validation/{g2,g2s,g3}/ (g2 + g2s lr-sync: lrsim/data/default/).
set -euo pipefail
OUT=${1:-runs}
SYS="Solve the problem in a few short steps separated by blank lines. Be concise. Put the final answer within \boxed{}."
COMMON=(--n 10 --max-tokens 144 --max-step-tokens 64 --verifier embedding --threads 2 --async-threads 1,1 --system "$SYS")
lrref bench --modes ar,sd,lr-async,lr-async+sd --gamma 2 "${COMMON[@]}" --out "$OUT/val-g2"
lrref bench --modes ar,lr-sync --gamma 2 "${COMMON[@]}" --out "$OUT/val-g2s"
lrref bench --modes ar,lr-sync,lr-async,lr-sync+sd --gamma 3 "${COMMON[@]}" --out "$OUT/val-g3"
