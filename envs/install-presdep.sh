#!/bin/sh
# Installs this checkout of presdep (editable, no dependencies: the env file brings those)
# into the conda env being deployed. Snakemake runs post-deploy scripts from the
# directory it was started in: the workflow's root.
#
# With PRESDEP_ENV=<env> (the env's post-deploy script sets it), the env's packages first move
# to envs/locks/<env>.txt: conda's pip step installed the env file's pins, but what those pull
# in is whatever the index holds that day; the lock is what `python envs/resolve.py --lock`
# resolved, so every deployment of the env (every cluster, every rebuild) gets the same stack.
set -eu
if ! grep -q '^name = "presdep"' pyproject.toml 2>/dev/null; then
    echo "presdep post-deploy: run snakemake from the presdep checkout (no pyproject.toml of presdep in $(pwd))" >&2
    exit 1
fi
if [ -n "${PRESDEP_ENV:-}" ]; then
    LOCK="envs/locks/$PRESDEP_ENV.txt"
    [ -f "$LOCK" ] || { echo "presdep post-deploy: no lock file $LOCK (python envs/resolve.py --lock)" >&2; exit 1; }
    REQS=$(python envs/resolve.py --pip-block "envs/$PRESDEP_ENV.yaml")
    # shellcheck disable=SC2086  # one requirement per word: the pip blocks hold name==version lines
    python -m pip install --quiet -c "$LOCK" $REQS
fi
python -m pip install --quiet --no-deps --no-build-isolation -e .
