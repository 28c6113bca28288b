#!/usr/bin/env bash
# The paper's comparison on a laptop CPU: the base model, COBALT, single-turn GRPO (the paper's FT stage: the
# control that sees no feedback in training) and the online multi-turn baselines GRPO-MT and VeRPO-MT, the four
# trained from the same model with the same number of programs sampled online, evaluated on the same held-out
# problems with the same seeds. SmolLM2-135M-Instruct on the demo's "very easy function"
# problems (the demo's split). Run it with `make compare` (which creates .venv first). Sizes can be
# overridden like the demo's, e.g.
#   COMPARE_OUT=/tmp/c HELDOUT=2 TRAIN_PROBLEMS=4 SAMPLES=2 STEPS=2 GROUP=4 BATCH=2 bash compare.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${COMPARE_OUT:-compare_out}
DIFFICULTY=${DIFFICULTY:-very easy function}
HELDOUT=${HELDOUT:-16}           # held-out problems (evaluation)
TRAIN_PROBLEMS=${TRAIN_PROBLEMS:-30}  # training problems (COBALT's collection; FT's, GRPO-MT's and VeRPO-MT's rollouts)
TURNS=${TURNS:-2}                # programs per conversation: collection, GRPO-MT rollouts, evaluation
TRAJECTORIES=${TRAJECTORIES:-2}  # COBALT: trajectories per training problem (offline collection)
SAMPLES=${SAMPLES:-4}            # samples per held-out problem (evaluation)
STEPS=${STEPS:-8}                # COBALT's and FT's GRPO steps; GRPO-MT and VeRPO-MT get STEPS / TURNS (the same programs sampled)
GROUP=${GROUP:-8}                # programs per context (COBALT) or first turn (FT), conversations per problem (GRPO-MT, VeRPO-MT)
BATCH=${BATCH:-4}                # contexts (COBALT) or problems (FT, GRPO-MT, VeRPO-MT) per step
LR=${LR:-2e-5}
TOKENS=${MAX_NEW_TOKENS:-128}
MAX_PROMPT=${MAX_PROMPT:-600}    # COBALT: longer contexts are dropped
SEED=${SEED:-0}
MT_STEPS=$(( STEPS / TURNS > 0 ? STEPS / TURNS : 1 ))
mkdir -p "$OUT"
start=$(date +%s)
# Every step below skips work whose output exists: a folder holds the outputs of ONE set of settings.
settings=$(for v in DIFFICULTY HELDOUT TRAIN_PROBLEMS TURNS TRAJECTORIES SAMPLES STEPS GROUP BATCH LR TOKENS MAX_PROMPT SEED; do printf '%s=%s\n' "$v" "${!v}"; done)
if [ -f "$OUT/settings.txt" ] && [ "$(cat "$OUT/settings.txt")" != "$settings" ]; then
    echo "error: $OUT holds a run with other settings (was: $(grep -vxF -f <(echo "$settings") "$OUT/settings.txt" | tr '\n' ' ')):" \
         "use another COMPARE_OUT=folder, or delete $OUT to start over" >&2
    exit 2
fi
echo "$settings" > "$OUT/settings.txt"

echo "== 0. the model and the problems (the demo's split)"
[ -f "$OUT/smollm2/config.json" ] || "$PY" -m cobalt_min.generation "$OUT/smollm2"
MODEL="$OUT/smollm2"
"$PY" -m cobalt_min.problems split demo --difficulty "$DIFFICULTY" --heldout "$HELDOUT" --seed "$SEED" \
    --train-out "$OUT/train_problems.jsonl" --heldout-out "$OUT/heldout_problems.jsonl"
head -n "$TRAIN_PROBLEMS" "$OUT/train_problems.jsonl" > "$OUT/train_subset.jsonl"  # (one problem per line)

EVAL=(--problems "$OUT/heldout_problems.jsonl" --turns "$TURNS" --samples "$SAMPLES" --max-new-tokens "$TOKENS"
      --engine hf --batch-problems "$HELDOUT" --resume)
TRAIN=(--group-size "$GROUP" --batch-size "$BATCH" --max-new-tokens "$TOKENS" --lr "$LR" --kl-coef 0 --mini-batches 1
       --micro-batch-size "$GROUP" --seed "$SEED" --engine hf --resume)

echo "== 1. the base model on the held-out problems"
"$PY" evaluate.py --model "$MODEL" "${EVAL[@]}" --out "$OUT/eval_base"

echo "== 2. COBALT: offline trajectories of the base model, then $STEPS steps of one program per context"
"$PY" collect.py --model "$MODEL" --problems "$OUT/train_subset.jsonl" --trajectories "$TRAJECTORIES" --turns "$TURNS" \
    --max-new-tokens "$TOKENS" --engine hf --batch-problems "$TRAIN_PROBLEMS" --out "$OUT/collect" --resume
[ -f "$OUT/cobalt/final/config.json" ] || \
    "$PY" train.py --method cobalt --model "$MODEL" --contexts "$OUT/collect/contexts.jsonl" --max-steps "$STEPS" \
        --max-prompt-tokens "$MAX_PROMPT" --save-every "$STEPS" "${TRAIN[@]}" --out "$OUT/cobalt"
"$PY" evaluate.py --model "$OUT/cobalt/final" "${EVAL[@]}" --out "$OUT/eval_cobalt"

echo "== 3. FT (single-turn GRPO): $STEPS steps of $GROUP first-turn programs per problem (no feedback in training)"
[ -f "$OUT/ft/final/config.json" ] || \
    "$PY" train.py --method single-turn --model "$MODEL" --problems "$OUT/train_subset.jsonl" --max-steps "$STEPS" \
        --save-every "$STEPS" "${TRAIN[@]}" --out "$OUT/ft"
"$PY" evaluate.py --model "$OUT/ft/final" "${EVAL[@]}" --out "$OUT/eval_ft"

echo "== 4. GRPO-MT: $MT_STEPS steps of $GROUP whole $TURNS-program conversations per problem (the same programs sampled)"
[ -f "$OUT/grpo_mt/final/config.json" ] || \
    "$PY" train.py --method grpo-mt --model "$MODEL" --problems "$OUT/train_subset.jsonl" --turns "$TURNS" \
        --max-steps "$MT_STEPS" --save-every "$MT_STEPS" "${TRAIN[@]}" --out "$OUT/grpo_mt"
"$PY" evaluate.py --model "$OUT/grpo_mt/final" "${EVAL[@]}" --out "$OUT/eval_grpo_mt"

echo "== 5. VeRPO-MT: GRPO-MT's rollouts, per-test weighted turn rewards and the outcome advantage"
[ -f "$OUT/verpo_mt/final/config.json" ] || \
    "$PY" train.py --method verpo-mt --model "$MODEL" --problems "$OUT/train_subset.jsonl" --turns "$TURNS" \
        --max-steps "$MT_STEPS" --save-every "$MT_STEPS" "${TRAIN[@]}" --out "$OUT/verpo_mt"
"$PY" evaluate.py --model "$OUT/verpo_mt/final" "${EVAL[@]}" --out "$OUT/eval_verpo_mt"

echo "== 6. the comparison"
"$PY" -m cobalt_min.demos.compare "$OUT"
"$PY" -m cobalt_min.report "$OUT/eval_base" "$OUT/eval_cobalt" "$OUT/eval_ft" "$OUT/eval_grpo_mt" "$OUT/eval_verpo_mt" \
    "$OUT/cobalt" "$OUT/ft" "$OUT/grpo_mt" "$OUT/verpo_mt" --out "$OUT/report.html" \
    --title "COBALT vs FT (single-turn GRPO), GRPO-MT and VeRPO-MT: SmolLM2-135M-Instruct on held-out problems"
echo "compare run time: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
