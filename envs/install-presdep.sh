#!/bin/sh
# Installs this checkout of presdep (editable, no dependencies: the env file brings those)
# into the conda env being deployed. Snakemake runs post-deploy scripts from the
# directory it was started in: the workflow's root.
set -eu
if ! grep -q '^name = "presdep"' pyproject.toml 2>/dev/null; then
    echo "presdep post-deploy: run snakemake from the presdep checkout (no pyproject.toml of presdep in $(pwd))" >&2
    exit 1
fi
python -m pip install --quiet --no-deps --no-build-isolation -e .
