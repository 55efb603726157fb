"""light_rules: local through Snakemake itself (the Slurm run is in test_slurm.py)."""

from __future__ import annotations

from workflow_utils import planned_jobs, scratch_workflow, snakemake


def test_the_light_local_profile_plans_the_same_jobs_and_a_grouped_light_rule_is_refused(tmp_path):
    work = scratch_workflow(tmp_path)
    plain = snakemake(work, "-n", "--quiet", "rules")
    light = snakemake(work, "-n", "--quiet", "rules", "--profile", "profiles/slurm-light-local")
    jobs = planned_jobs(light.stdout + light.stderr)
    assert jobs == planned_jobs(plain.stdout + plain.stderr)
    assert jobs["metrics"] > 0 and jobs["thresholds"] > 0 and jobs["matched_reference"] > 0

    # A profile that still groups metrics (as profiles/slurm-rehearsal does) would have it submitted
    # anyway: the run stops before its first job.
    refused = snakemake(work, "--cores", "1", "--config", "light_rules=local", "--groups", "metrics=small_cpu",
                        "thresholds=small_cpu", "--", "results/synthetic/candidates.parquet", check=False)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "light_rules: local, but the profile puts metrics (group small_cpu), thresholds (group small_cpu)" in out
    assert not (work / "results").exists() and not (work / "resources/datasets").exists()
