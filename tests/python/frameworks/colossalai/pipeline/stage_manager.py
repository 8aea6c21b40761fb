"""pipeline/stage_manager.py's PipelineStageManager (4f9953b): the length
check in __init__, distribute_layers and get_stage_index."""
import numpy as np


class PipelineStageManager:
    def __init__(self, num_stages, stage, enable_interleave=False, use_zbv=False,
                 num_model_chunks=1, num_layers_per_stage=None):
        assert enable_interleave or num_model_chunks == 1, \
            "num_model_chunks must be 1 when enable_interleave is False"
        self.num_stages, self.stage = num_stages, stage
        if num_layers_per_stage is not None:
            assert len(num_layers_per_stage) == self.num_stages
        self.num_layers_per_stage = num_layers_per_stage
        self.is_interleave, self.use_zbv = enable_interleave, use_zbv
        self.num_model_chunks = num_model_chunks

    def distribute_layers(self, num_layers):
        if self.num_layers_per_stage is not None:
            assert sum(self.num_layers_per_stage) == num_layers
            return self.num_layers_per_stage
        n = self.num_stages * self.num_model_chunks
        quotient, remainder = divmod(num_layers, n)
        layers_per_stage = [quotient] * n
        if remainder > 0:
            start = n // 2 - remainder // 2
            for i in range(start, start + remainder):
                layers_per_stage[i] += 1
        return layers_per_stage

    def get_stage_index(self, layers_per_stage):
        acc = np.insert(np.cumsum(layers_per_stage), 0, 0)
        stage, P = self.stage, self.num_stages
        if self.use_zbv:
            return [[int(acc[stage]), int(acc[stage + 1])],
                    [int(acc[2 * P - stage - 1]), int(acc[2 * P - stage])]]
        out = []
        for c in range(self.num_model_chunks):
            out.append([int(acc[stage + c * P]), int(acc[stage + c * P + 1])])
        return out[0] if self.num_model_chunks == 1 else out
