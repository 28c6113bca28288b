"""Stand-in (tests only): the signature of vLLM's model-runner reload_weights, which
engines/vllm.py's check_vllm_api inspects."""


class GPUModelRunner:
    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
        raise NotImplementedError
