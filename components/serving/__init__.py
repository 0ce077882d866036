"""Serving the registered agent: `agentr1 ask` and the pyfunc model behind `mlflow models serve`."""
