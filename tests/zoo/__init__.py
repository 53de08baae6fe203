"""Tests of the generic transformer (demos.zoo)."""
