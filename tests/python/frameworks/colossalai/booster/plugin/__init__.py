"""booster/plugin/hybrid_parallel_plugin.py's HybridParallelPlugin (4f9953b):
the checks of its __init__ that apply to a pipeline, and the layers the
policies then build and recompute on each rank."""
from colossalai.pipeline.stage_manager import PipelineStageManager
from colossalai.shardformer import GradientCheckpointConfig

# shardformer/modeling/{llama,mistral,qwen2,qwen3,command}.py read
# num_ckpt_layers_per_stage; gpt2.py recomputes every layer of the stage
COUNTING = {"llama", "mistral", "qwen2", "qwen3", "command"}
ALL_OR_NONE = {"gpt2"}

WORLD_SIZE = None  # set by the test: the job's ranks (tp x pp x dp)


class HybridParallelPlugin:
    def __init__(self, tp_size, pp_size, precision="fp16", zero_stage=0, num_microbatches=None,
                 microbatch_size=None, pp_style="1f1b", num_model_chunks=1, scheduler_nodes=None,
                 num_layers_per_stage=None, gradient_checkpoint_config=None, **kwargs):
        world = WORLD_SIZE if WORLD_SIZE is not None else tp_size * pp_size
        assert world % (tp_size * pp_size) == 0
        assert not pp_style == "zbv" or scheduler_nodes is not None, \
            "scheduler_nodes must not be None when using zero bubble pipeline."
        assert zero_stage in (0, 1, 2)
        if gradient_checkpoint_config is not None:
            assert isinstance(gradient_checkpoint_config, GradientCheckpointConfig)
        if pp_size > 1:
            assert pp_style in ["1f1b", "interleaved", "zbv"], "Unsupported pipeline parallelism style"
            assert pp_style in ["interleaved", "zbv"] or num_model_chunks == 1
            assert pp_style in ["1f1b", "interleaved"] or num_model_chunks == 2
            assert num_microbatches is not None or microbatch_size is not None
            assert zero_stage <= 1
            if pp_style == "interleaved":
                assert num_model_chunks > 1
                # pipeline/schedule/interleaved_pp.py load_batch
                assert num_microbatches is None or num_microbatches % pp_size == 0
            if pp_style == "zbv":
                assert scheduler_nodes == [("v_schedule", pp_size, num_microbatches)], scheduler_nodes
        self.managers = [PipelineStageManager(pp_size, r, pp_style in ("interleaved", "zbv"),
                                              pp_style == "zbv", num_model_chunks, num_layers_per_stage)
                         for r in range(pp_size)]
        self.pp_size, self.num_model_chunks = pp_size, num_model_chunks
        self.num_microbatches = num_microbatches
        self.config = gradient_checkpoint_config

    def layers_of(self, model):
        """{(rank, chunk): (start, end, recomputed layer indices)}"""
        out = {}
        for sm in self.managers:
            idx = sm.get_stage_index(sm.distribute_layers(model.num_layers))
            chunks = idx if self.num_model_chunks > 1 else [idx]
            for c, (start, end) in enumerate(chunks):
                n = 0
                if model.gradient_checkpointing:
                    n = end - start
                    if model.family in COUNTING and self.config is not None:
                        n = self.config.get_num_ckpt_layers(sm.stage, sm.num_stages, end - start,
                                                            c if sm.is_interleave else 0,
                                                            sm.num_model_chunks)
                    elif model.family not in ALL_OR_NONE | COUNTING:
                        raise AssertionError(f"no rule for the family {model.family!r}")
                    assert n <= end - start
                out[(sm.stage, c)] = (start, end, list(range(start, start + n)))
        return out
