"""A warm worker for the workflow's Python jobs: torch and transformers are imported once, and each
job's script runs in a child forked from that process, so a job pays for its work rather than for
seconds of imports. Snakemake reaches it through the executor plugin ``presdep-worker``
(``snakemake --executor presdep-worker``; ``make run`` passes it); without that flag every job runs
in a fresh process as before."""
