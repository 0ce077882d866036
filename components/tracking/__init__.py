"""MLflow: runs per stage under one parent per pipeline run, logged models, traces, store locks."""
