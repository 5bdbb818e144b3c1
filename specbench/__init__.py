"""specbench: measure and reproduce speculative sampling (Chen et al. 2023)."""

from .decoding import GenerationResult, StopCondition, autoregressive_generate, speculative_generate
from .sampling import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "GenerationResult",
    "SamplingParams",
    "StopCondition",
    "__version__",
    "autoregressive_generate",
    "speculative_generate",
]
