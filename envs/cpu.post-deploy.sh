#!/bin/sh
# Makes presdep importable in this env, its packages at the versions of envs/locks/cpu.txt (see install-presdep.sh).
exec env PRESDEP_ENV=cpu sh envs/install-presdep.sh
