#!/bin/sh
# Makes presdep importable in this env (see install-presdep.sh).
exec sh envs/install-presdep.sh
