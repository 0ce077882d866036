"""The evaluate stage: EM/F1 of the trained agent and the baselines per set, and the HTML report; the baseline
table (`agentr1 baselines`), the profile report (`agentr1 profile-report`) and the machine line benchmarks print."""
