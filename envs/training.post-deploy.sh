#!/bin/sh
# Makes presdep importable in this env, its packages at the versions of envs/locks/training.txt (see install-presdep.sh).
exec env PRESDEP_ENV=training sh envs/install-presdep.sh
