"""shardformer/shard/grad_ckpt_config.py (4f9953b)."""
from dataclasses import dataclass
from typing import List, Optional


@dataclass
class GradientCheckpointConfig:
    gradient_checkpointing_ratio: float = 0.0


@dataclass
class PipelineGradientCheckpointConfig(GradientCheckpointConfig):
    num_ckpt_layers_per_stage: Optional[List[int]] = None

    def __post_init__(self):
        # grad_ckpt_config.py __post_init__: every count >= 0
        if self.num_ckpt_layers_per_stage is not None:
            assert all(n >= 0 for n in self.num_ckpt_layers_per_stage)

    def get_num_ckpt_layers(self, stage, num_stages, num_layers, model_chunk_id=0, num_model_chunks=1):
        # grad_ckpt_config.py get_num_ckpt_layers: the list has stages x chunks
        # entries, read at stage + chunk * num_stages, each at most the chunk's layers
        if self.num_ckpt_layers_per_stage is not None:
            assert len(self.num_ckpt_layers_per_stage) == num_stages * num_model_chunks
            assert stage <= num_stages and model_chunk_id <= num_model_chunks
            n = self.num_ckpt_layers_per_stage[stage + model_chunk_id * num_stages]
            assert n <= num_layers
            return n
        return int(self.gradient_checkpointing_ratio * num_layers)
