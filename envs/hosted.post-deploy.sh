#!/bin/sh
# Makes presdep importable in this env, its packages at the versions of envs/locks/hosted.txt (see install-presdep.sh).
exec env PRESDEP_ENV=hosted sh envs/install-presdep.sh
