"""The structure a reader relies on: imports run one way in cobalt_min/ (no circle, also through imports inside
functions), cli.py's argument types import nothing from the library, and the functions of the paper's path stay
short enough to read next to the paper."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cobalt_min"
PAPER_PATH = ["train.py", "collect.py", "evaluate.py", "perturb.py"] + [
    f"cobalt_min/{name}.py" for name in
    ("rollout", "trajectories", "rewards", "grpo", "logprobs", "metrics", "perturbation")]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict:
    """{module: the cobalt_min modules it imports anywhere in its file}. `from package import name` counts as
    an import of package.name when that is a module, else of the package (what Python runs first)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [base]).strip(".")
                subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
                found = subs if len(subs) == len(node.names) else [base] + subs
            else:
                continue
            for target in found:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def test_no_import_circle_in_the_library():
    graph = import_graph()
    assert "cobalt_min.sandbox.verdicts" in graph and "cobalt_min.engines" in graph  # (the walk found the packages)
    state, circles = {}, []

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_argument_types_import_nothing_from_the_library():
    assert import_graph()["cobalt_min.cli"] == set()


def test_the_paper_path_has_no_function_over_60_lines():
    long = []
    for file in PAPER_PATH:
        for node in ast.walk(ast.parse((ROOT / file).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{file}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_the_package_lists_at_most_28_entries():
    entries = [p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 28, sorted(entries)
