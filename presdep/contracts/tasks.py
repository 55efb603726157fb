"""Names every stage shares: the three tasks and the first-stage perturbation."""

TASKS = ("rerank", "qa", "response")
# The perturbation name of the first-stage (unshuffled) pass in every scores table.
FIRST_STAGE = "first_stage"
