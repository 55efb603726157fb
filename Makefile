# Two commands do all set-up on a fresh machine:
#   make run   -> creates .venv if needed, runs the main job on the embedded default
#   make test  -> creates .venv if needed, runs the whole test suite
#   make resume -> after a killed or crashed `make run`: unlock, then run again
#   make cluster-env -> .venv-slurm: .venv + the Slurm executor plugin (cluster runs only)
#   make rehearsal -> every job of configs/paper.yaml offline on tiny models (cluster/rehearsal.sh)
# TORCH_SPEC is envs/constraints.txt's torch pin (a test holds them equal); on a Linux GPU machine
# PyPI serves it as the CUDA build.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
CORES ?= all
BIN := $(VENV)/bin
STAMP := $(VENV)/.presdep-installed
SLURM_VENV ?= .venv-slurm
SLURM_STAMP := $(SLURM_VENV)/.presdep-slurm-installed
HUB_VENV ?= .venv-hub
HUB_STAMP := $(HUB_VENV)/.presdep-hub-installed
# `make run` and a local `make rehearsal` fork their Python jobs from one warm worker
# (presdep/runtime/worker): the same outputs without each job's seconds of imports.
# WORKER= runs every job in a fresh process instead.
WORKER ?= --executor presdep-worker
# local (2 cores) or slurm (the local Slurm of cluster/start-local-slurm.sh)
REHEARSAL_MODE ?= local

# The editable package, byte-compiled: a job then loads its .pyc even where the environment sets
# PYTHONDONTWRITEBYTECODE=1 (each job would otherwise compile it again). Up-to-date files are
# skipped, so the targets below run it again for code edited since the install.
COMPILE = $(BIN)/python -m compileall -q presdep

.PHONY: run test env cluster-env hub-env rehearsal clean-results resume

env: $(STAMP)

$(STAMP): pyproject.toml envs/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the pinned CPU build; the package itself only asks for a range.
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -c envs/constraints.txt -e ".[retrieval,hosted,dev,bench]"
	# plugins/ on the venv's path: Snakemake finds its executor plugins among the top-level modules
	# there, and the editable install exposes presdep alone (snakemake --executor presdep-worker).
	$(BIN)/python -c 'import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()["purelib"], "presdep-plugins.pth").write_text("$(CURDIR)/plugins\n")'
	$(COMPILE)
	touch $(STAMP)

# The Slurm executor plugin lives in its own venv layered on .venv: loaded, it runs
# `scontrol show config` on every snakemake call, which local runs and tests never need.
cluster-env: $(SLURM_STAMP)

$(SLURM_STAMP): $(STAMP) pyproject.toml envs/constraints.txt cluster/slurm-venv.sh
	sh cluster/slurm-venv.sh $(VENV) $(SLURM_VENV)
	touch $(SLURM_STAMP)

# The rehearsal's local Hugging Face hub (olah) in its own venv: it pins its own web stack.
hub-env: $(HUB_STAMP)

$(HUB_STAMP): envs/hub-requirements.txt
	test -x $(HUB_VENV)/bin/python || $(PYTHON) -m venv $(HUB_VENV)
	$(HUB_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r envs/hub-requirements.txt
	touch $(HUB_STAMP)

# Every job of configs/paper.yaml, offline: sources on loopback, tiny models, Table 1 in
# .rehearsal/results/ (README, cluster section). REHEARSAL_MODE=slurm goes through Slurm
# (and builds .venv-slurm first where it is missing or older than its recipe).
rehearsal: $(STAMP) $(HUB_STAMP) $(if $(filter slurm,$(REHEARSAL_MODE)),$(SLURM_STAMP))
	$(COMPILE)
	PATH="$(CURDIR)/$(BIN):$$PATH" WORKER="$(WORKER)" sh cluster/rehearsal.sh $(REHEARSAL_MODE)

# The main job: the workflow's default target, `rule all` = final_outputs() in rules/common.smk
# (Table 1 and its counts, BSC's K-curve, Figure 1, the stability analysis, every metrics file).
run: $(STAMP)
	$(COMPILE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores $(CORES) $(WORKER)

# After a kill or crash of `make run`: drop the lock the dead run left (Snakemake cannot
# tell a dead run from a live one), then run again; finished outputs are kept and
# incomplete ones redone. Never while another run is active in this folder.
resume: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --unlock
	$(MAKE) run

# The hub server too: tests/workflow/test_rehearsal.py reads sources from it.
test: $(STAMP) $(HUB_STAMP)
	$(COMPILE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

# Everything under results/ except its tracked README.
clean-results:
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf .snakemake/incomplete
