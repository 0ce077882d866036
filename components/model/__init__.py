"""Model sources, the tiny CPU-profile model and its format priming, the format warm-up, loading."""
