"""The one model-loading path: settings → LoadParams → planner → engine → calibration."""

from deskllm.loader.model_loader import LoadCheck, ModelLoader
from deskllm.loader.params import params_from_settings

__all__ = ["LoadCheck", "ModelLoader", "params_from_settings"]
