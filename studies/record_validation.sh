#!/bin/bash
# The validation recordings of studies/replay_validation.py: three lrref bench runs on the default CPU pair, every
# mode of a run side by side on the same bundled problems (OUT/val-g2: ar, sd, lr-async, lr-async+sd at gamma 2;
# OUT/val-g2s: ar, lr-sync at gamma 2; OUT/val-g3: ar, lr-sync, lr-async, lr-sync+sd at gamma 3).
#
#   bash studies/record_validation.sh OUT [N] [BACKEND]   record (defaults: 30 problems, llamacpp); resumable
#   bash studies/record_validation.sh pack OUT [DEST]     gzip the traces into DEST/{g2,g2s,g3}/ with a README.md
#                                                         (DEST default: studies/data/validation-BACKEND)
#
# Needs `pip install -e '.[ref]'` and `lrref models prepare` (`--format hf` too for BACKEND hf; the embedding verifier needs
# torch too). Record on idle cores: every timing counts. A run whose results.json says every problem is done is
# kept (rerun the command to resume after an interruption); each run folder gets provenance.txt (lscpu's CPU
# model, load averages before and after, date, git commit, the exact command).
# The earlier study's data (studies/data/validation/, 10 problems, hf, then bf16) came from this script's first
# version, the same runs as `bash studies/record_validation.sh runs 10 hf` with `--dtype bfloat16`.
# Environment: LRREF (default `lrref`) is the command; LRREF_ARGS is appended to every bench (smoke tests with the
# tiny model, e.g. LRREF_ARGS="--target smollm2-135m-instruct --draft smollm2-135m-instruct --max-tokens 16").
set -euo pipefail
RUNS=(g2 g2s g3)

die() { echo "record_validation: error: $*" >&2; exit 2; }

complete() {  # complete RESULTS_JSON [N]: every problem (N of them, if given) decoded in every mode
    [ -f "$1" ] && python3 - "$1" "${2:-}" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["meta"]
sys.exit(0 if m.get("done") == m.get("n") and sys.argv[2] in ("", str(m.get("n"))) else 1)
EOF
}

cpu_model() { lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1; }
cpu_ids() {  # vendor, family, model and stepping numbers: "AMD EPYC" alone names several generations
    awk -F': *' '/^vendor_id/{v=$2} /^cpu family/{f=$2} /^model\t/{m=$2} /^stepping/{s=$2} /^$/{exit}
        END{printf "%s family %s model %s stepping %s", v, f, m, s}' /proc/cpuinfo 2>/dev/null; }

record_run() {  # record_run DIR N ARGS...: one bench of N problems into DIR unless complete there, + provenance.txt
    local dir=$1 n=$2; shift 2
    if complete "$dir/results.json" "$n"; then echo "$dir: recorded already" >&2; return; fi
    mkdir -p "$dir"
    local cmd=("${LR[@]}" bench --n "$n" "$@" "${EXTRA[@]}" --out "$dir")
    {
        echo "command: $(printf '%q ' "${cmd[@]}")"
        echo "date_start: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "cpu_model: $(cpu_model)"
        echo "cpu_ids: $(cpu_ids)"
        echo "cpus: $(nproc)"
        echo "git_commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
        echo "loadavg_start: $(cat /proc/loadavg)"
    } > "$dir/provenance.txt.part"
    "${cmd[@]}"
    { cat "$dir/provenance.txt.part"; echo "loadavg_end: $(cat /proc/loadavg)";
      echo "date_end: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } > "$dir/provenance.txt.tmp"
    mv "$dir/provenance.txt.tmp" "$dir/provenance.txt" && rm -f "$dir/provenance.txt.part"
}

record() {  # record OUT N BACKEND
    local out=$1 n=$2 backend=$3
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    [[ $backend == hf || $backend == llamacpp ]] || die "BACKEND must be hf or llamacpp, got '$backend'"
    read -ra LR <<< "${LRREF:-lrref}"
    read -ra EXTRA <<< "${LRREF_ARGS:-}"
    local sys="Solve the problem in a few short steps separated by blank lines. Be concise. Put the final answer within \boxed{}."
    local cold=(); [[ $backend == llamacpp ]] && cold=(--no-prefix-caching)  # every request prefills its prompt
    local common=(--backend "$backend" --require-idle "${cold[@]}" --max-tokens 144 --max-step-tokens 64 --verifier embedding
                  --threads 2 --async-threads 1,1 --log-text --system "$sys")
    record_run "$out/val-g2" "$n" --modes ar,sd,lr-async,lr-async+sd --gamma 2 "${common[@]}"
    record_run "$out/val-g2s" "$n" --modes ar,lr-sync --gamma 2 "${common[@]}"
    record_run "$out/val-g3" "$n" --modes ar,lr-sync,lr-async,lr-sync+sd --gamma 3 "${common[@]}"
    echo "recorded: $out/val-{g2,g2s,g3}; pack with: bash studies/record_validation.sh pack $out" >&2
}

meta() {  # meta RESULTS_JSON KEY: one field of results.json's meta
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"][sys.argv[2]])' "$1" "$2"
}

readme() {  # readme OUT BACKEND: the packed data's README.md, from the runs' results.json and provenance.txt
    local out=$1 backend=$2
    cat <<EOF
# Validation traces ($backend backend)

Recorded by \`bash studies/record_validation.sh $out $(meta "$out/val-g2/results.json" n) $backend\` (three \`lrref bench\`
runs, every mode side by side on the same bundled problems; \`--max-tokens 144 --max-step-tokens 64\`, embedding
verifier, sync modes 2 threads, lr-async target 1 thread + draft process 1 thread). Per run: \`results.json\` and
\`results.csv\` (that run's table and meta), \`provenance.txt\` (the exact command, CPU, load averages, dates,
commit) and one gzipped trace per mode. Packed by \`bash studies/record_validation.sh pack $out\`.

EOF
    python3 - "$out" "${RUNS[@]}" <<'EOF'
import json, sys
from pathlib import Path

out, runs = Path(sys.argv[1]), sys.argv[2:]
print("| run | modes | gamma | problems | CPU | load average start / end (1 min) | recorded (UTC) |")
print("|---|---|---|---|---|---|---|")
for g in runs:
    res = json.loads((out / f"val-{g}" / "results.json").read_text())
    prov = dict(line.split(": ", 1) for line in (out / f"val-{g}" / "provenance.txt").read_text().splitlines()
                if ": " in line)
    gamma = next(iter(res["meta"]["config"].values()))["gamma"]
    load = " / ".join(prov.get(k, "?").split()[0] for k in ("loadavg_start", "loadavg_end"))
    print(f"| `{g}` | {', '.join(r['mode'] for r in res['modes'])} | {gamma} | {res['meta']['n']} | "
          f"{prov.get('cpu_model', '?')} ({prov.get('cpus', '?')} cpus) | {load} | "
          f"{prov.get('date_start', '?')} to {prov.get('date_end', '?')} |")
EOF
}

pack() {  # pack OUT [DEST]: everything is checked and written to a temporary folder, then moved into place
    local out=${1:?}; local g f tmp backend dest
    for g in "${RUNS[@]}"; do
        complete "$out/val-$g/results.json" "$(meta "$out/val-g2/results.json" n 2>/dev/null)" ||
            die "$out/val-$g: not a complete run of as many problems as val-g2 (record it first)"
        [ -f "$out/val-$g/provenance.txt" ] || die "$out/val-$g/provenance.txt missing (recorded by another script?)"
    done
    backend=$(meta "$out/val-g2/results.json" backend)
    dest=${2:-studies/data/validation-$backend}
    [ -e "$dest" ] && die "$dest exists: move it away first"
    [ -d "$(dirname "$dest")" ] || die "$(dirname "$dest"): no such folder"
    tmp=$(mktemp -d "$(dirname "$dest")/.pack.XXXXXX") && chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    for g in "${RUNS[@]}"; do
        mkdir "$tmp/$g"
        cp "$out/val-$g/results.json" "$out/val-$g/results.csv" "$out/val-$g/provenance.txt" "$tmp/$g/"
        for f in "$out/val-$g"/trace-*.jsonl; do gzip -9 -n -c "$f" > "$tmp/$g/$(basename "$f").gz"; done
    done
    readme "$out" "$backend" > "$tmp/README.md"
    mv "$tmp" "$dest"
    trap - EXIT
    echo "packed: $dest ($(du -sh "$dest" | cut -f1)); then: python studies/replay_validation.py --data $dest" >&2
}

if [ "${1:-}" = pack ]; then
    [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: bash studies/record_validation.sh pack OUT [DEST]"
    pack "$2" "${3:-}"
else
    [ $# -ge 1 ] && [ $# -le 3 ] || die "usage: bash studies/record_validation.sh OUT [N] [BACKEND] | pack OUT [DEST]"
    record "$1" "${2:-30}" "${3:-llamacpp}"
fi
