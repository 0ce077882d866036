"""The agent's side of Agent-R1: tools, the ToolEnv that parses and runs each turn, the tool-call syntax, rewards."""
