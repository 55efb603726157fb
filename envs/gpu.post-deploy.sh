#!/bin/sh
# Makes presdep importable in this env, its packages at the versions of envs/locks/gpu.txt (see install-presdep.sh).
exec env PRESDEP_ENV=gpu sh envs/install-presdep.sh
