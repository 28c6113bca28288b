"""GRPO-MT: the online multi-turn baseline the paper compares COBALT with (its §6 and table: GRPO-MT,
VeRPO-MT). The policy rolls out whole conversations itself and is trained on all of its turns.

    python train.py --method grpo-mt --problems data/train_problems.jsonl --turns 3 ...

Why here and not a script of its own: the two methods differ only in how a step's batch is built. COBALT
(train.cobalt_batch): contexts s_t from the reference policy's trajectories, ONE program sampled per
context and scored by its immediate reward. GRPO-MT (train.multi_turn_batch): problems, G conversations per
problem rolled out by the CURRENT policy (T programs, feedback after each: rollout.rollout, the loop
evaluate.py runs), each turn's program scored. Everything after the batch (log-probs, the clipped loss,
KL, aggregation, AdamW, weight sync, checkpoints, metrics) is train.py's, unchanged: a row is one
assistant turn, in its own context as the model saw it (the conversation so far, thinking models keeping
only the answer of earlier turns), so user, feedback and system tokens are never trained (they are the
row's prompt) and the log-probs keep logprobs.py's memory properties.

Credit assignment (the paper leaves it open; it says only that the reward is the hidden-test pass rate
and that outcome rewards make credit across turns hard). Here, with r_t the staged training reward of
turn t's program (rewards.training_reward: correctness against the best program earlier in the same
conversation, improvement, format):
- "outcome" (default): the conversation's return is r_{T-1}, the reward of its last program; advantages
  are group-normalised over the G conversations of a problem, (return - mean) / (std + eps), and every
  assistant token of every turn gets its conversation's advantage (gamma = 1).
- "reward-to-go" (--credit reward-to-go): turn t's return is r_t + r_{t+1} + ... + r_{T-1}; advantages
  are normalised over the G conversations of a problem separately for each turn t.
No early stop: every conversation has T programs (so every rank trains the same number of rows).
"""

import torch

from cobalt_min.generation import Completion
from cobalt_min.grpo import group_advantages
from cobalt_min.rewards import training_reward

CREDITS = ("outcome", "reward-to-go")


def turn_rewards(trajectory: dict, count_tokens, thinking: bool) -> list[float]:
    """r_t of each turn of one conversation: the staged training reward of its program against the best
    pass rate of the programs before it in the conversation (prev_best; 0 at the first turn)."""
    rewards, best = [], 0.0
    for turn in trajectory["turns"]:
        rate = None if turn["program"] is None else turn["pass_rate"]
        rewards.append(training_reward(turn["response"], rate, best, count_tokens=count_tokens, thinking=thinking))
        best = max(best, turn["pass_rate"])
    return rewards


def reward_tensor(trajectories: list, count_tokens, thinking: bool) -> tuple[torch.Tensor, list[int]]:
    """trajectories[b][g] -> (rewards (B, G, T): r_t of each problem, conversation and turn (turn_rewards),
    the problems kept). A problem with a conversation the sandbox failed on (an `infra_error`: a program
    without a verdict) is left out of the step: its rewards are nan, and it is not among those kept."""
    B, G, T = len(trajectories), len(trajectories[0]), len(trajectories[0][0]["turns"])
    kept = [b for b, trs in enumerate(trajectories) if not any(tr.get("infra_error") for tr in trs)]
    rewards = torch.full((B, G, T), float("nan"))
    rewards[kept] = torch.tensor([[turn_rewards(tr, count_tokens, thinking) for tr in trajectories[b]]
                                  for b in kept]).view(len(kept), G, T)
    return rewards, kept


def returns(rewards: torch.Tensor, credit: str) -> torch.Tensor:
    """rewards (B, G, T): r_t of each problem, conversation and turn -> the return each turn is trained
    with (B, G, T): "outcome", the last turn's reward for every turn; "reward-to-go", the sum from t on."""
    if credit == "outcome":
        return rewards[:, :, -1:].expand_as(rewards)
    if credit == "reward-to-go":
        return rewards.flip(-1).cumsum(-1).flip(-1)
    raise ValueError(f"credit must be one of {CREDITS}, not {credit!r}")


def advantages(rewards: torch.Tensor, credit: str, eps: float) -> torch.Tensor:
    """(B, G, T) rewards -> (B, G, T) advantages: returns normalised over the G conversations of each
    problem (for "reward-to-go", separately per turn; for "outcome" all turns share one value)."""
    ret = returns(rewards, credit)  # (B, G, T)
    B, G, T = ret.shape
    per_turn = ret.permute(0, 2, 1).reshape(B * T, G)  # groups: (problem, turn) x the G conversations
    return group_advantages(per_turn, eps=eps).reshape(B, T, G).permute(0, 2, 1)


def turn_rows(trajectories: list) -> tuple[list, list, list]:
    """The rows a step trains on, one per assistant turn, in (problem, conversation, turn) order:
    (distinct prompts, Completions, the prompt of each row). A turn's prompt is the conversation as the
    model saw it before that turn; the first turn's is the same for all G conversations of a problem
    and is stored once (logprobs runs it once for them)."""
    prompts, index, out, prompt_of = [], {}, [], []
    for per_problem in trajectories:
        for trajectory in per_problem:
            for turn in trajectory["turns"]:
                key = tuple(turn["prompt_ids"])
                if key not in index:
                    index[key] = len(prompts)
                    prompts.append(turn["prompt_ids"])
                prompt_of.append(index[key])
                out.append(Completion(turn["response"], turn["token_ids"], turn["finished"]))
    return prompts, out, prompt_of
