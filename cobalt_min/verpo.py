"""VeRPO-MT's rewards and advantages: the paper's second online multi-turn baseline (VeRPO, arXiv
2601.03525, section 4; docs/departures.md says where this follows COBALT's environment instead).

A group is the G conversations rolled out for one problem; conversation i has L_i <= T turns, and turn t of
it passes test j of the problem's m tests (p[i,t,j] = 1) or not. Nothing here knows about models or
sandboxes: it takes those verdicts and returns what train.py would multiply the log-ratios with.

    rho_j  = (sum_i sum_t p[i,t,j]) / M                   pass rate of test j over all M = sum_i L_i turns
    w_j    = exp(-alpha rho_j)                             hard tests weigh more (alpha = 2)
    N_j    = sum_k exp(-(rho_j - rho_k)^2 / (2 sigma^2))   kernel density of the pass rates at rho_j,
             sigma = std(rho) / 2 (population std)         so a cluster of equally easy tests weighs as ~one
    w'_j   = w_j / (N_j + eps)
    R_turn(i,t) = sum_j w'_j p[i,t,j]                      the dense reward of every turn
    Rtil(i)     = gamma^L_i if the last turn of i passes every test, else 0   (gamma = 0.95)
    A(i,t) = [Rtil(i) - mean_k Rtil(k)] + beta [R_turn(i,t) - mean over all M turns of R_turn]   (beta = 1)

No division by a standard deviation anywhere (the paper's F_norm = 1). When every rho_j is equal, sigma is 0
and the density is taken in its limit: N_j = the number of tests whose rho equals rho_j.
"""

import torch

ALPHA, GAMMA, BETA, EPS = 2.0, 0.95, 1.0, 1e-6  # the paper's alpha, gamma and beta; eps is not given there


def weights_per_test(passes: torch.Tensor, alpha: float = ALPHA, eps: float = EPS) -> torch.Tensor:
    """passes (M, m): the verdicts of every turn of a group (rows) on every test (columns) -> w' (m,)."""
    p = passes.float()
    rho = p.mean(0)
    w = torch.exp(-alpha * rho)
    sigma = rho.std(correction=0) / 2 if rho.numel() > 1 else rho.new_zeros(())
    diff = rho[:, None] - rho[None, :]
    if sigma > 0:
        density = torch.exp(-diff ** 2 / (2 * sigma ** 2)).sum(1)
    else:  # the sigma -> 0 limit: each test counts the tests of exactly its pass rate
        density = (diff == 0).sum(1).to(rho.dtype)
    return w / (density + eps)


def group_advantages(passes: torch.Tensor, lengths: torch.Tensor, alpha: float = ALPHA, gamma: float = GAMMA,
                     beta: float = BETA, eps: float = EPS) -> dict:
    """One group: passes (G, T, m) verdicts of G conversations, T turns, m tests (turns past a conversation's
    length are ignored), lengths (G,) the L_i. Returns weights (m,), turn_rewards (G, T), outcomes (G,) =
    Rtil, and advantages (G, T); the entries past L_i are 0."""
    G, T, m = passes.shape
    valid = torch.arange(T)[None, :] < lengths[:, None]  # (G, T)
    p = passes.float() * valid[:, :, None]
    weights = weights_per_test(p[valid], alpha, eps)
    turn_rewards = (p @ weights) * valid
    M = valid.sum()
    a_turn = (turn_rewards - turn_rewards.sum() / M) * valid
    last = p[torch.arange(G), (lengths - 1).clamp(min=0)]  # (G, m): each conversation's last turn
    solved = (last.sum(1) == m) & (lengths > 0)
    outcomes = solved.float() * gamma ** lengths.float()
    a_traj = outcomes - outcomes.mean()
    return {"weights": weights, "turn_rewards": turn_rewards, "outcomes": outcomes,
            "advantages": (a_traj[:, None] + beta * a_turn) * valid}


def batch_advantages(trajectories: list, alpha: float = ALPHA, gamma: float = GAMMA, beta: float = BETA) -> dict:
    """A step's groups: trajectories[b][g] rolled out by rollout.rollout(keep_tokens=True) (every turn's
    `tests_passed`, T turns each) -> advantages (B, G, T), turn_rewards (B, G, T), outcomes (B, G).

    VeRPO ends a conversation at the first program that passes every test. train.py rolls out all T turns
    (every rank then trains the same number of rows); L_i is the turn of that first success (T without
    one), and the turns after it count nowhere: not in the pass rates, not in the baselines, advantage 0."""
    out = {"advantages": [], "turn_rewards": [], "outcomes": []}
    for per_problem in trajectories:
        passes = torch.tensor([[turn["tests_passed"] for turn in tr["turns"]] for tr in per_problem])  # (G, T, m)
        G, T, _ = passes.shape
        solved = passes.all(-1)  # (G, T)
        lengths = torch.where(solved.any(1), solved.int().argmax(1) + 1, torch.full((G,), T))
        group = group_advantages(passes, lengths, alpha, gamma, beta)
        for k in out:
            out[k].append(group[k])
    return {k: torch.stack(v) for k, v in out.items()}
