"""Replay estimators: per-round values of an arm for every depth 1..D (SPEC §3.2)."""
