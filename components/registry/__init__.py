"""The register stage: the agent as a pyfunc model version with its evidence, and the champion decision."""
