"""Shared fixtures: the repository's examples and the ONNX Runtime tolerance."""

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def assert_close(got, want, what=""):
    """The ONNX node tests' tolerance, as tests/models.rs uses it:
    |got - want| <= 1e-4 * max(1, max|want|) + 1e-3 * |want|."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    big = max(1.0, float(np.abs(want).max(initial=0.0)))
    excess = np.abs(got - want) - (1e-4 * big + 1e-3 * np.abs(want))
    bad = ~(excess <= 0)
    if bad.any():
        i = int(np.argmax(np.where(np.isnan(excess), np.inf, excess)))
        raise AssertionError(
            f"{what}: element {i} of {got.size}: got {got.flat[i]}, want {want.flat[i]}"
        )


@pytest.fixture
def examples():
    return EXAMPLES
