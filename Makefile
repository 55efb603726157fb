# Two commands do all set-up on a fresh machine:
#   make run   -> creates .venv if needed, runs the main job on the embedded default
#   make test  -> creates .venv if needed, runs the whole test suite
# GPU users: `make TORCH_SPEC="torch" run` keeps pip's default (CUDA) torch build.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
CORES ?= all
BIN := $(VENV)/bin
STAMP := $(VENV)/.presdep-installed

.PHONY: run test env clean-results

env: $(STAMP)

$(STAMP): pyproject.toml envs/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the pinned CPU build; the package itself only asks for a range.
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -c envs/constraints.txt -e ".[retrieval,hosted,slurm,dev,bench]"
	touch $(STAMP)

# The main job (Table 1), plus Figure 1 and the leaderboard's stability analysis built from it.
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores $(CORES) results/table1.csv results/figure1.svg results/stability/table1.json

test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

clean-results:
	rm -rf results/*/ results/*.csv results/table1.md results/*.svg results/*.png .snakemake/incomplete
