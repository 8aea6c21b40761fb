"""remat for PyTorch models: measure a model's layers (profile), plan its
pipeline stages and per-layer recomputation with remat's exact planner
(plan), and check the plan's bytes per stage (verify). See docs/profile.md."""
from .plan import Plan, PlanError, plan
from .profile import Profile, profile
from .verify import Verification, verify
from .state import state_bytes
from .wrap import Checkpointed, Selective, wrap

__all__ = ["profile", "Profile", "plan", "Plan", "PlanError", "verify", "Verification", "state_bytes", "wrap", "Checkpointed", "Selective"]
