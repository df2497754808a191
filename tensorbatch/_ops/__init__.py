"""Generic operations written once over the backend primitives (see README.md here)."""
