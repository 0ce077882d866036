"""agentr1: the library behind every pipeline stage. Importable without Prefect or DVC."""
