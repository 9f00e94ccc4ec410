"""Judging helpers: parsing model and judge output (shared by all tasks) and the offline rules judge."""
