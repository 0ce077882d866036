"""The served agent as MLflow logs it "from code": log_agent_model passes this file's path, and loading the model runs
it (with the project's `components` package importable, as `mlflow models serve --env-manager local` has it)."""

import mlflow

from components.serving.pyfunc import AgentModel

mlflow.models.set_model(AgentModel())
