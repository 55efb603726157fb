#!/bin/sh
# Makes presdep importable in this env, its packages at the versions of envs/locks/retrieval.txt (see install-presdep.sh).
exec env PRESDEP_ENV=retrieval sh envs/install-presdep.sh
