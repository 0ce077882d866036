"""Run the suites with Great Expectations 1.x in an ephemeral context, and build its HTML data docs.

Values in the results (and so in the docs, the summary and the failure message) are cut to a bounded length.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from components.validation.results import bound_results
from components.validation.suites import SuiteSpec

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

import great_expectations as gx  # noqa: E402  (after the analytics switch)
from great_expectations.core import ExpectationSuiteValidationResult  # noqa: E402
from great_expectations.data_context.types.base import (  # noqa: E402
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)


def _context(docs_dir: Path | None) -> gx.data_context.EphemeralDataContext:
    """In-memory stores, no progress bars, no analytics; one data docs site at `docs_dir` (none without it)."""
    sites = {}
    if docs_dir is not None:
        sites["report"] = {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(Path(docs_dir).resolve())},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites,
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def run_suites(
    frames: dict[str, pd.DataFrame], specs: list[SuiteSpec], n_examples: int, docs_dir: Path | None = None
) -> dict[str, ExpectationSuiteValidationResult]:
    """Validate `frames[spec.name]` against each suite; with `docs_dir`, write GX data docs there."""
    context = _context(docs_dir)
    source = context.data_sources.add_pandas("prepared")
    results = {}
    for spec in tqdm(specs, desc="validate", unit="suite", disable=None, dynamic_ncols=True):
        batch = source.add_dataframe_asset(spec.name).add_batch_definition_whole_dataframe("all")
        suite = context.suites.add(spec.suite())
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=spec.name, data=batch, suite=suite))
        result = definition.run(
            batch_parameters={"dataframe": frames[spec.name]},
            result_format={
                "result_format": "SUMMARY",
                "unexpected_index_column_names": spec.index_columns,
                "partial_unexpected_count": n_examples,
            },
        )
        results[spec.name] = bound_results(result)
    if docs_dir is not None:
        store = context.validation_results_store  # holds what run() stored: replace it by the cut results
        for key in store.list_keys():
            store.set(key, results[key.expectation_suite_identifier.name])
        context.build_data_docs(site_names=["report"])
    return results
