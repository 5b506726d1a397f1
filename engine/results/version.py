"""The results table's version number (bump it as engine/results/schema.py says).

Apart from the Arrow schema, so that building a row (engine/results/rows.py) needs no pyarrow.
"""

SCHEMA_VERSION = 1
