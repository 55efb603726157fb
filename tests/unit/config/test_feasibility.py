"""Settings that could only fail after training or scoring are refused when the config is loaded."""

import copy

import pytest
from config_errors import load_error

from presdep.config import SCHEMA_PATH, load_workflow_config
from presdep.config.feasibility import evaluations_from


@pytest.fixture
def config(default_config):
    return copy.deepcopy(default_config)


def _student(config, variant="single_order", **settings):
    config["variants"][variant]["student"] = {**config["variants"][variant]["student"], **settings}
    return config


def test_an_evaluated_step_that_is_never_saved_is_refused_naming_both_keys(config):
    message = load_error(_student(config, steps=20, eval_every=2, checkpoint_every=10))
    assert ("variants.single_order.student.eval_every: 2 evaluates step 2, which "
            "variants.single_order.student.checkpoint_every: 10 never saves") in message


@pytest.mark.parametrize("eval_every,checkpoint_every,steps", [(10, 5, 20), (10, 10, 20), (None, 10, 20), (30, 7, 20)])
def test_evaluations_on_checkpoint_steps_or_only_at_the_end_are_accepted(config, eval_every, checkpoint_every, steps):
    _student(config, steps=steps, checkpoint_every=checkpoint_every, eval_every=eval_every)
    if eval_every is None:
        del config["variants"]["single_order"]["student"]["eval_every"]
    load_workflow_config(config, SCHEMA_PATH)


def test_one_se_needs_two_evaluations_after_the_warm_up(config):
    message = load_error(_student(config, "oc_sft", steps=20, eval_every=10, checkpoint_every=10,
                                  lambda_warmup_steps=500))
    assert "variants.oc_sft.student.lambda_warmup_steps: 500 leaves 0 held-out evaluation(s)" in message
    assert "the one_se rule (lambda_rule.rerank) needs 2" in message
    _student(config, "oc_sft", lambda_warmup_steps=10)  # evaluations at steps 10 and 20
    load_workflow_config(config, SCHEMA_PATH)


def test_the_fixed_rule_takes_lambda_fixed_from_the_grid(config):
    _student(config, "oc_sft", lambda_rule={"rerank": "fixed"}, lambda_fixed=2.0)
    assert "variants.oc_sft.student.lambda_fixed: 2.0 is not in the lambda grid [1.0, 5.0]" in load_error(config)
    _student(config, "oc_sft", lambda_fixed=5)
    load_workflow_config(config, SCHEMA_PATH)


def test_an_objective_without_a_consistency_weight_takes_one_lambda(config):
    message = load_error(_student(config, **{"lambda": [0, 1]}))
    assert "variants.single_order.student.lambda: single_order has no consistency weight" in message


def test_views_and_seeds_that_the_objective_refuses_are_refused(config):
    _student(config, "oc_sft", n_views=3)
    _student(config, seeds=[7, 42])
    message = load_error(config)
    assert "variants.oc_sft.student.n_views: OC-SFT compares exactly 2 views (A and B), got 3" in message
    assert "variants.single_order.student.seeds: [7] are below view_seed_base 42" in message


def test_a_skipped_student_is_not_checked(config):
    _student(config, steps=20, eval_every=2, checkpoint_every=10)
    config["variants"]["single_order"]["skip"] = "not here"
    load_workflow_config(config, SCHEMA_PATH)


def test_a_reranking_eval_dataset_of_one_query_is_refused(config):
    config["datasets"]["synthetic"]["max_queries"] = 1
    assert "datasets.synthetic.max_queries: 1 query cannot be split 50/50" in load_error(config)


def test_evaluation_counts_match_the_training_loop():
    """The loop evaluates after every multiple of eval_every and after the last step."""
    for start in range(0, 12):
        for steps in range(1, 12):
            for every in range(1, 12):
                evaluated = {*range(every, steps + 1, every), steps}
                assert evaluations_from(start, steps, every) == sum(1 for t in evaluated if t >= start)
