"""``presdep preflight``: check a GPU node before the matrix spends on it.

Imports each environment's stack against its pins (:mod:`.stack`), compares the node's
GPU memory with ``presdep plan``'s per-job predictions, runs one real micro-job per GPU rule
family with the config's own models (:mod:`.micro_jobs`), and writes the measured rates in
``presdep plan --rates`` form with the bill priced at them beside the assumed one
(:mod:`.cli`). It sits above the report (the plan and its rates) and the stages it runs.
"""
