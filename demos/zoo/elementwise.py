"""Elementwise helpers the fitted curves share (``demos.zoo.rooflines``, ``demos.zoo.index_curves``): each takes
numbers, or numpy arrays elementwise, so one curve times one kernel or a whole table of rows."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ceil_", "max_", "min_", "where_"]


def ceil_(x):
    """``ceil`` of a number (an int, as ``math.ceil``) or of a numpy array (elementwise)."""
    return np.ceil(x) if isinstance(x, np.ndarray) else math.ceil(x)


def min_(a, b):
    """The smaller of two numbers, or their elementwise minimum when either is a numpy array."""
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def where_(cond, a, b):
    """``a`` where ``cond`` holds, else ``b``: elementwise when ``cond`` is a numpy array."""
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) else (a if cond else b)


def max_(a, b):
    """The larger of two numbers, or their elementwise maximum when either is a numpy array."""
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)
