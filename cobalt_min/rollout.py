"""The multi-turn self-debugging loop (paper §1, §2, §6), batched over many conversations at once.

For every (problem, sample): write program 0, run it, show feedback from the first failing public
test, write program 1, ... Per turn there is ONE generate call for all live conversations and ONE
sandbox batch for all their programs (public tests for the feedback, all tests for the score).

A trajectory (one per problem and sample) records per turn: the raw response, the extracted program,
the public-test verdicts, the hidden-test pass rate, the pass rate over all tests, and the feedback
shown next; plus the conversation as the model saw it (`messages`).
"""

import time

from tqdm.auto import tqdm

from cobalt_min import graders
from cobalt_min.problems import join_tests
from cobalt_min.prompts import extract_code, feedback_message, first_turn_messages, history_text
from cobalt_min.sandbox import InfraFailure, run_programs


def run_turn_programs(programs: list, problems: list, feedback_tests: list, *, scored_programs: list | None = None,
                      grader=None, workers=None) -> list:
    """Run each program (None = no code block) on its feedback tests and each scored program on all true
    tests of its problem, in one sandbox batch. Returns per program None (neither has code) or
    {feedback_results (None without code), tests_passed, public_pass_rate, hidden_pass_rate, pass_rate} (the
    verdict on each true test and the rates, of the scored program), or {infra_error} when the sandbox failed
    on it (sandbox.InfraFailure: no verdict).

    One job per program when the scored program is the program (as for non-thinking models): its tests
    are the feedback tests followed by the true tests, or only the true tests when the feedback tests
    ARE the true public tests (they come first). Thinking models score another program (the answer as
    kept in the history: rollout): then a second job."""
    scored_programs = programs if scored_programs is None else scored_programs
    jobs, layout = [], []  # layout[k]: (feedback job, scoring job, where the true tests start in it)
    for program, scored, problem, shown in zip(programs, scored_programs, problems, feedback_tests):
        true = problem.all_tests()
        if program == scored:
            same = shown is problem.public_tests
            jobs.append((program, true if same else join_tests(shown, true)))
            layout.append((len(jobs) - 1, len(jobs) - 1, 0 if same else len(shown["inputs"])))
        else:
            jobs += [(program, shown), (scored, true)]
            layout.append((len(jobs) - 2, len(jobs) - 1, 0))
    results = run_programs([p for p, _ in jobs], [t for _, t in jobs], grader=grader, workers=workers)
    out: list = []
    for k, (feedback_job, scoring_job, true_from) in enumerate(layout):
        feedback, scoring = results[feedback_job], results[scoring_job]
        if feedback is None and scoring is None:
            out.append(None)
            continue
        failed = [r.error for r in (feedback, scoring) if isinstance(r, InfraFailure)]
        if failed:  # the sandbox failed on it twice: no verdict at all
            out.append({"infra_error": failed[0]})
            continue
        true = scoring[true_from:] if scoring is not None else []
        n_public = len(problems[k].public_tests["inputs"])
        hidden = true[n_public:]
        out.append({"feedback_results": feedback[:len(feedback_tests[k]["inputs"])] if feedback is not None else None,
                    "tests_passed": [r.passed for r in true] or [False] * len(problems[k].all_tests()["inputs"]),
                    "public_pass_rate": sum(r.passed for r in true[:n_public]) / max(1, n_public),
                    "hidden_pass_rate": sum(r.passed for r in hidden) / max(1, len(hidden)),
                    "pass_rate": sum(r.passed for r in true) / max(1, len(true))})
    return out


# The user turn after a program the sandbox failed on (an infrastructure failure): the conversation it ends
# is left out of every score (set_apart_lost); it goes on only so that training's batches keep their shape.
NO_VERDICT = {"role": "user", "content": "The tests could not be run this time. Please write your program again."}


def set_apart_lost(record: dict) -> dict:
    """A problem's record with the conversations the sandbox failed on (an `infra_error`: no verdict) moved
    from `samples` to `infra_failed`: they are counted apart, never scored (collect.py, evaluate.py)."""
    lost = [tr for tr in record["samples"] if tr.get("infra_error")]
    if not lost:
        return record
    return {**record, "samples": [tr for tr in record["samples"] if not tr.get("infra_error")], "infra_failed": lost}


def scored_records(records: list) -> tuple[list, int]:
    """(the records that keep a scored conversation, the conversations left out: infra_errors), from records
    made by set_apart_lost."""
    return [r for r in records if r["samples"]], sum(len(r.get("infra_failed", [])) for r in records)


def turn_record(t: int, response: str, program, scored_program, verdict: dict | None, message: dict) -> dict:
    """What a trajectory keeps of one turn: the response, its program, the verdicts on the tests shown,
    the pass rates (public, hidden, all: of the scored program), and the feedback shown next."""
    if verdict and "infra_error" in verdict:  # no verdict: rates None, so that nothing can score it by mistake
        return {"turn": t, "response": response, "program": program, "public": [], "public_pass_rate": None,
                "hidden_pass_rate": None, "pass_rate": None, "infra_error": verdict["infra_error"],
                "feedback": message["content"]}
    results = verdict["feedback_results"] if verdict else None
    record = {"turn": t, "response": response, "program": program,
              "public": [{"status": r.status, "passed": r.passed} for r in results] if results else [],
              "public_pass_rate": verdict["public_pass_rate"] if verdict else 0.0,
              "hidden_pass_rate": verdict["hidden_pass_rate"] if verdict else 0.0,
              "pass_rate": verdict["pass_rate"] if verdict else 0.0, "feedback": message["content"]}
    if scored_program != program:
        record["scored_program"] = scored_program
    return record


def sample_turn(engine, convs: list, live: list, t: int, *, samples: int, temperature: float, top_p: float,
                max_new_tokens: int, seed: int | list[int]) -> tuple[dict, dict]:
    """One engine call for turn t of the live conversations: ({(i, s): prompt}, {(i, s): Completion}). At
    turn 0 every sample of a problem has the same prompt: it is asked once for `samples` completions.
    seed: the call's (each turn's requests get seeds from it and their position), or one per problem:
    then sample s of problem i at turn t is seeded seed[i] + t * samples + s, whatever else is in the call."""
    per_problem = isinstance(seed, (list, tuple))
    if t == 0:
        prompts = {(i, s): engine.prompt_ids(convs[i][0]) for i in range(len(convs)) for s in range(samples)}
        outs = engine.sample([prompts[(i, 0)] for i in range(len(convs))], n=samples, temperature=temperature,
                             top_p=top_p, max_new_tokens=max_new_tokens, seed=list(seed) if per_problem else seed)
        return prompts, {(i, s): outs[i][s] for i, s in live}
    prompts = {(i, s): engine.prompt_ids(convs[i][s]) for i, s in live}
    outs = engine.sample([prompts[key] for key in live], n=1, temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens,
                         seed=[seed[i] + t * samples + s for i, s in live] if per_problem else seed + t)
    return prompts, {key: out[0] for key, out in zip(live, outs)}


def turn_responses(engine, convs: list, trajs: list, live: list, t: int, first_responses: list | None,
                   **sampling) -> tuple[list, dict, dict, dict]:
    """Turn t's responses: (the live conversations that have one, {(i, s): prompt}, {(i, s): Completion},
    {(i, s): text}). Sampled (sample_turn), or at turn 0 given: first_responses[i][s] (evaluate.py
    --first-turn-from: the same model's turn 0 from another run), nothing sampled. A request that failed
    after its retries (the API engine) has no program to score: its conversation is lost (set_apart_lost)."""
    if t == 0 and first_responses is not None:
        return live, {}, {}, {(i, s): first_responses[i][s] for i, s in live}
    prompts, completions = sample_turn(engine, convs, live, t, **sampling)
    for (i, s), c in completions.items():
        if c.error:
            trajs[i][s].update(infra_error=c.error, stopped=True)
    live = [key for key in live if not completions[key].error]
    return live, prompts, completions, {key: completions[key].text for key in live}


def execute_turn(responses: list, problems: list, feedback_tests: list, *, thinking: bool, grader, workers,
                 verdicts_met: dict | None = None, problem_keys: list | None = None):
    """Run a turn's responses, one sandbox batch: (programs, scored programs, verdicts: run_turn_programs').
    Feedback runs the program of the whole response; scores (pass rates, Pass@1) run the program of the
    response as kept in the conversation (thinking models: after </think>, cut to prompts.HISTORY_CHARS
    characters), as the authors score their stored conversations. The two differ only for thinking models.

    verdicts_met (rollout's reuse_verdicts): {(problem key, program, scored program): verdict} of the programs
    run so far; a program found there is not run again, and each program run is added (problem_keys[k]:
    which problem response k answers; one key per problem and feedback tests)."""
    programs = [extract_code(r) for r in responses]
    scored = [extract_code(history_text(r, thinking)) for r in responses] if thinking else programs
    if verdicts_met is None:
        return programs, scored, run_turn_programs(programs, problems, feedback_tests, scored_programs=scored,
                                                   grader=grader, workers=workers)
    keys = [(key, program, s) for key, program, s in zip(problem_keys, programs, scored)]
    new = list({key: k for k, key in enumerate(keys) if key not in verdicts_met}.values())  # one run per program
    ran = run_turn_programs([programs[k] for k in new], [problems[k] for k in new], [feedback_tests[k] for k in new],
                            scored_programs=[scored[k] for k in new], grader=grader, workers=workers)
    verdicts_met.update({keys[k]: v for k, v in zip(new, ran) if not (v and "infra_error" in v)})
    this_turn = {keys[k]: v for k, v in zip(new, ran)}  # (an infrastructure failure is tried again next time)
    return programs, scored, [this_turn[key] if key in this_turn else verdicts_met[key] for key in keys]


def learning_fields(prompt_ids: list, completion, verdict: dict | None, problem) -> dict:
    """What online multi-turn training learns on from a turn (rollout's keep_tokens): the prompt as the model
    saw it, the sampled tokens, whether they ended by themselves, and the verdict on each true test."""
    return {"prompt_ids": prompt_ids, "token_ids": completion.token_ids, "finished": completion.finished,
            "tests_passed": verdict.get("tests_passed") if verdict else [False] * len(problem.all_tests()["inputs"])}


def note_time(timings: dict, t: int, phase: str, start: float, engine=None, engine_before: dict | None = None):
    """Add the seconds since `start` to timings[phase] and to turn t's own (f"turn{t}.{phase}"), and what the
    engine counted meanwhile (the transformers engine's stats: prefill and decode tokens and seconds)."""
    seconds = time.perf_counter() - start
    timings[phase] += seconds
    timings[f"turn{t}.{phase}"] = timings.get(f"turn{t}.{phase}", 0.0) + seconds
    for key, value in getattr(engine, "stats", {}).items():
        timings[f"turn{t}.{key}"] = timings.get(f"turn{t}.{key}", 0) + value - engine_before.get(key, 0)


def time_lines(timings: dict) -> list[str]:
    """Where a rollout's time went, a line per turn (note_time's keys; summed over blocks and ranks)."""
    lines, t = [], 0
    while f"turn{t}.generate_s" in timings:
        get = lambda key: timings.get(f"turn{t}.{key}", 0)  # noqa: E731
        line = f"  turn {t}: sampling {get('generate_s'):.1f} s"
        if f"turn{t}.decode_s" in timings:  # the transformers engine counts its prefill and decoding
            line += (f" (prefill {get('prefill_s'):.1f} s: {get('prefill_tokens'):,} prompt tokens run, "
                     f"{get('reused_tokens'):,} reused; decoding {get('decode_s'):.1f} s: {get('decode_tokens'):,} tokens)")
        lines.append(line + f", sandbox {get('execute_s'):.1f} s")
        t += 1
    return lines


def rollout(problems: list, engine, *, samples: int, feedback_turns: int, temperature: float = 0.6, top_p: float = 0.95,
            max_new_tokens: int = 8192, seed: int | list[int] = 0, thinking: bool = False,
            stop_on_public_pass: bool = False, grader=None, workers=None, feedback_tests: list | None = None,
            progress: bool = True, keep_tokens: bool = False, first_responses=None, reuse_verdicts=False):
    """Run `samples` conversations per problem for turn 0 plus `feedback_turns` feedback turns (a script's
    --turns counts programs: feedback_turns = turns - 1). feedback_tests: per problem, the public tests whose
    results the model sees (default: its public tests; perturbed ones under perturbation). Scores always use the
    true tests. grader: graders.py's (None: the authors'). keep_tokens: each turn's record also holds what online
    multi-turn training (train.py --method grpo-mt, verpo-mt) learns on (learning_fields). seed: an int (the
    call's), or one per problem (train.py: by the problem's position in the global batch, so that a conversation
    does not depend on the number of ranks; sample_turn). first_responses[i][s]: turn 0's response, given
    (turn_responses). reuse_verdicts: a program already run in this call on the same problem takes that verdict
    (execute_turn; evaluate.py --reuse-verdicts). Returns (trajectories, timings): trajectories[i][s] is the
    record of problem i, sample s; timings: seconds of sampling and of the sandbox, in all and per turn."""
    if first_responses is not None and keep_tokens:
        raise ValueError("first_responses holds no sampled tokens to keep (keep_tokens)")
    feedback_tests = feedback_tests or [p.public_tests for p in problems]
    grader = graders.get(grader)
    convs = [[first_turn_messages(p.question, p.starter_code, p.fn_name) for _ in range(samples)] for p in problems]
    trajs = [[{"problem_id": p.id, "sample": s, "turns": [], "messages": None, "stopped": False}
              for s in range(samples)] for p in problems]
    timings = {"generate_s": 0.0, "execute_s": 0.0}
    verdicts_met = {} if reuse_verdicts else None
    bar = tqdm(total=feedback_turns + 1, desc="turns", unit="turn", disable=not progress, leave=False)
    for t in range(feedback_turns + 1):
        live = [(i, s) for i in range(len(problems)) for s in range(samples) if not trajs[i][s]["stopped"]]
        if not live:
            break
        # ------------------------------------------------------------ generate: one call per turn
        start, engine_before = time.perf_counter(), dict(getattr(engine, "stats", {}))
        live, prompts, completions, responses = turn_responses(
            engine, convs, trajs, live, t, first_responses, samples=samples, temperature=temperature, top_p=top_p,
            max_new_tokens=max_new_tokens, seed=seed)
        note_time(timings, t, "generate_s", start, engine, engine_before)
        # ------------------------------------------------------------ execute: one sandbox batch per turn
        start = time.perf_counter()
        keys = [i for i, _ in live]
        programs, scored, verdicts = execute_turn([responses[key] for key in live], [problems[i] for i in keys],
                                                  [feedback_tests[i] for i in keys], thinking=thinking, grader=grader,
                                                  workers=workers, verdicts_met=verdicts_met, problem_keys=keys)
        note_time(timings, t, "execute_s", start)
        # ------------------------------------------------------------ record, give feedback
        for (i, s), program, scored_program, v in zip(live, programs, scored, verdicts):
            if v and "infra_error" in v:  # the conversation goes on (training needs its turns), but it is lost
                message, trajs[i][s]["infra_error"] = dict(NO_VERDICT), v["infra_error"]
            else:
                message = feedback_message(v["feedback_results"] if v else None, feedback_tests[i], grader.timeout_s)
            record = turn_record(t, responses[(i, s)], program, scored_program, v, message)
            if keep_tokens:
                record.update(learning_fields(prompts[(i, s)], completions[(i, s)], v, problems[i]))
            trajs[i][s]["turns"].append(record)
            convs[i][s] = convs[i][s] + [{"role": "assistant", "content": history_text(responses[(i, s)], thinking)},
                                         message]
            shown = (v or {}).get("feedback_results")
            trajs[i][s]["stopped"] = stop_on_public_pass and bool(shown) and all(r.passed for r in shown)
        bar.update(1)
    bar.close()
    for i, s in [(i, s) for i in range(len(problems)) for s in range(samples)]:
        trajs[i][s]["messages"] = convs[i][s]
    return trajs, timings
