#!/usr/bin/env bash
# The GPU check: tracejit's CUDA path verified on a real GPU in one command (< 7 minutes).
#
#   bash tools/gpu_check.sh              # on the GPU machine, from the repository root
#   bash tools/gpu_check.sh --dry-run    # no GPU: numba's CUDA simulator, small sizes
#
# Options: --out DIR (default $OUT, else a new temporary directory), --only STEP[,STEP]
# (steps: install versions gpu_tests gelu launch train_mlp train_cnn train_transformer
# opdb), --full (dry run: the whole op database under the simulator, a few minutes).
# Writes DIR/gpu_check.json and DIR/gpu_check.log; each step runs under its own timeout,
# so one failure leaves the rest of the report (docs/guide/cuda.md, "Verifying on a GPU").
# Exit status 0 when no step failed (skipped steps and missed targets are reported in the
# JSON), 1 otherwise, 2 for a bad option.
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
DRY=0
FULL=""
ONLY=""
OUTDIR="${OUT:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --full) FULL="--full" ;;
    --out) OUTDIR="${2:?--out needs a directory}"; shift ;;
    --only) ONLY="${2:?--only needs step names}"; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# name:timeout in seconds, in run order; 0: whatever the steps before left (opdb stops
# at its deadline with what it covered)
STEPS="install:45 versions:20 gpu_tests:60 gelu:45 launch:25 train_mlp:60 train_cnn:60 train_transformer:70 opdb:0"
TOTAL=400   # seconds for every step (each may overrun by its 5 s kill grace); then the report
ALL_NAMES=""
for s in $STEPS; do ALL_NAMES="$ALL_NAMES ${s%%:*}"; done
if [ -n "$ONLY" ]; then
  for n in ${ONLY//,/ }; do
    case " $ALL_NAMES " in *" $n "*) ;; *) echo "gpu_check: no step '$n' (steps:$ALL_NAMES)" >&2; exit 2 ;; esac
  done
fi

[ -n "$OUTDIR" ] || OUTDIR="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
mkdir -p "$OUTDIR" && OUTDIR="$(cd "$OUTDIR" && pwd)" || exit 2
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_work.XXXXXX")" || exit 2
mkdir -p "$WORK/steps"
LOG="$OUTDIR/gpu_check.log"
: > "$LOG"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TRACEJIT_COMPILE="${TRACEJIT_COMPILE:-sync}"   # compiled steps compile at the first call
export PYTHONUNBUFFERED=1
STARTED=$(date +%s)
if [ "$DRY" = 1 ]; then
  export NUMBA_ENABLE_CUDASIM=1
  MODE=dry-run
else
  MODE=gpu
fi

log() { echo "$*" | tee -a "$LOG"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# "RC SECONDS TIMEOUT" of a finished step, for the report
write_rc() { local ms=$(( $(now_ms) - $3 )); printf '%s %d.%03d %s\n' "$2" $((ms / 1000)) $((ms % 1000)) "$4" > "$WORK/steps/$1.rc"; }

log "== gpu_check ($MODE) $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) in $ROOT"
log "   commit $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown); output $OUTDIR"
if [ "$DRY" = 0 ] && command -v nvidia-smi > /dev/null; then
  timeout 20 nvidia-smi 2>&1 | tee -a "$LOG"
fi

install_step() {
  local t0 rc out="$WORK/steps/install.txt"
  t0=$(now_ms)
  if [ "$DRY" = 1 ]; then
    echo "skip 0 0" > "$WORK/steps/install.rc"
    log "== install: skipped (dry run: runs from the tree)"
    return
  fi
  # A checkout installed elsewhere (a developer's environment) is left alone
  local other
  other=$(env -u PYTHONPATH "$PY" -m pip show tracejit 2> /dev/null | sed -n 's/^Editable project location: //p')
  if [ -n "$other" ] && [ "$other" != "$ROOT" ]; then
    echo "tracejit is installed from $other: left as it is; the steps run from this tree" > "$out"
    write_rc install kept "$t0" "$1"
    log "== install: skipped ($(cat "$out"))"
    return
  fi
  log "== install: $PY -m pip install --no-deps -e ."
  # Nothing can be downloaded there: fail fast instead of retrying, then build without
  # isolation from the setuptools already installed.
  PIP_RETRIES=0 PIP_TIMEOUT=5 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    timeout -k 5 "$1" "$PY" -m pip install --no-deps -e . > "$out" 2>&1
  rc=$?
  if [ $rc != 0 ]; then
    echo "-- retrying without build isolation" >> "$out"
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
      timeout -k 5 "$1" "$PY" -m pip install --no-deps --no-build-isolation -e . >> "$out" 2>&1
    rc=$?
  fi
  tail -n 5 "$out" | tee -a "$LOG"
  write_rc install "$rc" "$t0" "$1"
}

RAN=""
for s in $STEPS; do
  name=${s%%:*}
  budget=${s##*:}
  if [ -n "$ONLY" ]; then
    case ",$ONLY," in *",$name,"*) ;; *) continue ;; esac
  fi
  RAN="$RAN${RAN:+,}$name"
  left=$((TOTAL - ($(date +%s) - STARTED)))
  if [ "$budget" = 0 ] || [ "$left" -lt "$budget" ]; then budget=$left; fi
  if [ "$budget" -lt 10 ]; then
    echo "budget 0 0" > "$WORK/steps/$name.rc"
    log "== $name: not started (the run's $TOTAL s are spent)"
    continue
  fi
  if [ "$name" = install ]; then
    install_step "$budget"
    continue
  fi
  log "== $name (timeout ${budget} s)"
  t0=$(now_ms)
  timeout -k 5 "$budget" "$PY" -m bench.gpu_check run "$name" --work "$WORK" \
    --budget $((budget - 2)) $FULL 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  write_rc "$name" "$rc" "$t0" "$budget"
done

"$PY" -m bench.gpu_check report --work "$WORK" --out "$OUTDIR" --steps "$RAN" --mode "$MODE" \
  --started "$STARTED" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
if [ ! -s "$OUTDIR/gpu_check.json" ] || { [ "$rc" != 0 ] && [ "$rc" != 1 ]; }; then
  # the report itself failed: leave what the shell knows
  {
    echo "{\"schema\": 1, \"tool\": \"tools/gpu_check.sh\", \"mode\": \"$MODE\","
    echo " \"error\": \"the report step exited with $rc (see gpu_check.log)\", \"step_exits\": {"
    sep=""
    for f in "$WORK"/steps/*.rc; do
      [ -e "$f" ] || continue
      echo "$sep  \"$(basename "$f" .rc)\": \"$(cat "$f")\""
      sep=","
    done
    echo "}}"
  } > "$OUTDIR/gpu_check.json"
  rc=1
fi
rm -rf "$WORK"
# the files that come back from the GPU machine are capped at 16 MiB each
if [ "$(stat -c %s "$LOG")" -gt 15000000 ]; then
  { head -c 7000000 "$LOG"; printf '\n[... log cut to 14 MB ...]\n'; tail -c 7000000 "$LOG"; } > "$LOG.cut"
  mv "$LOG.cut" "$LOG"
fi
exit "$rc"
