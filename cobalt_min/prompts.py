"""The self-debugging conversation (paper §2): system message, first turn, execution feedback, history.

A conversation is a plain list of {"role", "content"} dicts:

    [system, user: problem, assistant: program 0, user: feedback on program 0, assistant: program 1, ...]

Feedback shows the FIRST failing public test only, in test order; each field is cut to its first and
last 200 characters. When every public test passes, the feedback says so and asks the model to think
about edge cases (the hidden tests); the conversation goes on.
"""

import json
import re

from cobalt_min.sandbox import OUT_OF_TIME

SYSTEM_PROMPT = """You are a careful, helpful Python programming assistant. Solve the user's coding problem.

Your program runs in a locked-down sandbox with these rules:
1. Stay within the time and memory limits: avoid very deep recursion and very large data structures.
2. Do not create processes or threads that outlive the program, send signals, or run shell commands.
3. Do not read, write or list files or directories; use standard input and standard output only.
4. Use only the Python standard library; system modules such as resource, psutil or subprocess are unavailable.

Keep these rules in mind when you design your solution."""

FIRST_TURN_STDIO = """Think step by step, then write one complete Python program that solves the problem below. \
The program must read its input from standard input and write its answer to standard output. \
Put the whole program in a single ```python code block.

{question}"""

FIRST_TURN_CALL = """Think step by step, then write one complete Python solution to the problem below. \
Implement it starting from this code (keep the names and signature), in a single ```python code block:

```python
{starter_code}
```

{question}"""

FEEDBACK_HEADER = """Think step by step and fix any problem in your previous Python program. First analyse the \
execution feedback below: trace how your program ran on the failing input and find the lines responsible. \
Then write the complete corrected program in a single new ```python code block (not a partial patch).

Execution feedback:
{feedback}"""

ALL_PUBLIC_PASSED = ("Your program passed all public tests. Hidden tests remain: think carefully about edge cases "
                     "and performance on large inputs, and fix anything that could still be wrong.")
NO_CODE = "No code was found in your answer. Write the complete program in a single ```python code block."

HEAD = TAIL = 200  # characters kept at each end of a long feedback field
HISTORY_CHARS = 6000  # thinking models: earlier answers keep at most this much text after </think>


def truncate(text: str, head: int = HEAD, tail: int = TAIL) -> str:
    """The field stripped, then its first `head` + "...(truncated) ..." + last `tail` characters when
    longer than head + tail (the authors' truncatefn, marker included, applied to stripped fields)."""
    text = text.strip()
    if len(text) <= head + tail:
        return text
    return text[:head] + "...(truncated) ..." + text[-tail:]


def first_turn_messages(question: str, starter_code: str = "", fn_name: str | None = None,
                        system_prompt: str = SYSTEM_PROMPT) -> list[dict]:
    """The opening context s_0 = [system, user: problem]."""
    if fn_name:
        user = FIRST_TURN_CALL.format(question=question.strip(), starter_code=starter_code.rstrip() or f"def {fn_name}(...):")
    else:
        user = FIRST_TURN_STDIO.format(question=question.strip())
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]


_FENCE = re.compile(r"```[\w+.-]*[ \t]*\n(.*?)```", re.DOTALL)


def has_code_block(response: str) -> bool:
    """Whether the response holds a complete fenced code block (the generation engine's --stop-after-code)."""
    return _FENCE.search(response) is not None


def cut_after_code(response: str) -> tuple[str, bool]:
    """The response up to the end of its first complete code block, and whether it had one (--stop-after-code
    where the sampler cannot stop there itself: the API engine)."""
    match = _FENCE.search(response)
    return (response[:match.end()], True) if match else (response, False)


def extract_code(response: str) -> str | None:
    """The LAST complete fenced code block of a response (the authors' rule), or None.
    An unclosed fence (a response cut off by the token limit) is not a block."""
    blocks = _FENCE.findall(response)
    if not blocks:
        return None
    code = blocks[-1].strip()
    return code or None


def history_text(response: str, thinking: bool) -> str:
    """What an earlier answer contributes to later turns: thinking models keep only the text after
    </think>, cut to HISTORY_CHARS characters; other models keep the whole response."""
    if not thinking:
        return response
    if "</think>" in response:
        response = response.split("</think>")[-1].strip()
    return response[:HISTORY_CHARS]


def _show(value, call_based: bool) -> str:
    if call_based:
        return json.dumps(value) if not isinstance(value, str) else value
    return value


def feedback_text(results: list, public_tests: dict, timeout_s: float = 4.0) -> str:
    """Describe the first failing public test (results: sandbox TestResults, one per public test),
    or say that all public tests passed. Every field is truncated to 200 + 200 characters."""
    call_based = bool(public_tests.get("fn_name"))
    for k, r in enumerate(results):
        if r.passed:
            continue
        inp = public_tests["inputs"][k]
        shown_input = ", ".join(json.dumps(a) for a in inp) if call_based else inp
        lines = [f"Input:\n{truncate(shown_input)}"]
        if r.status == "timeout":
            if r.detail == OUT_OF_TIME:
                return "The program did not finish running all test cases within its total time limit."
            lines.append(f"The program timed out after {timeout_s:g} seconds.")
            return "\n".join(lines)
        output = (r.returned or "") if call_based else r.stdout
        if r.status == "wrong_answer":
            if call_based and r.detail:
                output = r.detail
            lines.append(f"Your output:\n{truncate(output)}")
            lines.append(f"Expected output:\n{truncate(_show(public_tests['outputs'][k], call_based))}")
        else:  # runtime_error, memory_limit, output_limit
            lines.append(f"Your output:\n{truncate(output)}")
            err = r.stderr.strip() or r.detail or r.status.replace("_", " ")
            if r.status == "memory_limit" and "MemoryError" not in err:
                err += "\nMemoryError: the program exceeded the memory limit"
            if r.status == "output_limit":
                err = "The program printed far more output than expected and was stopped."
            lines.append(f"Error:\n{truncate(err)}")
        return "\n".join(lines)
    return ALL_PUBLIC_PASSED


def feedback_message(results: list | None, public_tests: dict, timeout_s: float = 4.0) -> dict:
    """The user turn after a program: the feedback header and text; results=None means no code block."""
    text = NO_CODE if results is None else feedback_text(results, public_tests, timeout_s)
    return {"role": "user", "content": FEEDBACK_HEADER.format(feedback=text)}


def says_all_public_passed(message: dict) -> bool:
    """True for a feedback message that reports that every public test passed (trajectories.py)."""
    return message["role"] == "user" and ALL_PUBLIC_PASSED in message["content"]
