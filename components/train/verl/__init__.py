"""The verl backend of the train stage: parquet export, the search tool, rewards, agent loop, launch."""
