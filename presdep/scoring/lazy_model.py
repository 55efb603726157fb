"""What the local-model readout scorers share: weights loaded on the first read, and the
description every scores file records of them."""

from __future__ import annotations

from typing import Any

from presdep.runtime.models import dtype_name


class LazyModel:
    """Weights loaded on first use. The scorer sets ``_model`` (or None), ``_model_loader``,
    ``_device`` and ``_dtype`` (what the loaded model will have), ``load`` (a Stopwatch) and,
    for :meth:`readout_description`, ``name``, ``model_desc``, ``builder``, ``template_sha256``,
    ``grade_ids`` and ``dtype_reason``."""

    def _check_loaded(self, model: Any) -> None:
        """Refuse weights the scorer cannot read (a subclass's check; none by default)."""

    @property
    def model(self) -> Any:
        if self._model is None:
            with self.load:
                model = self._model_loader()
            self._check_loaded(model)
            self._model = model
        return self._model

    @property
    def model_loaded(self) -> bool:
        return self._model is not None

    @property
    def device(self):
        import torch

        if self._model is None:
            return torch.device(self._device)
        return next(self._model.parameters()).device

    @property
    def device_type(self) -> str:
        """"cpu", "cuda", ...: the loaded model's, else the device it will have (no torch import)."""
        if self._model is None:
            return str(self._device).partition(":")[0]
        return self.device.type

    @property
    def dtype_name(self) -> str:
        return dtype_name(self._dtype if self._model is None else next(self._model.parameters()).dtype)

    def readout_description(self, **extra: Any) -> dict:
        """The scorer, ``extra`` (e.g. a mode), the model, the template, dtype, device and grade tokens."""
        out = {
            "scorer": self.name,
            **extra,
            "model": self.model_desc,
            "template": self.builder.template.name,
            "template_sha256": self.template_sha256,
            "instruction": self.builder.instruction,
            "dtype": self.dtype_name,
            "device_type": self.device_type,
            "grade_token_ids": list(self.grade_ids),
        }
        if self.dtype_reason:
            out["dtype_reason"] = self.dtype_reason
        return out
