"""What train.py's steps draw from, and in which order: COBALT's contexts (collect.py's, plus perturbed
ones from perturb.py augment), every record checked; single-turn GRPO's first-turn contexts of the
problems; GRPO-MT's and VeRPO-MT's problems; the warm-up's demonstrations (sft); the validation contexts; the
epoch's order as a function of the step number (what makes --resume exact).

    data, val_contexts, too_long, steps_per_epoch, total_steps = load_training_data(args, tokenizer, log)
    epoch, share = batch_for_step(data, step, steps_per_epoch, batch_size=B, seed=seed, rank=rank, world=world)
"""

import random
from pathlib import Path

from cobalt_min.generation import chat_prompt_ids
from cobalt_min.jsonl import read_jsonl
from cobalt_min.problems import problems_of
from cobalt_min.trajectories import first_turn_contexts


def load_contexts(path, what="contexts", may_be_empty=False) -> list[dict]:
    """Contexts from collect.py / perturb.py, checked: each needs messages, prev_best and tests."""
    if not Path(path).exists():
        raise SystemExit(f"error: {what} file {path} does not exist")
    rows = read_jsonl(path)
    if not rows and not may_be_empty:
        raise SystemExit(f"error: {path} holds no contexts")
    for n, c in enumerate(rows, 1):
        missing = {"messages", "prev_best", "tests"} - c.keys()
        if missing:
            raise SystemExit(f"error: {path} line {n} lacks {sorted(missing)}")
        t = c["tests"]
        if not isinstance(t, dict) or not t.get("inputs") or len(t["inputs"]) != len(t.get("outputs", [])):
            raise SystemExit(f"error: {path} line {n} (problem {c.get('problem_id')}) has no usable tests")
    return rows


def load_demonstrations(path) -> list[dict]:
    """The warm-up's demonstrations (train.py --method sft; cobalt_min/warmup.py writes them), checked: each
    is a conversation ending with the assistant's message, the target."""
    if not Path(path).exists():
        raise SystemExit(f"error: demonstrations file {path} does not exist")
    rows = read_jsonl(path)
    if not rows:
        raise SystemExit(f"error: {path} holds no demonstrations")
    for n, d in enumerate(rows, 1):
        messages = d.get("messages")
        if not isinstance(messages, list) or len(messages) < 2 or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") for m in messages):
            raise SystemExit(f"error: {path} line {n} has no conversation (messages: a list of role and content)")
        if messages[-1]["role"] != "assistant":
            raise SystemExit(f"error: {path} line {n} does not end with an assistant message (the target)")
    return rows


def mix_perturbed(clean: list, perturbed: list, fraction: float | None, seed: int) -> list:
    """The training set with perturbed contexts added (paper §7: augmentation against in-context reward
    hacking). fraction None: all of them (the paper adds the perturbed examples; it states no ratio).
    Otherwise fraction is their share: n_p = fraction / (1 - fraction) * n_clean, capped by what exists."""
    if fraction is None:
        return clean + perturbed
    if not 0 < fraction < 1:
        raise SystemExit(f"error: --perturbed-fraction must be in (0, 1), not {fraction}: 0 would add nothing")
    n = min(len(perturbed), round(fraction / (1 - fraction) * len(clean)))
    if n == 0:
        raise SystemExit(f"error: --perturbed-fraction {fraction} adds no perturbed context to {len(clean)} clean ones")
    return clean + random.Random(seed).sample(perturbed, n)


def drop_long_contexts(contexts: list, count_prompt_tokens, max_prompt_tokens: int) -> tuple[list, int]:
    """(contexts whose prompt fits max_prompt_tokens, how many were dropped). Done once at load, the same
    on every rank: were it done per step, ranks could run different numbers of micro-batches and a
    collective would wait forever."""
    kept = [c for c in contexts if count_prompt_tokens(c["messages"]) <= max_prompt_tokens]
    return kept, len(contexts) - len(kept)


def epoch_order(n: int, epoch: int, seed: int) -> list[int]:
    """The data order of an epoch: a permutation seeded by (seed, epoch), so a step number alone says
    exactly which contexts come next (what makes --resume exact)."""
    order = list(range(n))
    random.Random(seed * 1000 + epoch).shuffle(order)  # (distinct for every (seed, epoch) under 1000 epochs)
    return order


def batch_for_step(data: list, step: int, steps_per_epoch: int, *, batch_size: int, seed: int, rank: int,
                   world: int) -> tuple[int, list]:
    """(epoch, this rank's share of the step's batch of contexts or problems). The order is a function of
    the step number alone, so a resumed run sees exactly the batch an uninterrupted one would."""
    epoch, position = divmod(step, steps_per_epoch)
    order = epoch_order(len(data), epoch, seed)
    batch_ids = order[position * batch_size:(position + 1) * batch_size]
    return epoch, [data[i] for i in batch_ids[rank::world]]


def load_training_contexts(path, perturbed_path, perturbed_fraction: float | None, seed: int, log) -> list:
    """The training contexts: the clean ones plus the perturbed ones (paper §7), every record checked."""
    contexts = load_contexts(path)
    if perturbed_path:
        # (perturb.py augment writes no context when no collected trajectory had feedback to perturb)
        perturbed = load_contexts(perturbed_path, "perturbed contexts", may_be_empty=True)
        if perturbed:
            contexts = mix_perturbed(contexts, perturbed, perturbed_fraction, seed)
        else:
            log(f"warning: {perturbed_path} holds no perturbed contexts: training on the clean ones only")
    elif perturbed_fraction is not None:
        raise SystemExit("error: --perturbed-fraction needs --perturbed-contexts")
    return contexts


def fit_prompt_budget(contexts: list, val_contexts: list, count_prompt_tokens, max_prompt_tokens: int,
                      log) -> tuple[list, list, int]:
    """Drop the contexts longer than --max-prompt-tokens, here, once (drop_long_contexts says why):
    (training contexts, validation contexts, how many training contexts were dropped)."""
    contexts, too_long = drop_long_contexts(contexts, count_prompt_tokens, max_prompt_tokens)
    val_contexts, val_too_long = drop_long_contexts(val_contexts, count_prompt_tokens, max_prompt_tokens)
    if not contexts:
        raise SystemExit(f"error: every training context is longer than --max-prompt-tokens {max_prompt_tokens}")
    log(f"{len(contexts)} training contexts, {len(val_contexts)} validation contexts; dropped as longer than "
        f"{max_prompt_tokens} prompt tokens: {too_long} training, {val_too_long} validation")
    return contexts, val_contexts, too_long


def load_training_data(args, tokenizer, log) -> tuple[list, list, int, int, int]:
    """(what the steps draw from: contexts for COBALT and single-turn GRPO, problems for GRPO-MT and
    VeRPO-MT; validation contexts; contexts dropped as too long; steps per epoch; steps in all)."""
    if args.method == "cobalt":
        data = load_training_contexts(args.contexts, args.perturbed_contexts, args.perturbed_fraction, args.seed, log)
    elif args.method == "sft":
        data = load_demonstrations(args.demonstrations)
    else:
        data = problems_of(args)
    val_contexts = load_contexts(args.val_contexts, "validation contexts")[:args.val_limit] if args.val_contexts else []
    if args.method == "single-turn":
        data = first_turn_contexts(data)  # the first turn s_0 of every problem, prev_best 0
    too_long = 0
    prompt_tokens = lambda messages: len(chat_prompt_ids(tokenizer, messages, args.thinking))  # noqa: E731
    if args.method in ("cobalt", "single-turn"):
        data, val_contexts, too_long = fit_prompt_budget(data, val_contexts, prompt_tokens, args.max_prompt_tokens, log)
    elif args.method == "sft":  # (a demonstration's prompt: all but its target)
        data, too_long = drop_long_contexts(data, lambda messages: prompt_tokens(messages[:-1]), args.max_prompt_tokens)
        if not data:
            raise SystemExit(f"error: every demonstration is longer than --max-prompt-tokens {args.max_prompt_tokens}")
    # As the authors (veRL's drop_last): only full batches; the last len % batch contexts of an epoch's
    # order are not trained in that epoch (each epoch's order differs, so no context is always left out).
    unit = {"cobalt": "contexts", "sft": "demonstrations"}.get(args.method, "problems")
    steps_per_epoch = len(data) // args.batch_size
    if steps_per_epoch == 0:
        raise SystemExit(f"error: {len(data)} training {unit} are fewer than --batch-size {args.batch_size}")
    total_steps = min(args.max_steps or 10 ** 9, args.epochs * steps_per_epoch)
    per_item = {"cobalt": f" x {args.group_size} programs", "sft": " (supervised fine-tuning on each one's last message)",
                "single-turn": f" x {args.group_size} first-turn programs (single-turn GRPO)",
                "grpo-mt": f" x {args.group_size} conversations of {args.turns} programs (GRPO-MT, credit: {args.credit})",
                "verpo-mt": f" x {args.group_size} conversations of {args.turns} programs (VeRPO-MT, alpha "
                            f"{args.verpo_alpha:g}, gamma {args.verpo_gamma:g}, beta {args.verpo_beta:g})"}[args.method]
    log(f"{total_steps} steps of {args.batch_size} {unit}{per_item}; each epoch leaves out "
        f"{len(data) % args.batch_size} {unit} (the last partial batch, as the authors)")
    return data, val_contexts, too_long, steps_per_epoch, total_steps
