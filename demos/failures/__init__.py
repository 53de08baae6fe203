"""The known DBO failure modes as runnable scenarios (``python -m demos.scenarios`` runs them)."""
