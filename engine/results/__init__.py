"""Results: the journal, the Parquet parts written from it, and the run folder that holds them.

Arrow chooses its default memory pool once, as pyarrow loads (this package's modules load it): the C library's
malloc, unless the user set ARROW_DEFAULT_MEMORY_POOL, reuses the memory a written part freed, where Arrow's
mimalloc maps fresh zeroed pages for every part.
"""

import os

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
