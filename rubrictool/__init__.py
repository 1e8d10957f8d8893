"""rubrictool: rubric curation, LLM pre-annotation, three-expert review and REC-CBM training."""

import os

# Before any module loads torch (and with it OpenMP): idle OpenMP threads sleep instead of spinning.
# rubrictool makes it (reccbm, a library, leaves the environment alone) because its modules import torch
# (train.py, grade.py) and torch must not load before the variable is set — a spinning pool makes
# training steps several times slower when other processes share the cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
__all__ = ["__version__"]
