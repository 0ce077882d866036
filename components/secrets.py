"""Secret-shaped values, kept out of params, messages and tracked runs: URL credentials and secret-named keys."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]*@")
_SECRET_KEY = re.compile(r"(?i)(^|[._-])(password|passwd|secret|token|api_?key|credentials?)$")
MASK = "***"
CREDENTIALS_HINT = (
    "credentials must not be in params (they would be tracked): remove user:password@ from the URL and set "
    "ES_USERNAME/ES_PASSWORD or ES_API_KEY (Elasticsearch), or MLFLOW_TRACKING_USERNAME/PASSWORD (MLflow), "
    "in the environment"
)


def has_url_credentials(text: str) -> bool:
    return bool(_URL_USERINFO.search(text))


def redact_text(text: str) -> str:
    """`scheme://user:pass@host` -> `scheme://***@host`, anywhere in the text."""
    return _URL_USERINFO.sub(rf"\1{MASK}@", text)


def redact_params(params: Mapping[str, str]) -> dict[str, str]:
    """Dotted params with secret-named keys masked and URL credentials cut, ready to be tracked."""
    return {k: MASK if _SECRET_KEY.search(k) else redact_text(str(v)) for k, v in params.items()}


def no_credentials(value: Any) -> Any:
    """A params validator: refuse URL credentials in a string, or in any string of a list or mapping."""
    values = value if isinstance(value, (list, tuple)) else value.values() if isinstance(value, Mapping) else [value]
    if any(isinstance(v, str) and has_url_credentials(v) for v in values):
        raise ValueError(CREDENTIALS_HINT)
    return value
