#!/bin/sh
# slurm-venv.sh: the venv for the cluster path = the project's venv + the Slurm executor plugin.
#   sh cluster/slurm-venv.sh [BASE_VENV=.venv] [TARGET_VENV=.venv-slurm]
#   TARGET_VENV/bin/snakemake --profile profiles/slurm --profile profiles/<site> ...
#
# Why a second venv: Snakemake imports every installed executor plugin on each call,
# and the Slurm plugin then runs `scontrol show config` (up to 10 s where Slurm's client
# is installed but no controller answers). Local runs and the test suite use BASE_VENV,
# which never has the plugin. TARGET_VENV holds only the plugin (the `slurm` extra of
# pyproject.toml, pinned by envs/constraints.txt) and sees everything else of BASE_VENV
# through a .pth file, so nothing is installed twice.
# Idempotent; exit 1 on error (no base venv, pip failure).
set -eu

BASE=${1:-.venv}
TARGET=${2:-.venv-slurm}
BASE_PY=$BASE/bin/python
[ -x "$BASE_PY" ] || { echo "slurm-venv: no venv at $BASE (run 'make env' first)" >&2; exit 1; }
[ -f pyproject.toml ] && [ -f envs/constraints.txt ] || { echo "slurm-venv: run from the presdep checkout" >&2; exit 1; }

[ -x "$TARGET/bin/python" ] || "$BASE_PY" -m venv "$TARGET"
BASE_SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SITE=$("$TARGET/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# addsitedir (not a bare path line) so the base venv's own .pth files (presdep's editable
# install) are processed too; the target's own packages come first on sys.path.
BASE_SITE=$(cd "$BASE_SITE" && pwd)
printf 'import site; site.addsitedir(%s)\n' "'$BASE_SITE'" > "$SITE/presdep-base-venv.pth"
# cluster/plugins on its path: the presdep-slurm executor (the Slurm plugin, with the presdep
# worker inside each allocation) imports the Slurm plugin, so only this venv may see it.
printf '%s\n' "$(pwd)/cluster/plugins" > "$SITE/presdep-cluster-plugins.pth"

REQS=$("$TARGET/bin/python" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["slurm"]))')
# shellcheck disable=SC2086
"$TARGET/bin/python" -m pip install --quiet --disable-pip-version-check -c envs/constraints.txt $REQS

# The snakemake command of this venv (the base venv's launcher would not see the plugin).
cat > "$TARGET/bin/snakemake" <<LAUNCHER
#!/bin/sh
exec "\$(dirname "\$0")/python" -m snakemake "\$@"
LAUNCHER
chmod +x "$TARGET/bin/snakemake"
"$TARGET/bin/python" -c 'import snakemake_executor_plugin_slurm, snakemake_executor_plugin_presdep_slurm, presdep' \
    || { echo "slurm-venv: $TARGET cannot import the plugin and presdep" >&2; exit 1; }
echo "slurm-venv: ready: $TARGET/bin/snakemake"
