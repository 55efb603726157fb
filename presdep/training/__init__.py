"""Training students that score with less presentation dependence.

- :mod:`presdep.training.silver`: silver labels from an open-weight or a hosted teacher;
- :mod:`presdep.training.hosted`: the OpenAI-compatible grader (teacher and scorer);
- :mod:`presdep.training.objectives`: the five objectives (single-order, order-averaged,
  permutation augmentation, DebiasFirst, OC-SFT);
- :mod:`presdep.training.readout_grad`: the differentiable expected-grade readout;
- :mod:`presdep.training.lora`: LoRA adapters via peft;
- :mod:`presdep.training.silver_partial`: the silver job's length-sorted batches and their resume files;
- :mod:`presdep.training.loop`: the training loop with checkpoints and resume;
- :mod:`presdep.training.train_step`: one optimiser step, accumulated over micro-batches
  (:mod:`presdep.training.micro_batches`: how a step is cut; :mod:`presdep.training.memory_model`:
  the predicted GPU peak that sizes the cut);
- :mod:`presdep.training.select`: lambda selection on the held-out split.

Submodules import torch/peft lazily where they can; import what you use.
"""
