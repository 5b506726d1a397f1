"""Results: the journal, the Parquet parts written from it, and the run folder that holds them."""
