"""The champion, in one place: the register stage (the agent as a pyfunc model version with its evidence), the
all-or-nothing registration, the champion gate, and moves of the champion alias by hand (promote, rollback)."""
