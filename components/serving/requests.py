"""A request to the served agent as the scoring server parsed it: its questions, or an HTTP 400 naming the first
bad value."""

from __future__ import annotations

from typing import Any

import pandas as pd

from components.config import ServingConfig
from components.serving.agent import question_problem


def bad_input(message: str):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)  # HTTP 400 from the scoring server


def _column(model_input) -> list:
    """The `question` values of a request, as parsed by the scoring server. With no input schema nothing is coerced,
    except by numpy: the `inputs` form turns each column into an array, so [question, 5] arrives as two strings."""
    if isinstance(model_input, pd.DataFrame):
        if "question" not in model_input.columns:
            raise bad_input(f"input needs a 'question' column (got columns {[str(c) for c in model_input.columns][:10]})")
        return model_input["question"].tolist()
    if isinstance(model_input, dict):
        if "question" not in model_input:
            raise bad_input(f"input needs a 'question' field (got fields {[str(k) for k in model_input][:10]})")
        values = model_input["question"]
    else:
        values = model_input  # a list (or array) of questions
    if isinstance(values, str):
        return [values]
    if hasattr(values, "ndim") and values.ndim == 0:  # the server parses a lone JSON value as a 0-d array
        return [values.item()]
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, list):
        raise bad_input(f"the questions must be a list of strings, got {type(values).__name__}")
    return values


def questions_of(model_input, limits: ServingConfig, markup: tuple[str, ...] = ()) -> list[str]:
    """The questions of a request, each a non-empty string within the limits; a 400 names the first bad one."""
    values = _column(model_input)
    if not values:
        raise bad_input("no question in the input")
    if len(values) > limits.max_questions:
        raise bad_input(f"{len(values)} questions in one request; at most {limits.max_questions} (serving.max_questions)")
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise bad_input(f"question {i}: expected a non-empty string, got {type(v).__name__} {_short(v)}")
        problem = question_problem(v.strip(), limits.max_question_chars, markup)
        if problem is not None:
            raise bad_input(f"question {i}: {problem}")
        out.append(v.strip())
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
