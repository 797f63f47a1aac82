#!/usr/bin/env bash
# The GPU checks and timings of issue 12, in one run on a machine with a CUDA GPU, in priority
# order under one deadline (a step that would start past it is skipped and says so):
#   1. the CUDA tests (tests/unit/neural/test_cuda_graphs.py: graphs answer what eager torch
#      answers; tests/unit/training/test_gpu_training.py: the trainers' CUDA paths run);
#   2. bench/neural_runtime.py --devices cuda   (policy/value: eager torch against CUDA graphs);
#   3. bench/reasoning_inference.py --devices cuda   (TRM segments: eager against graphs);
#   4. bench/batcher.py --devices cuda   (the service's batcher on the GPU, both runtimes);
#   5. bench/train_speed.py --devices cuda   (steps/s of the paper presets, data workers 0 and 4);
#   6. bench/selfplay.py --device cuda   (our PUCT self-play with the network on the GPU against
#      mctx on JAX's GPU backend).
# Each step's log goes to $OUT (or var/gpu). Python is $PYTHON, else .venv/bin/python (a machine
# set up with `make setup`), else python3. On a bare machine with torch (a lent GPU), the wheels
# in .whl/ (the project's other dependencies, `pip download`ed for that machine) are installed to
# /tmp/site first, and Pons' positions are read from .gpudata/ when ../shared is absent.
#
#     bash bench/gpu.sh [deadline seconds, default 420] [steps, default "1 2 3 4 5 6"]
set -u
cd "$(dirname "$0")/.."
DEADLINE=$((SECONDS + ${1:-420}))
STEPS=" ${2:-1 2 3 4 5 6} "
OUT=${OUT:-var/gpu}
mkdir -p "$OUT"
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:$PWD/libs/stubs:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -d ../shared/data/connect4-pons ] && [ -d .gpudata/connect4-pons ]; then
  mkdir -p ../shared/data && cp -r .gpudata/connect4-pons ../shared/data/
fi
{ nvidia-smi -L; $PY -c "import torch, sys; print(sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"; } \
  2>&1 | tee "$OUT/env.log"

step() {  # step NUMBER NAME LIMIT COMMAND...
  local number=$1 name=$2 limit=$3
  shift 3
  [[ "$STEPS" == *" $number "* ]] || return 0
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, ${left}s left before the deadline" | tee -a "$OUT/summary.log"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s)"
  local started=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local status=$?
  echo "== $name: exit $status after $((SECONDS - started))s" | tee -a "$OUT/summary.log"
  tail -n "${TAIL_LINES:-14}" "$OUT/$name.log"
}

step 1 tests 120 $PY -m pytest -q -p no:cacheprovider -o addopts="" \
  tests/unit/neural/test_cuda_graphs.py tests/unit/training/test_gpu_training.py
step 2 runtime 60 $PY bench/neural_runtime.py --devices cuda --rounds 5 --passes 200
step 3 reasoning 100 $PY bench/reasoning_inference.py --devices cuda --batches 1 1000 \
  --rounds 3 --batch1-calls 10 --segments 8
step 4 batcher 120 $PY bench/batcher.py --devices cuda --seconds 4 --max-wait-ms 0 2
step 5 train 150 $PY bench/train_speed.py --devices cuda --seconds 12 --batch-size 384 \
  --presets trm-mlp-paper-sudoku hrm-paper-sudoku --data-workers 0 4
step 6 selfplay 100 $PY bench/selfplay.py --device cuda --games 256 --steps 1
echo "== done after ${SECONDS}s"
cat "$OUT/summary.log"
