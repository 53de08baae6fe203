"""Small tables of published measurements from projects that are not pip packages, each with its source,
commit and licence in a README beside it (README.md for ROCm/aiter's kernel tables)."""
