"""rubrictool: rubric curation, LLM pre-annotation, three-expert review and REC-CBM training."""

__version__ = "0.1.0"
__all__ = ["__version__"]
