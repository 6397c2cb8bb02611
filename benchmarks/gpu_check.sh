#!/usr/bin/env bash
# The GPU check on one CUDA GPU, most important first, each part under its own time limit (the limits
# add up to 7 min 45 s with the model's build, so a rerun fits a short GPU slot). This round (issue 41):
#   generate  hf_infer, 64 sequences x 256 tokens: growing cache against static cache + CUDA graphs
#   sync      the colocated weight sync, trainer and engine on one GPU: object store against CUDA IPC
#   hf        hf_train: one GRPO step packed (padding-free) and padded, offload/reload, a weight sync
#   tests     the GPU-aware tests of this round: static decode, partial rollout, the weight handoff
#   pipeline  the demo config with actor_train and actor_infer colocated on the GPU (2 steps)
# FULL=1 adds last round's DeepSpeed ZeRO-2/3 and Megatron-core parts (about 5 minutes more).
# All on a Qwen2.5-0.5B-shaped model (benchmarks/gpu_check.py).
#
#   OUT=/tmp/gpu bash benchmarks/gpu_check.sh
#
# Without a GPU it runs the same parts on CPU at tiny sizes (roll-tiny), says "not on a GPU" where a
# figure needs one, and skips the GPU-only parts: a smoke test of the script itself.
# Figures go to $OUT/gpu_results.jsonl (one JSON line per part); docs/gpu.md records what they said.
set -u
OUT=${OUT:-/tmp/gpu_check}
RESULTS=$OUT/gpu_results.jsonl
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
       RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
PY=${PYTHON:-python3}
# each part's limit is scaled by LIMIT_SCALE (1 on a GPU; 8 on CPU, where a shared machine may be slow)
part() { local limit=$(( $1 * SCALE )); shift; echo "=== $* (limit ${limit}s) $(date +%T)"; timeout "$limit" "$@"; echo "=== rc $? $(date +%T)"; }
started=$(date +%s)

if $PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    GPU=1
    SCALE=${LIMIT_SCALE:-1}
    MODEL=${MODEL:-/tmp/qwen25-05b-shaped}
    SIZES=()
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
else
    GPU=0
    SCALE=${LIMIT_SCALE:-8}
    MODEL=${MODEL:-roll-tiny}
    SIZES=(--device cpu --rows 8 --group 4 --new-tokens 16 --micro 4 --steps 1 --sync-repeats 1)
    echo "not on a GPU: every part runs on CPU at tiny sizes (roll-tiny); the figures are not the GPU's"
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

if [ "$GPU" = 1 ] && [ ! -f "$MODEL/config.json" ]; then
    part 60 $PY benchmarks/gpu_check.py model --out "$MODEL"
fi
part 75 $PY benchmarks/gpu_check.py generate --model "$MODEL" --results "$RESULTS" ${SIZES[@]+"${SIZES[@]}"}
part 90 $PY benchmarks/gpu_check.py sync --model "$MODEL" --results "$RESULTS" ${SIZES[@]+"${SIZES[@]}"}
part 90 $PY benchmarks/gpu_check.py hf --model "$MODEL" --results "$RESULTS" ${SIZES[@]+"${SIZES[@]}"}

part 60 $PY -m pytest -q -rfE -p no:cacheprovider --timeout $(( 55 * SCALE )) tests/strategies/test_static_decode.py \
    tests/strategies/test_partial_rollout.py tests/distributed/test_weight_handoff.py

if [ "$GPU" = 1 ]; then
    # the demo config on the GPU: 0.5B-shaped model, both roles on device 0 (offload/reload around phases);
    # its weight syncs take the CUDA IPC handoff (the log's sync times)
    part 90 $PY -m roll_core run examples/frozen_lake/grpo.yaml pretrain="$MODEL" \
        "actor_train.device_mapping=[0]" "actor_infer.device_mapping=[0]" \
        actor_train.model_args.dtype=bf16 actor_infer.model_args.dtype=bf16 \
        actor_train.training_args.learning_rate=1e-6 warmup_sft.steps=0 \
        max_steps=2 eval_steps=0 save_steps=0 \
        logging_dir=/tmp/gpu_pipeline output_dir=/tmp/gpu_pipeline_ckpt render_save_dir=/tmp/gpu_pipeline_render
    cp /tmp/gpu_pipeline/learning_curve.png "$OUT/pipeline_learning_curve.png" 2>/dev/null
else
    echo "not on a GPU: the colocated pipeline part is skipped (tests/pipeline runs it on CPU)"
fi

if [ "${FULL:-0}" = 1 ] && [ "$GPU" = 1 ]; then
    part 130 $PY benchmarks/gpu_check.py deepspeed --stage 2 --model "$MODEL" --results "$RESULTS"
    part 90 $PY benchmarks/gpu_check.py megatron --model "$MODEL" --results "$RESULTS"
    part 60 $PY benchmarks/gpu_check.py deepspeed --stage 3 --model "$MODEL" --results "$RESULTS"
elif [ "${FULL:-0}" = 1 ]; then
    echo "not on a GPU: the DeepSpeed and Megatron parts are skipped"
fi
echo "=== done $(date +%T), $(( $(date +%s) - started )) s in all"
cat "$RESULTS"
