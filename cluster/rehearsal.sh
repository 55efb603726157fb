#!/bin/sh
# rehearsal.sh: every job of configs/paper.yaml, offline, on tiny models (make rehearsal).
#   sh cluster/rehearsal.sh [local|slurm]
#
# In REHEARSAL_DIR (default .rehearsal, emptied first: its results/ and resources/ start
# empty and never mix with a real run's), it
#   1. builds the sources (presdep rehearsal build: originals, hub repositories, tarballs, pins),
#   2. starts the hub (olah) and the file server on 127.0.0.1, and stops exactly those on exit,
#   3. runs the fetch stage, then the rest of the plan (the workflow's default target: Table 1 and
#      every table and figure beside it), each timed, with the clients pointed
#      at loopback (presdep rehearsal env), locally (2 cores) or through the local Slurm
#      (profiles/slurm + profiles/slurm-rehearsal; cluster/start-local-slurm.sh first).
# The README's cluster section says what a rehearsal proves and what it cannot.
set -eu

MODE=${1:-local}
REPO=$(pwd)
DIR=${REHEARSAL_DIR:-.rehearsal}
CORES=${CORES:-2}
[ -f "$REPO/Snakefile" ] && [ -x "$REPO/.venv/bin/presdep" ] || { echo "rehearsal: run from the checkout after 'make env'" >&2; exit 1; }
[ -x "$REPO/.venv-hub/bin/olah-cli" ] || { echo "rehearsal: no hub server; run 'make hub-env'" >&2; exit 1; }
case $MODE in
    # WORKER (make rehearsal passes "--executor presdep-worker"): Python jobs fork from a warm worker.
    local) SNAKEMAKE="$REPO/.venv/bin/snakemake"; PROFILE="--cores $CORES ${WORKER:-}" ;;
    slurm) SNAKEMAKE="$REPO/.venv-slurm/bin/snakemake"
           PROFILE="--profile $REPO/profiles/slurm --profile $REPO/profiles/slurm-rehearsal"
           [ -x "$SNAKEMAKE" ] || { echo "rehearsal: no Slurm venv; run 'make cluster-env'" >&2; exit 1; } ;;
    *) echo "rehearsal: mode $MODE; expected local or slurm" >&2; exit 1 ;;
esac
PRESDEP="$REPO/.venv/bin/presdep"
CONFIGS="$REPO/configs/paper.yaml $REPO/configs/rehearsal.yaml resources/rehearsal/pins.yaml"

rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR"
stamp() { date +%s; }
t0=$(stamp)
"$PRESDEP" rehearsal build --paper-config "$REPO/configs/paper.yaml"
t1=$(stamp)
trap '"$PRESDEP" rehearsal stop' EXIT
trap 'exit 130' INT TERM
"$PRESDEP" rehearsal start --olah "$REPO/.venv-hub/bin/olah-cli"
eval "$("$PRESDEP" rehearsal env)"
# shellcheck disable=SC2086
"$SNAKEMAKE" -s "$REPO/Snakefile" $PROFILE --configfile $CONFIGS \
    --until fetch_dataset fetch_dataset_qa fetch_dataset_beir fetch_model fetch_training_pool fetch_training_pool_qa \
            fetch_verdict_labels
t2=$(stamp)
# shellcheck disable=SC2086
"$SNAKEMAKE" -s "$REPO/Snakefile" $PROFILE --configfile $CONFIGS
t3=$(stamp)
echo "rehearsal: build $((t1 - t0)) s, fetch stage $((t2 - t1)) s, the rest $((t3 - t2)) s, in all $((t3 - t0)) s"
echo "rehearsal: Table 1 at $DIR/results/table1.csv; the decision tables (discordance, contrasts, matched"
echo "rehearsal: retention, verdict flip) beside it, the metrics files in $DIR/results/metrics/"
