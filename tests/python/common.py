"""Shared setup for the Python tests: the examples on sys.path, the remat
command (REMAT_CLI, set by CTest to the built one), small model sizes. The
package itself is the installed one (tests/python/install.sh), not
python/ of the source tree."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import torch  # noqa: E402

torch.set_num_threads(1)  # the tests run beside others on a small machine

CLI = os.environ.get("REMAT_CLI") or os.path.join(ROOT, "build", "app", "remat")
SEED = os.path.join(ROOT, "tests", "data", "plan", "seed.json")
