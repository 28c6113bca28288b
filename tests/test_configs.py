"""The accelerate configs under configs/ (docs/full_scale.md's multi-GPU recipes) parse, and accelerate's
launcher turns each into the environment train.py's processes start with (never Accelerate's FSDP,
which train.py refuses: --fsdp shards with FSDP2 itself); bench/gpu_check.py runs on
the CPU in its dry-run mode."""
import os

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.launch import prepare_multi_gpu_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = {"single_gpu": ("NO", 1), "ddp": ("MULTI_GPU", 4), "fsdp_8b": ("MULTI_GPU", 4)}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_configs_parse(name):
    path = os.path.join(ROOT, "configs", f"{name}.yaml")
    config = load_config_from_file(path)
    kind, processes = EXPECTED[name]
    assert config.distributed_type.value == kind and config.num_processes == processes
    assert config.mixed_precision == "bf16"
    if kind == "NO":
        return
    parsed = _validate_launch_command(launch_command_parser().parse_args(["--config_file", path, "train.py"]))
    args = parsed[0] if isinstance(parsed, tuple) else parsed
    env = prepare_multi_gpu_env(args)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and args.num_processes == processes
    # train.py shards with FSDP2 itself (--fsdp) and refuses Accelerate's FSDP: no config may ask for it.
    assert env.get("ACCELERATE_USE_FSDP", "false") == "false"


def test_gpu_check_dry_run_on_cpu(tmp_path):
    # Everything of bench/gpu_check.py that does not need CUDA, so that its GPU run works the first time.
    import json
    import subprocess
    import sys
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--dry-run", "--json", str(out),
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result == json.loads(proc.stdout)  # one JSON object on stdout, the same in the file
    assert result["all_ok"], {k: v for k, v in result.items() if isinstance(v, dict) and not v.get("ok", True)}
    assert result["hf_greedy"]["equals_plain_generate"] and result["train_steps"]["step_s"]
    assert "skipped" in result["vllm_matches_hf"] and "skipped" in result["vllm_follows_weights"]
    assert result["bench"]["generation"] and result["bench"]["updates"]
    assert result["kl_zero_bf16"]["kl"] == 0.0 and result["logprobs_left_padding"]["finite"]
    assert result["update_memory_vs_plan"]["planned_update_gb"] > 0
    fsdp = result["two_ranks_fsdp"]  # (2 CPU ranks here)
    assert fsdp["kl_step1"] == 0.0 and set(fsdp["setup_peak_host_mb_per_rank"]) == {"0", "1"}
    assert len(fsdp["rank_spread_s"]) == 2 and all(x >= 0 for x in fsdp["rank_spread_s"])


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_memory_plan_counts_the_parameters_of_real_models(family):
    # bench/memory_plan.py (docs/full_scale.md's memory plan) counts parameters as the models have them.
    import subprocess
    import sys
    from memory_plan import parameter_counts, plan
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = dict(model_type=family, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, vocab_size=300, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    counts = parameter_counts(cfg)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["layer"] == sum(p.numel() for p in model.model.layers[0].parameters())
    kw = dict(ranks=4, device_gb=80, vllm_share=0.3, prompt=1000, response=500, logprob_chunk=256)
    small, big = plan(cfg, micro_batch=1, checkpointing=True, **kw), plan(cfg, micro_batch=4, checkpointing=True, **kw)
    assert big["update_gb"] > small["update_gb"] > small["generation_gb"]
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "memory_plan.py")], capture_output=True, text=True)
    assert out.returncode == 0 and "8.19B parameters" in out.stdout and "update" in out.stdout


def test_requirements_pyproject_and_constraints_agree():
    # requirements.txt (GPU users' pip install -r) and pyproject.toml's dependencies are one list; the tested
    # versions (constraints.txt, what make setup and CI install) satisfy it; the running suite is on them.
    import importlib.metadata
    import re
    import tomllib
    from packaging.requirements import Requirement
    reqs = [line.split("#")[0].strip() for line in open(os.path.join(ROOT, "requirements.txt"))]
    reqs = [r for r in reqs if r]
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    assert reqs == project["dependencies"]
    pinned = dict(re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line).groups() for line in open(os.path.join(ROOT, "constraints.txt"))
                  if "==" in line and not line.startswith("#"))
    pinned = {k.lower().replace("_", "-"): v for k, v in pinned.items()}
    for r in map(Requirement, reqs):
        assert r.specifier.contains(pinned[r.name], prereleases=True), (r, pinned[r.name])
        installed = importlib.metadata.version(r.name).split("+")[0]
        if os.environ.get("CI"):  # (CI installs exactly the tested set)
            assert installed == pinned[r.name], (r.name, installed, pinned[r.name])
