"""Models behind an OpenAI-compatible server: the engine of `--engine api` (collect.py, evaluate.py, perturb.py
judge). Any server that speaks /v1/chat/completions works: `vllm serve`, SGLang, TGI, llama.cpp's server, Ollama,
a LiteLLM proxy in front of OpenAI / Anthropic / Bedrock, OpenAI itself. It needs the `openai` client
(pip install -e ".[api]").

The engine has the interface rollout.py uses (prompt_ids, sample, generate), with one difference: a "prompt" is
the conversation itself, since the server applies the chat template. Each sample is one request with its own
seed (generation.request_seeds, as the other engines seed them), many in flight (`concurrency`). A request is
retried with exponential backoff on 429, 5xx, timeouts, dropped connections and malformed answers, honouring
Retry-After; one that still fails comes back as a Completion with `error` set, and rollout.py makes its
conversation an infrastructure failure (counted apart, never scored). A server that does not answer at all
after the retries ends the call with a one-line error: the scripts keep every finished block of problems and
`--resume` continues. The key is read from the environment (OPENAI_API_KEY, or the variable `key_env` names)
and is kept nowhere else.

--stop-after-code: stop strings cannot tell a fence that opens a block from one that closes it, so the server
samples on and the response is cut after its first complete code block here: the same text as a stop there,
at the price of the tokens after it (which the usage counts). Thinking models: the reasoning, whether the
server returns it in `reasoning_content` (vLLM's and SGLang's reasoning parsers) or inside <think> in the
text, comes back as <think>...</think> before the answer, and the history rule of §2 applies as to the
in-process engines (whether the model thinks is the server's default: `thinking` is not sent).
"""

import concurrent.futures
import os
import random
import threading
import time

from tqdm import tqdm

from cobalt_min.generation import Completion, generate_texts, request_seeds
from cobalt_min.prompts import cut_after_code

RETRY_STATUS = {408, 409, 429} | set(range(500, 600))  # what a later request can fix; a 400 or 404 it cannot
START_TIMEOUT_S = 30.0  # the start check's own bound: a server that accepts the connection but never answers


def openai_client(base_url: str, key_env: str, timeout: float):
    """The official client, its own retries off (ours below count and log them)."""
    try:
        import openai
    except ImportError:
        raise SystemExit('error: --engine api needs the openai client: pip install -e ".[api]"') from None
    key = os.environ.get(key_env) or "EMPTY"  # local servers (vllm serve, llama.cpp) take any key
    return openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)


class APIEngine:
    def __init__(self, base_url: str, model: str, *, key_env: str = "OPENAI_API_KEY", concurrency: int = 16,
                 retries: int = 6, timeout: float = 600.0, backoff: float = 1.0, thinking: bool = False,
                 stop_after_code: bool = False, progress: bool = True):
        self.base_url, self.model, self.thinking, self.stop_after_code = base_url, model, thinking, stop_after_code
        self.concurrency, self.retries, self.backoff, self.progress = concurrency, retries, backoff, progress
        self.client, self.key_env = openai_client(base_url, key_env, timeout), key_env
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0, "failed_requests": 0}
        self._lock = threading.Lock()
        self.check_server()

    def check_server(self) -> None:
        """A server that is down, silent, refuses the key, or does not serve the model: a one-line error before any
        work (within START_TIMEOUT_S, whatever --api-timeout allows a request)."""
        import openai
        try:
            served = [m.id for m in self.client.with_options(timeout=START_TIMEOUT_S).models.list()]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            state = "is empty" if not os.environ.get(self.key_env) else "holds a key the server refuses"
            raise SystemExit(f"error: the server at {self.base_url} refused the key (HTTP {e.status_code}): "
                             f"${self.key_env} {state}; set it, or name the variable that holds the key with "
                             "--api-key-env") from None
        except openai.APITimeoutError:
            raise SystemExit(f"error: the server at {self.base_url} accepted the connection but did not answer "
                             f"within {START_TIMEOUT_S:g} s (GET /models)") from None
        except Exception as e:  # connection refused, DNS, TLS, a non-JSON answer: all say the same thing
            raise SystemExit(f"error: no OpenAI-compatible server answers at {self.base_url} "
                             f"({type(e).__name__}: {short(e)})") from None
        if self.model not in served:
            raise SystemExit(f"error: the server at {self.base_url} does not serve {self.model!r}; it serves: "
                             f"{', '.join(served[:20]) or 'nothing'}")

    def prompt_ids(self, conversation: list[dict]) -> list[dict]:
        """The API's prompt is the conversation (the server applies the chat template)."""
        return conversation

    def sample(self, prompts: list[list[dict]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
               max_new_tokens: int = 512, seed: int | list[int] | None = None) -> list[list[Completion]]:
        """n completions per conversation: one request each, sample j of conversation i seeded seeds[i] + j."""
        seeds = request_seeds(seed, len(prompts), n)
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]
        out = [[None] * n for _ in prompts]
        with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool, \
                tqdm(total=len(jobs), desc="requests", unit="req", disable=not self.progress, leave=False) as bar:
            futures = {pool.submit(self.request, prompts[i], seed=seeds[i] + j, temperature=temperature, top_p=top_p,
                                   max_tokens=max_new_tokens): (i, j) for i, j in jobs}
            try:
                for future in concurrent.futures.as_completed(futures):
                    i, j = futures[future]
                    out[i][j] = future.result()
                    bar.update(1)
            except ServerUnreachable as e:  # the call's work is lost; what the script appended before it is kept
                pool.shutdown(cancel_futures=True)
                raise SystemExit(f"error: the server at {self.base_url} stopped answering ({e}): every finished "
                                 "block of problems is kept; when it is back, run the same command with --resume") \
                    from None
        return out

    def generate(self, conversations: list[list[dict]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 512, seed: int | None = None) -> list[list[str]]:
        """n completion texts per conversation (a failed request: an empty text)."""
        return generate_texts(self, conversations, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)

    def request(self, messages: list[dict], *, seed: int, temperature: float, top_p: float,
                max_tokens: int) -> Completion:
        """One chat completion, retried. After the last retry: a Completion with `error` (no text) when the
        server answered with an error or timed out, ServerUnreachable when it did not answer at all."""
        import openai
        for attempt in range(self.retries + 1):
            try:
                response = self.client.chat.completions.create(
                    model=self.model, messages=messages, n=1, seed=seed, temperature=temperature, top_p=top_p,
                    max_tokens=max_tokens)
                return self.completion(response)
            except openai.APIStatusError as e:
                error, retry_after = f"HTTP {e.status_code}: {short(e)}", e.response.headers.get("retry-after")
                if e.status_code not in RETRY_STATUS:
                    break
            except (openai.APITimeoutError, openai.APIResponseValidationError, MalformedAnswer, ValueError) as e:
                error, retry_after = f"{type(e).__name__}: {short(e)}", None  # (ValueError: a body that is not JSON)
            except openai.APIConnectionError as e:  # refused, reset, dropped: the server may be gone
                error, retry_after = f"{type(e).__name__}: {short(e)}", None
                if attempt == self.retries:
                    raise ServerUnreachable(f"{error}, after {attempt + 1} attempts") from None
            if attempt < self.retries:
                with self._lock:
                    self.usage["retries"] += 1
                time.sleep(self.wait(attempt, retry_after))
        with self._lock:
            self.usage["failed_requests"] += 1
        return Completion("", [], False, error=f"{self.base_url}: {error} (after {attempt + 1} attempts)")

    def wait(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before the next attempt: the server's Retry-After when it gives one, else exponential
        backoff with jitter (backoff * 2^attempt, at most a minute)."""
        try:
            return min(float(retry_after), 300.0)
        except (TypeError, ValueError):
            return min(self.backoff * 2 ** attempt, 60.0) * random.uniform(0.5, 1.0)

    def completion(self, response) -> Completion:
        """A Completion from one answer; its usage added to the run's."""
        try:
            choice = response.choices[0]
            content = choice.message.content or ""
        except (AttributeError, IndexError, TypeError) as e:
            raise MalformedAnswer(f"no choices[0].message in the answer ({e})") from None
        reasoning = getattr(choice.message, "reasoning_content", None) or getattr(choice.message, "reasoning", None)
        text = f"<think>{reasoning}</think>{content}" if reasoning else content
        finished = choice.finish_reason == "stop"
        if self.stop_after_code:
            text, cut = cut_after_code(text)
            finished = finished or cut
        usage = getattr(response, "usage", None)
        with self._lock:
            self.usage["requests"] += 1
            self.usage["prompt_tokens"] += getattr(usage, "prompt_tokens", 0) or 0
            self.usage["completion_tokens"] += getattr(usage, "completion_tokens", 0) or 0
        return Completion(text, [], finished)


class MalformedAnswer(Exception):
    """An answer without the fields of a chat completion."""


class ServerUnreachable(Exception):
    """No answer at all (connection refused, reset or dropped) after every retry."""


def short(error: Exception) -> str:
    """An exception's message on one line, at most 200 characters (a server's HTML error page stays out)."""
    return " ".join(str(error).split())[:200]
