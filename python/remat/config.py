"""Where the remat command is. The package runs the built `remat` for the
plan (`remat plan`) and for the state bytes (`remat state`), and looks for
it in this order: the call's cli= argument; remat.config.cli, which a
program sets once,

    import remat
    remat.config.cli = "/opt/remat/bin/remat"

the REMAT_CLI environment variable; and `remat` on PATH (`cmake --install`
puts it in PREFIX/bin)."""
import os
import shutil

cli = None  # the remat command's path, or None to look further


class PlanError(RuntimeError):
    """The remat command was not found, failed, or its plan cannot be used
    as asked."""


def find_cli(path=None):
    """The remat command: path, else remat.config.cli, else $REMAT_CLI, else
    `remat` on PATH."""
    found = path or cli or os.environ.get("REMAT_CLI") or shutil.which("remat")
    if not found or not os.path.exists(found):
        raise PlanError("the remat command was not found: pass cli=PATH, set remat.config.cli "
                        "or REMAT_CLI, or put remat on PATH (build it with cmake, where it is "
                        "build/app/remat, or install it with cmake --install)")
    return found
