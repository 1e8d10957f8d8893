#!/bin/bash
# The GPU measurements in one script, for a bare GPU machine without internet (torch, transformers, accelerate,
# pandas, typer and rich installed; the project not installed), run from the repository root:
#
#   python benchmarks/gpu_pack.py --out .gpu            # here: wheels, MiniLM in fp16, the Mohler data
#   bash benchmarks/gpu_run.sh .gpu OUT [DEADLINE_S]    # there
#
# 1. the main job in fp32 and grading its test answers (benchmarks/gpu_smoke.py), alone on the GPU: the timings;
#    the script stops here if it fails (a device bug found costs no more GPU time);
# 1b. with GPU_RUN_BASELINE=DIR (the code of another revision, e.g. `git archive REV reccbm rubrictool rubrics
#    templates | tar -x -C DIR`), the same main job with that code, alone: a baseline timed on the same machine;
# 2. the same main job in bf16 autocast, alone: its timings, and its metrics against step 1's (same split and seed);
# 3. a candidate recipe (GPU_RUN_CONFIG, default lab/configs/default-contrast.yaml, the default's recipe since
#    2026-11-27) on five folds (random, or
#    GPU_RUN_BY=question), five workers sharing the GPU (benchmarks/folds.py --jobs 5), alone, stopped at DEADLINE_S
#    less the time step 4 needs;
# 4. the candidate's main job in fp32, alone (its timing as the default it would be), if time is left.
# 0. first (not with GPU_RUN_SMOKE), the GPU tests of reccbm/graphs.py, into OUT/step0.txt (the CUDA graphs against the
#    steps they replace; their failure stops nothing: a run whose capture fails goes on step by step);
# GPU_RUN_SKIP="2 4" leaves out steps 2 and 4 (step 1 always runs: it is the check that the device works); "0" step 0.
# Each step's small files (predictions, metrics, run.json; no weights) are packed into OUT/stepN.tgz as it ends;
# step 3 is stopped (its process group: the workers too) so that step 4 ends by DEADLINE_S seconds after the start
# (default 540), its finished folds kept.
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
    restore_backbone, packed_data; restore_backbone(Path('$PACK/minilm'), Path('$W/minilm')); \
    packed_data(Path('$PACK'))" || exit 1
  BACKBONE=$W/minilm; DATA=$PACK/datasets; DEV=(); SMOKE_MAIN=(--pack "$PACK"); SMOKE_FOLDS=()
fi

SKIP=" ${GPU_RUN_SKIP:-} "
if [ -z "$SMOKE" ] && [[ "$SKIP" != *" 0 "* ]]; then
  log "step 0: the GPU tests of reccbm/graphs.py (CUDA graphs against the steps they replace)"
  timeout 180 python3 -m pytest tests/test_reccbm_graphs.py -q -p no:cacheprovider -rs > "$OUT/step0.txt" 2>&1
  log "step 0: rc $?"; tail -n 4 "$OUT/step0.txt"
fi

log "step 1: the main job in fp32, then grading"
python3 benchmarks/gpu_smoke.py "${SMOKE_MAIN[@]}" "${DEV[@]}" --skip fold --out "$W/main-fp32" \
  2>&1 | tee "$W/main-fp32.log"
ok=${PIPESTATUS[0]}
pack_step 1 main-fp32 main-fp32.log
[ "$ok" = 0 ] || { log "step 1 failed: stopping"; exit 1; }

BASE=${GPU_RUN_BASELINE:-}
if [ -n "$BASE" ]; then
  log "step 1b: the same main job with the code in $BASE"
  PYTHONPATH="$(realpath "$BASE")${PYTHONPATH:+:$PYTHONPATH}" python3 benchmarks/gpu_smoke.py "${SMOKE_MAIN[@]}" "${DEV[@]}" --skip fold,grade \
    --out "$W/main-baseline" > "$W/main-baseline.log" 2>&1
  log "step 1b: rc $?"; tail -n 4 "$W/main-baseline.log"
  pack_step 1b main-baseline main-baseline.log
fi

if [[ "$SKIP" != *" 2 "* ]]; then
log "step 2: the main job in bf16, then grading"
python3 benchmarks/gpu_smoke.py "${SMOKE_MAIN[@]}" "${DEV[@]}" --bf16 --skip fold --out "$W/main-bf16" \
  > "$W/main-bf16.log" 2>&1
log "step 2: rc $?"; tail -n 8 "$W/main-bf16.log"
pack_step 2 main-bf16 main-bf16.log
fi

STEP4=${GPU_RUN_STEP4_S:-110}
[[ "$SKIP" == *" 4 "* ]] && STEP4=0  # what the candidate's main job needs (step 1's time, and a margin)
left=$((DEADLINE - SECONDS - STEP4))
CONFIG=${GPU_RUN_CONFIG:-lab/configs/default-contrast.yaml}
BY=(); [ -n "${GPU_RUN_BY:-}" ] && BY=(--by "$GPU_RUN_BY")
log "step 3: $CONFIG on five folds ${BY[*]:-random}, --jobs 5, $left s left"
if [ -n "$SMOKE" ]; then READER=(); else READER=(--config "$CONFIG"); fi
timeout --kill-after=10 "$left" python3 benchmarks/folds.py "${SMOKE_FOLDS[@]}" "${READER[@]}" "${BY[@]}" --jobs 5 --backbone "$BACKBONE" \
  --data-dir "$DATA" --out "$W/reader-r" > "$W/reader-r.log" 2>&1
log "step 3: rc $?"; tail -n 12 "$W/reader-r.log"
pack_step 3 reader-r reader-r.log

left=$((DEADLINE - SECONDS))
log "step 4: the candidate's main job in fp32, $left s left"
if [ "$left" -gt 60 ] && [[ "$SKIP" != *" 4 "* ]]; then
  timeout "$left" python3 benchmarks/gpu_smoke.py "${SMOKE_MAIN[@]}" "${DEV[@]}" "${READER[@]}" --skip fold,grade \
    --out "$W/main-reader" > "$W/main-reader.log" 2>&1
  log "step 4: rc $?"; tail -n 6 "$W/main-reader.log"
  pack_step 4 main-reader main-reader.log
fi
log "done"
