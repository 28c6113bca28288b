"""What README.md and docs/ show a reader holds: every command in their code blocks runs as written as far as this
machine can tell without the data, models or GPUs it names (each `python SCRIPT` or `python -m MODULE` parses
with that program's own flags; each `make TARGET` is a target of the Makefile), every project file they link to
exists, and README stays a front page (at most 250 lines)."""
import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

from cobalt_min import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPTS = {"collect.py": "collect", "evaluate.py": "evaluate", "train.py": "train", "perturb.py": "perturb"}
LENIENT = (cli.source, cli.output_file, cli.output_folder)  # path checks: the data a command names is not here


def commands(page: Path) -> list[str]:
    """The shell commands of a page's code blocks: continuation lines joined, comments dropped, `&&` split."""
    found = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            found += [part.strip() for part in line.split("&&") if part.strip()]
    return found


def lenient(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser with its path checks off (here and in its subcommands)."""
    for action in parser._actions:
        if action.type in LENIENT:
            action.type = str
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                lenient(sub)
    return parser


def script_parser(name: str) -> argparse.ArgumentParser:
    module = importlib.import_module(SCRIPTS[name])
    return lenient(module.parser() if hasattr(module, "parser") else module.ap)


def check(words: list[str]) -> str | None:
    """None when the command would start as written, else what is wrong with it."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value prefixes
        words = words[1:]
    if not words:
        return None
    if words[0] == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        missing = [t for t in words[1:] if not t.startswith("-") and "=" not in t and t not in targets]
        return f"no make target {missing}" if missing else None
    script = next((i for i, w in enumerate(words) if w in SCRIPTS), None)
    if script is not None and (words[0].endswith(("python", "python3")) or words[0] in ("torchrun", "accelerate")):
        argv = words[script + 1:]
        if "..." in argv or any(w.startswith("[") for w in argv):  # an abbreviation: its flags must exist
            parser = script_parser(words[script])
            subcommands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
            if argv and argv[0] in subcommands:
                parser = subcommands[argv[0]]
            known = {o for a in parser._actions for o in a.option_strings}
            unknown = [w for w in argv if w.startswith("--") and w.split("=")[0] not in known and
                       not w.startswith("[--")]
            return f"unknown flags {unknown}" if unknown else None
        try:
            script_parser(words[script]).parse_args(argv)
        except SystemExit as e:
            return f"does not parse ({e})"
        return None
    if words[0].endswith(("python", "python3")) and words[1:2] == ["-m"]:
        module = words[2]
        if importlib.util.find_spec(module) is None:
            return f"no module {module}"
        return None
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_of_the_page_starts_as_written(page, capsys):
    problems = []
    for command in commands(page):
        if command.startswith(("pip ", "apt", "vllm ", "litellm ", "cd ")) or "pip install" in command:
            continue
        error = check(shlex.split(command))
        if error:
            problems.append(f"{command}\n    -> {error}")
    capsys.readouterr()
    assert not problems, f"{page.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_project_file_the_page_links_to_exists(page):
    links = re.findall(r"\]\(([^)#]+)\)", page.read_text())
    missing = [link for link in links if not link.startswith("http") and not (page.parent / link).exists()]
    assert not missing, f"{page.name} links to {missing}"


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
