"""Conformance suite: every TensorDict flavour through the same behaviour checks."""
