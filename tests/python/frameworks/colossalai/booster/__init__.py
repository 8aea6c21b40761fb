"""booster.Booster: boost(model) evaluates the plugin on every pipeline rank
and returns, per (rank, chunk), the layers it builds and recomputes."""
from .plugin import HybridParallelPlugin  # noqa: F401


class Booster:
    def __init__(self, plugin=None, **kwargs):
        self.plugin = plugin

    def boost(self, model, *args, **kwargs):
        return self.plugin.layers_of(model)
