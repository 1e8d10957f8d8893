#!/bin/bash
# The GPU measurements in one script, for a bare GPU machine without internet (torch, transformers, accelerate,
# pandas, typer and rich installed; the project not installed), run from the repository root:
#
#   python benchmarks/gpu_pack.py --out .gpu            # here: wheels, MiniLM in fp16, the Mohler data
#   bash benchmarks/gpu_run.sh .gpu OUT [DEADLINE_S]    # there
#
# 1. the main job in fp32 and grading its test answers (benchmarks/gpu_smoke.py), alone on the GPU: the timings;
#    the script stops here if it fails (a device bug found costs no more GPU time);
# 2. five question-grouped folds of the default, five workers sharing the GPU (benchmarks/folds.py --jobs 5), alone;
# 3. at once on the shared GPU: the concept reader's candidate (experiments/configs/reader-align-soft.yaml) on
#    question-grouped and random folds, the cross-question-examples candidate on question-grouped folds, and the
#    main job in bf16 (its metrics against step 1's; its time is not a timing: the GPU is shared).
# Each step's small files (predictions, metrics, run.json; no weights) are packed into OUT/stepN.tgz as it ends;
# step 3 is stopped at DEADLINE_S seconds after the start (default 540), its finished folds kept.
# GPU_RUN_SMOKE=BACKBONE runs the same steps on the CPU with a tiny local model (the script's own check).
set -u
PACK=${1:-.gpu}
OUT=${2:-benchmarks/out/gpu}
DEADLINE=${3:-540}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/gpu-run-XXXX)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
pack_step() {  # pack_step N DIR...: the small files of DIR... into OUT/stepN.tgz
  local n=$1; shift
  (cd "$W" && find "$@" -type f \( -name '*.csv' -o -name '*.json' -o -name '*.md' -o -name '*.yaml' -o -name '*.log' \
    -o -name '*.txt' \) ! -name table.csv -size -8M 2>/dev/null | tar czf "$OUT/step$n.tgz" -T -)
  log "step $n packed: $(du -h "$OUT/step$n.tgz" | cut -f1)"
}

SMOKE=${GPU_RUN_SMOKE:-}
if [ -n "$SMOKE" ]; then
  BACKBONE=$SMOKE; DATA=${RUBRICTOOL_DATA:-../shared/datasets}; DEV=(--device cpu)
  SMOKE_MAIN=(--smoke --backbone "$BACKBONE"); SMOKE_FOLDS=(--smoke --folds 2)
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$PACK"/wheels/*.whl || { log "the wheels did not install"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers',
    transformers.__version__, 'accelerate', accelerate.__version__)" | tee -a "$OUT/gpu.txt"
  python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; from gpu_smoke import \
    restore_backbone; restore_backbone(Path('$PACK/minilm'), Path('$W/minilm'))" || exit 1
  BACKBONE=$W/minilm; DATA=$PACK/datasets; DEV=(); SMOKE_MAIN=(--pack "$PACK"); SMOKE_FOLDS=()
fi

log "step 1: the main job in fp32, then grading"
python3 benchmarks/gpu_smoke.py "${SMOKE_MAIN[@]}" "${DEV[@]}" --skip fold --out "$W/main-fp32" \
  2>&1 | tee "$W/main-fp32.log"
ok=${PIPESTATUS[0]}
pack_step 1 main-fp32 main-fp32.log
[ "$ok" = 0 ] || { log "step 1 failed: stopping"; exit 1; }

log "step 2: five question-grouped folds of the default, --jobs 5"
t0=$SECONDS
python3 benchmarks/folds.py "${SMOKE_FOLDS[@]}" --runs default --by question --jobs 5 --backbone "$BACKBONE" \
  --data-dir "$DATA" --out "$W/folds-q" > "$W/folds-q.log" 2>&1
log "step 2: rc $?, $((SECONDS - t0)) s wall"; tail -n 30 "$W/folds-q.log"
pack_step 2 folds-q folds-q.log

left=$((DEADLINE - SECONDS))
log "step 3: the reader candidates and the bf16 main job at once, $left s left"
if [ -n "$SMOKE" ]; then READER=(); else READER=(--config experiments/configs/reader-align-soft.yaml); fi
timeout "$left" python3 benchmarks/folds.py "${SMOKE_FOLDS[@]}" "${READER[@]}" --by question --jobs 5 \
  --backbone "$BACKBONE" --data-dir "$DATA" --out "$W/reader-q" > "$W/reader-q.log" 2>&1 &
timeout "$left" python3 benchmarks/folds.py "${SMOKE_FOLDS[@]}" "${READER[@]}" --jobs 5 \
  --backbone "$BACKBONE" --data-dir "$DATA" --out "$W/reader-r" > "$W/reader-r.log" 2>&1 &
if [ -z "$SMOKE" ]; then
  timeout "$left" python3 benchmarks/folds.py --config experiments/configs/reader-align-soft-contrast.yaml \
    --by question --jobs 5 --backbone "$BACKBONE" --data-dir "$DATA" --out "$W/reader-qc" > "$W/reader-qc.log" 2>&1 &
fi
timeout "$left" python3 benchmarks/gpu_smoke.py "${SMOKE_MAIN[@]}" "${DEV[@]}" --bf16 --skip fold \
  --out "$W/main-bf16" > "$W/main-bf16.log" 2>&1 &
wait
log "step 3 ended"
for f in reader-q reader-r reader-qc main-bf16; do [ -f "$W/$f.log" ] && { echo "== $f"; tail -n 12 "$W/$f.log"; }; done
mkdir -p "$W/none"
pack_step 3 none $(cd "$W" && ls -d reader-q reader-r reader-qc main-bf16 reader-q.log reader-r.log reader-qc.log \
  main-bf16.log 2>/dev/null)
log "done"
