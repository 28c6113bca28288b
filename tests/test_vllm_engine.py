"""The vLLM engine (cobalt_min/engines/vllm.py) with a stand-in vllm module (tests/fake_vllm: what the engine
asks of vLLM, logged): one engine per rank of a distributed launch, and the sleep mode. vLLM's own CPU build:
test_vllm_cpu.py (make test-vllm-cpu)."""
from cobalt_min.generation import request_seeds


def test_vllm_engines_join_a_distributed_launch_one_per_rank(tiny_model_dir, tmp_path):
    # Two CPU processes launched as accelerate/torchrun launch train.py's ranks, with a stand-in vllm
    # module: each rank's engine must join the launch (external_launcher: its own GPU, not GPU 0), seed per
    # data rank, one seed per request, and receive the weights on its own rank.
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, FAKE_VLLM_LOG=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.path.join(here, "fake_vllm"), os.path.dirname(here)]))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29531", os.path.join(here, "vllm_ranks.py"), tiny_model_dir],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, log in enumerate(logs):
        assert log["llm"]["distributed_executor_backend"] == "external_launcher"
        assert log["llm"]["seed"] == rank and log["llm"]["tensor_parallel_size"] == 1
        assert log["llm"]["max_num_seqs"] == 5
        [call] = log["sampling"]
        assert [p["seed"] for p in call] == request_seeds(rank, 3, 2)  # one SamplingParams per request
        assert all(p["n"] == 2 and p["max_tokens"] == 5 for p in call)
        [rpc] = log["rpc"]
        assert rpc["method"] == "reload_weights" and "model.embed_tokens.weight" in rpc["names"]
        assert log["reset_prefix_cache"] == 1
    assert logs[0]["sampling"][0][0]["seed"] != logs[1]["sampling"][0][0]["seed"]


def test_vllm_in_sleep_mode_holds_nothing_outside_sampling_and_wakes_with_the_policys_weights(tiny_model_dir, tmp_path):
    # train.py --vllm-sleep-mode, with the stand-in vllm module (vLLM's sleep mode is CUDA-only): after each
    # sampling the engine sleeps (level 2: weights and KV cache discarded); the next sampling wakes the
    # weights, pushes the policy's, then wakes the KV cache (vLLM's order); sync_sampler pushes nothing to a
    # sleeping engine. The stand-in fails on a call out of that order (generate or a push while asleep).
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, FAKE_VLLM_LOG=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.path.join(here, "fake_vllm"), os.path.dirname(here)]))
    proc = subprocess.run([sys.executable, os.path.join(here, "vllm_sleep.py"), tiny_model_dir], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = json.loads((tmp_path / "rank0.json").read_text())
    assert log["llm"]["enable_sleep_mode"] is True
    wake = ["wake_up:weights", "reload_weights", "reset_prefix_cache", "wake_up:kv_cache"]
    assert log["calls"] == ["generate", "sleep:2"] + wake + ["generate", "sleep:2"]
    assert log["rpc"][0]["names"][0] == "model.embed_tokens.weight"
