"""Judging helpers: parsing model and judge output (shared by all tasks) and the offline rules judge; the
judges the paper names, which `--protocol paper` uses unless told otherwise (engine/spec.py decides)."""

PAPER_JUDGE = "openai/gpt-4.1"  # the LLM judge the paper names (PAPER_PROTOCOL.md §3)
PAPER_PROXY = "openai/gpt-4"  # PsyLeak's proxy model, set in the release's privacy3.py (PAPER_PROTOCOL.md §3)
