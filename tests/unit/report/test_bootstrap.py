"""The bootstrap's array core: numpy only, ranks exactly scipy's, errors in the project's family."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata

import presdep.report.bootstrap as bootstrap
from presdep.contracts.errors import PresdepError, ReportError, StabilityError


def test_average_ranks_equal_scipy_rankdata_with_ties_and_nan():
    rng = np.random.default_rng(0)
    for shape in ((7,), (50, 6), (4, 3, 5), (3, 1), (2, 0)):
        x = rng.integers(0, 4, size=shape).astype(float) / 3  # many ties, non-dyadic values
        assert np.array_equal(bootstrap.average_ranks(x), rankdata(x, method="average", axis=-1))
    x = rng.random((5, 4))
    x[1, 2] = np.nan  # a slice with a NaN is all NaN, the others are ranked as usual
    assert np.array_equal(bootstrap.average_ranks(x), rankdata(x, method="average", axis=-1), equal_nan=True)


def test_ranks_put_the_best_first_and_round_float_noise_into_ties():
    assert bootstrap.ranks(bootstrap.tie_score(np.array([0.3, 0.1 + 0.2, 0.5]), False)).tolist() == [2.5, 2.5, 1.0]
    assert bootstrap.ranks(bootstrap.tie_score(np.array([0.3, 0.1, 0.5]), True)).tolist() == [2.0, 1.0, 3.0]


def test_bootstrap_of_one_dataset_is_reproducible_and_paired():
    sums = [np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])]  # 3 clusters x 2 runs
    data = bootstrap.ClusterSums(n_runs=2, variant_runs=[np.array([0]), np.array([1])], sums=sums,
                                 counts=[np.ones(3)])
    a = bootstrap.bootstrap(data, lower_is_better=False, resamples=200, seed=3)
    b = bootstrap.bootstrap(data, lower_is_better=False, resamples=200, seed=3)
    assert np.array_equal(a.boot, b.boot) and a.boot.shape == (200, 2)
    assert a.full.tolist() == pytest.approx([2 / 3, 2 / 3])
    assert a.probability_first.sum() == pytest.approx(1.0)
    assert a.probability_better[0, 1] + a.probability_better[1, 0] == pytest.approx(1.0)
    ranks, shares = bootstrap.rank_distribution(a.rank_boot[:, 0])
    assert set(ranks) <= {1.0, 1.5, 2.0} and shares.sum() == pytest.approx(1.0)


def test_the_bootstrap_module_needs_numpy_only():
    tree = ast.parse(Path(bootstrap.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"numpy"}
    assert not imported & {"io", "os", "json", "pathlib", "shutil"}, "no file I/O"


@pytest.mark.parametrize("error", [StabilityError, ReportError])
def test_report_errors_are_presdep_errors_and_value_errors(error):
    assert issubclass(error, PresdepError) and issubclass(error, ValueError)
