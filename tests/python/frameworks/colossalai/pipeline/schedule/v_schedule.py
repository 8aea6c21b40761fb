"""pipeline/schedule/v_schedule.py's PipelineGraph (4f9953b): its arguments
only; the schedule it returns is a marker that the plugin checks."""
import numbers


class PipelineGraph:
    def __init__(self, n_stage, n_micro, f_cost, b_cost, w_cost, c_cost, f_mem, b_mem, w_mem,
                 max_mem=None):
        for name, v in (("n_stage", n_stage), ("n_micro", n_micro)):
            assert isinstance(v, int) and v >= 1, name
        for name, v in (("f_cost", f_cost), ("b_cost", b_cost), ("w_cost", w_cost), ("c_cost", c_cost)):
            assert isinstance(v, numbers.Real) and v > 0, name
        # F allocates, B frees all but W's part, W frees the rest: the
        # graph's memory returns to zero after each micro-batch
        assert f_mem > 0 and f_mem + b_mem + w_mem == 0, (f_mem, b_mem, w_mem)
        self.n_stage, self.n_micro = n_stage, n_micro

    def get_v_schedule(self):
        return [("v_schedule", self.n_stage, self.n_micro)]
