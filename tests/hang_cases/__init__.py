"""Real hang and crash programs for the isolation regression tests (never collected directly)."""
