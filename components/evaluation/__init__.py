"""The agent and its baselines scored (agent_eval.py); the evaluate stage: EM/F1 per set and the HTML report; the
baseline table (`agentr1 baselines`), the profile report (`agentr1 profile-report`) and the machine line."""
