"""remat for PyTorch models: measure a model's layers (profile), plan its
pipeline stages and per-layer recomputation with remat's exact planner
(plan), and check the plan's bytes per stage (verify). The planner and the
state bytes are the built `remat` command's (remat.config says where it is
found). See docs/profile.md. Two commands beside it:
`python3 -m remat.plot` draws a run's log, a plan and a trace
(docs/plot.md), `python3 -m remat.convert` writes a remat model with
Hugging Face GPT-2's names (docs/convert.md)."""
from . import config
from .config import PlanError
from .plan import Plan, plan
from .profile import Profile, profile
from .verify import Verification, verify
from .state import state, state_bytes
from .wrap import Checkpointed, Layer, Selective, wrap

__all__ = ["profile", "Profile", "plan", "Plan", "PlanError", "verify", "Verification", "state",
           "state_bytes", "wrap", "Checkpointed", "Layer", "Selective", "config"]
