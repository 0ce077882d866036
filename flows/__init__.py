"""Prefect flows over the DVC pipeline."""

import os

# Prefect reads its settings when first imported. The ephemeral API server gets 20 s to start by default, which a
# loaded 2-core machine misses ("Timed out while attempting to connect to ephemeral Prefect API server").
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
