"""The validate stage: Great Expectations suites over the prepared data, answer coverage, data docs."""
