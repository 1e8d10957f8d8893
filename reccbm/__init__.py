"""reccbm: the REC-CBM trainer (RACE, OPCC, LCEC, two-stage training)."""

__all__: list[str] = []
