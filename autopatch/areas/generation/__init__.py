"""Generation helpers that models call inside their own forward or ``prepare_inputs_for_generation``."""
