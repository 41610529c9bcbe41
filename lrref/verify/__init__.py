"""Step verifiers (does a draft step mean the same as the target's?) and the numbers a step states."""
