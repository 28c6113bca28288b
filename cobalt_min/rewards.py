"""The COBALT reward (paper §3): staged correctness + improvement over the context + format terms.

    r = clip(correctness(pr, prev_best) + format(response, correctness), -1, 1)     (no code: r = -1)

pr is the new program's pass rate on ALL tests of the problem (public + hidden); prev_best is the best
pass rate among the programs already in the context (0 at the first turn). Validation uses the plain
"all tests pass" reward instead. Token lengths are measured with a `count_tokens(text) -> int`
callable: train.py passes the policy's tokenizer. (The authors counted with tiktoken's o200k_base
encoding; lengths differ by tokenizer, so the 4096/2048/512 thresholds are approximate across models.)
"""

import math
import re

import numpy as np

FORMAT_PENALTY = -0.9  # an invalid response (repetition, broken think/code structure)
MAX_REASONING_TOKENS = 4096
MAX_ANSWER_TOKENS = 2048
MAX_EXPLANATION_TOKENS = 512
REFLECTION_KEYWORDS = ("wait", "mistake", "however", "but", "retry", "error", "verify", "wrong", "evaluate")
_KEYWORD_PATTERNS = [re.compile(rf"\b{kw}\b") for kw in REFLECTION_KEYWORDS]


def token_counter(tokenizer):
    """count_tokens(text) -> tokens of `text` under `tokenizer` (the format reward's lengths)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def correctness_reward(pass_rate: float, prev_best: float) -> float:
    """Staged correctness, then the improvement rule (paper §3).

    Stages: pr == 1 -> 1.0; pr >= 0.5 -> 0.2; 0 < pr < 0.5 -> 0.0; pr == 0 -> -0.1 (a continuous
    pass-rate reward was avoided: it encouraged partially correct programs).
    Improvement, only when pr < 1 and p = prev_best > 0:
      pr > p:  r += 0.1 (pr - p) / (1 - p)        (share of the remaining gap that was closed)
      pr <= p: r  = -0.1 + 0.1 (pr - p) / p        (REPLACES r: no gain is penalised, a loss more so)
    """
    pr, p = pass_rate, prev_best
    if pr >= 1.0:
        r = 1.0
    elif pr >= 0.5:
        r = 0.2
    elif pr > 0.0:
        r = 0.0
    else:
        r = -0.1
    if pr < 1.0 and p > 0.0:
        if pr > p:
            r += 0.1 * (pr - p) / (1.0 - p)
        else:
            r = -0.1 + 0.1 * (pr - p) / p
    return r


def has_repetition(text: str, min_len: int = 32, min_repeats: int = 8) -> bool:
    """True if some block of >= min_len characters occurs >= min_repeats times in a row.

    A block of length L repeats k times from i exactly when text[j] == text[j + L] for every j in
    [i, i + (k - 1) L); so for each L we look for a run of >= (min_repeats - 1) L equal positions
    between the text and itself shifted by L (vectorised; same verdict as the authors' regex
    `(.{L})\\1{7,}` tried for every L from 32 to len // 8)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    n = len(codes)
    for length in range(min_len, n // min_repeats + 1):
        need = (min_repeats - 1) * length
        eq = codes[:-length] == codes[length:]
        if eq.sum() < need:
            continue
        # longest run of True in eq
        padded = np.concatenate(([0], eq.astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(padded))
        if len(edges) and (edges[1::2] - edges[0::2]).max() >= need:
            return True
    return False


def split_response(response: str, thinking: bool):
    """Check the response structure; return (reasoning, answer, code, explanation) or None if invalid.

    Thinking models: exactly one `</think>`; reasoning is the text before it and the answer the text
    after it. Non-thinking models (no think tags required): reasoning is the text before the code
    block and the answer the rest (our choice; the paper only defines the thinking case).
    The answer must hold exactly one ```python block, closed once by a line starting with ```, and
    the code may not contain a backtick."""
    if thinking:
        if response.count("</think>") != 1:
            return None
        reasoning, answer = response.split("</think>")
        reasoning, answer = reasoning.strip(), answer.strip()
    else:
        start = response.find("```python")
        reasoning = response[:max(start, 0)].strip()
        answer = response[max(start, 0):].strip()
    start = answer.find("```python")
    if start < 0 or answer.count("```python") != 1:
        return None
    body_start = start + len("```python")
    end = answer.find("\n```", body_start)
    if end < 0 or answer[body_start:].count("\n```") != 1:
        return None
    code = answer[body_start:end]
    if "`" in code:
        return None
    explanation = answer[end + len("\n```"):].strip()
    return reasoning, answer, code, explanation


def count_reflection_keywords(reasoning: str) -> int:
    """Number of distinct reflection keywords that occur between 1 and 4 times (whole words, any case)."""
    text = reasoning.lower()
    return sum(1 for pat in _KEYWORD_PATTERNS if 1 <= len(pat.findall(text)) <= 4)


def format_reward(response: str, correctness: float, *, count_tokens, thinking: bool) -> float:
    """The format term of paper §3 (added to `correctness`, the value of correctness_reward).

    Invalid response (repetition, think/code structure, stray backticks): -0.9.
    Valid and correctness >= 0: -0.01 if reasoning > 4096, answer > 2048 or explanation > 512 tokens.
    Valid and correctness < 0: a small bonus for reasoning effort, 0.075 tanh(reasoning / 1024) plus
    0.005 per reflection keyword used 1-4 times (at most 0.025), or -0.1 if reasoning > 4096; then
    -0.1 for an over-long answer and -0.1 for an over-long explanation."""
    if has_repetition(response):
        return FORMAT_PENALTY
    parts = split_response(response, thinking)
    if parts is None:
        return FORMAT_PENALTY
    reasoning, answer, _, explanation = parts
    n_reason, n_answer, n_expl = count_tokens(reasoning), count_tokens(answer), count_tokens(explanation)
    if correctness >= 0.0:
        too_long = n_reason > MAX_REASONING_TOKENS or n_answer > MAX_ANSWER_TOKENS or n_expl > MAX_EXPLANATION_TOKENS
        return -0.01 if too_long else 0.0
    if n_reason <= MAX_REASONING_TOKENS:
        bonus = 0.075 * math.tanh(n_reason / 1024)
        bonus += min(0.025, 0.005 * count_reflection_keywords(reasoning))
    else:
        bonus = -0.1
    if n_answer > MAX_ANSWER_TOKENS:
        bonus -= 0.1
    if n_expl > MAX_EXPLANATION_TOKENS:
        bonus -= 0.1
    return bonus


def training_reward(response: str, pass_rate: float | None, prev_best: float, *, count_tokens,
                    thinking: bool) -> float:
    """r in [-1, 1]: -1.0 when the response has no code block (pass_rate None), otherwise
    clip(correctness + format, -1, 1); nan when the program has no verdict (pass_rate nan: the sandbox
    failed on it), which the caller leaves out."""
    if pass_rate is None:
        return -1.0
    if math.isnan(pass_rate):
        return math.nan
    correctness = correctness_reward(pass_rate, prev_best)
    r = correctness + format_reward(response, correctness, count_tokens=count_tokens, thinking=thinking)
    return max(-1.0, min(1.0, r))


def validation_reward(pass_rate: float | None) -> float:
    """1.0 if the program passes every test, else 0.0 (no code block: 0.0)."""
    return 1.0 if pass_rate is not None and pass_rate >= 1.0 else 0.0
