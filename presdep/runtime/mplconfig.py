"""Keep matplotlib out of the user's home directory.

Without MPLCONFIGDIR, matplotlib writes its font cache to ~/.cache/matplotlib (and
logs about it when that is not writable). Importing this module before matplotlib
points MPLCONFIGDIR at a private temporary folder, removed at exit, for this process
and its children only; a user's own MPLCONFIGDIR is kept.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile


def private_config_dir() -> str:
    """MPLCONFIGDIR, set to a fresh temporary folder when unset or empty."""
    if not os.environ.get("MPLCONFIGDIR"):
        folder = tempfile.mkdtemp(prefix="presdep-mpl-")
        os.environ["MPLCONFIGDIR"] = folder
        atexit.register(shutil.rmtree, folder, True)
    return os.environ["MPLCONFIGDIR"]


# A private folder means a fresh font cache per process: matplotlib's INFO line about
# building it says nothing a user can act on.
logging.getLogger("matplotlib.font_manager").setLevel(logging.WARNING)
private_config_dir()  # on import: must run before matplotlib's first import, which reads the variable
