"""Data: the records (schema), strict raw readers, one loader per format family, the synthetic multi-hop world,
and the prepare stage that writes questions/passages Parquet."""
