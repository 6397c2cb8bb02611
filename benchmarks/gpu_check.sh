#!/usr/bin/env bash
# The whole GPU check on one CUDA GPU, most important first, each part under its own time limit:
# hf_infer + hf_train (one GRPO step, offload/reload, weight sync), the demo pipeline with actor_train
# and actor_infer colocated on the GPU, DeepSpeed ZeRO-2, Megatron-core (TP=1), DeepSpeed ZeRO-3,
# then the GPU-aware tests. All on a Qwen2.5-0.5B-shaped model (benchmarks/gpu_check.py).
#
#   OUT=/tmp/gpu bash benchmarks/gpu_check.sh
#
# Figures go to $OUT/gpu_results.jsonl (one JSON line per part), the pipeline's learning curve and
# metrics beside them; docs/gpu.md records what they said.
set -u
OUT=${OUT:-/tmp/gpu_check}
MODEL=${MODEL:-/tmp/qwen25-05b-shaped}
RESULTS=$OUT/gpu_results.jsonl
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
       RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
PY=${PYTHON:-python3}
part() { local limit=$1; shift; echo "=== $* (limit ${limit}s) $(date +%T)"; timeout "$limit" "$@"; echo "=== rc $? $(date +%T)"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

part 90 $PY benchmarks/gpu_check.py model --out "$MODEL"
part 120 $PY benchmarks/gpu_check.py hf --model "$MODEL" --results "$RESULTS"

# the demo config on the GPU: 0.5B-shaped model, both roles on device 0 (offload/reload around phases)
part 170 $PY -m roll_core run examples/frozen_lake/grpo.yaml pretrain="$MODEL" \
    "actor_train.device_mapping=[0]" "actor_infer.device_mapping=[0]" \
    actor_train.model_args.dtype=bf16 actor_infer.model_args.dtype=bf16 \
    actor_train.training_args.learning_rate=1e-6 warmup_sft.steps=4 warmup_sft.learning_rate=1e-5 \
    max_steps=4 eval_steps=2 save_steps=4 val_batch_size=16 val_env_manager.num_env_groups=16 \
    logging_dir=/tmp/gpu_pipeline output_dir=/tmp/gpu_pipeline_ckpt render_save_dir=/tmp/gpu_pipeline_render
ls -la /tmp/gpu_pipeline 2>/dev/null; cp /tmp/gpu_pipeline/learning_curve.png "$OUT/pipeline_learning_curve.png" 2>/dev/null

part 130 $PY benchmarks/gpu_check.py deepspeed --stage 2 --model "$MODEL" --results "$RESULTS"
part 90 $PY benchmarks/gpu_check.py megatron --model "$MODEL" --results "$RESULTS"
part 60 $PY benchmarks/gpu_check.py deepspeed --stage 3 --model "$MODEL" --results "$RESULTS"

part 150 $PY -m pytest -q -rfE -p no:cacheprovider --timeout 120 \
    plugins/roll-strategy-megatron/tests/test_megatron_gpu.py tests/strategies/test_hf_train.py \
    tests/strategies/test_hf_infer.py plugins/roll-strategy-deepspeed/tests/test_deepspeed_strategy.py
echo "=== done $(date +%T)"
cat "$RESULTS"
