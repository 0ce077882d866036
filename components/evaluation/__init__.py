"""The evaluate stage: EM/F1 of the trained agent and the baselines per set, and the HTML report."""
