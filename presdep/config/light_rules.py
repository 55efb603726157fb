"""Where the light jobs run under a cluster executor (the config's ``light_rules``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from presdep.contracts.errors import ConfigError


def check_light_rules_ungrouped(rules: Iterable[str], groups: Mapping[str, str]) -> None:
    """Refuse ``light_rules: local`` while a profile still puts one of ``rules`` in a group.

    Snakemake submits a grouped rule whatever ``localrules`` says, so the setting would do
    nothing for it; ``groups`` is the run's rule -> group assignment (``--groups`` / a profile).
    """
    grouped = [f"{rule} (group {groups[rule]})" for rule in rules if rule in groups]
    if grouped:
        raise ConfigError(
            "light_rules: local, but the profile puts " + ", ".join(grouped) + " in a group, and Snakemake "
            "submits a grouped job whatever localrules says: take them out of the profile's groups "
            "(profiles/slurm leaves them to the rules, which group them only under light_rules: cluster), "
            "or leave light_rules at cluster"
        )
