"""The results table's version number (bump it as engine/results/schema.py says).

Apart from the Arrow schema so that building a row (engine/results/rows.py) imports no pyarrow: a run loads
its suites before it imports pyarrow, which then need not bring numpy (engine/_arrow.py).
"""

SCHEMA_VERSION = 1
