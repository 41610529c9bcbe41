"""lrsim.adaptive: the objective reduces to the paper's closed forms on a free batch, the policy picks ar where
batches cost linearly and LR where they are free, and Thompson sampling converges to the best configuration on
synthetic acceptance (seeded, exact)."""

import itertools

import numpy as np
import pytest

from lrsim import theory
from lrsim.adaptive.policy import Beta, Policy, arms
from lrsim.errors import InputError
from lrsim.theory.costaware import Arm, Costs, speedup


@pytest.mark.parametrize("a1, c1", list(itertools.product((0.3, 0.6, 0.9), (0.1, 0.25, 0.5))))
def test_free_batch_without_verifier_time_is_the_papers_closed_forms(a1, c1):
    free = Costs.affine(1.0, 0.0, c1)
    for k in range(2, 9):
        assert speedup(Arm("sync", k), a1, 0.5, 40, free) == pytest.approx(float(theory.f_sync(a1, c1, k)), 1e-12)
        assert speedup(Arm("async", k), a1, 0.5, 40, free) == pytest.approx(float(theory.f_async(a1, c1, k)), 1e-12)
    for k2 in (2, 4, 8):  # token SD alone: g with c2 = 0; inside LR: f * g
        g = float(theory.g(0.7, 1e-15, k2))  # c2 -> 0 (theory refuses 0)
        assert speedup(Arm("ar", 1, k2), a1, 0.7, 40, free) == pytest.approx(g, 1e-9)
        assert speedup(Arm("sync", 3, k2), a1, 0.7, 40, free) == pytest.approx(
            float(theory.h(a1, c1, 3, 0.7, 1e-15, k2, "sync")), 1e-9)  # both steps shrink by g: the paper's f g
        for mode in ("sync", "async"):
            assert speedup(Arm(mode, 3, k2), a1, 0.7, 40, free) == pytest.approx(
                float(theory.f_step(a1, c1, 3, mode)) * g, 1e-9)
        own = Costs.affine(1.0, 0.0, c1, draft_sd=False)  # a draft without token SD: only the target's step shrinks
        assert speedup(Arm("sync", 3, k2), a1, 0.7, 40, own) == pytest.approx(
            float(theory.f_sync(a1, c1 * g, 3)) * g, 1e-9)


def test_linear_batches_pick_ar_and_free_batches_pick_lr():
    linear = Costs.affine(0.05, 0.05, 0.025)  # a CPU: every position costs a pass; the draft at half the target
    p = Policy(linear, alpha1=0.6, alpha2=0.5)
    assert p.best() == Arm("ar") and all(speedup(a, 0.6, 0.5, 40, linear) < 1 for a in arms() if a != Arm("ar"))
    free = Costs.affine(0.05, 0.0, 0.005)  # a GPU far from its roofline, a draft 10x faster
    q = Policy(free, alpha1=0.9, alpha2=0.5)
    best = q.best()
    assert best.mode in ("sync", "async") and speedup(best, 0.9, 0.5, 40, free) > 2


def test_verifier_time_counts():
    free = Costs.affine(0.05, 0.0, 0.005)
    slow_judge = Costs.affine(0.05, 0.0, 0.005, verify_pair_s=10.0)  # 5 target steps of 40 tokens per call
    assert speedup(Arm("sync", 4), 0.9, 0.5, 40, slow_judge) < speedup(Arm("sync", 4), 0.9, 0.5, 40, free) / 3
    assert Policy(slow_judge, alpha1=0.9, candidates=arms(k2s=(1,))).best() == Arm("ar")


def test_thompson_sampling_converges_to_the_best_configuration():
    """True a1 = 0.8, a2 = 0.3 on a moderately costly batch; the prior says a1 = 0.2.  After 400 decisions (4
    verified steps and 20 drafted tokens each) the greedy choice is the true best, and configurations slower than
    ar under the truth are hardly drawn any more.  (Configurations within 1% of each other are ties the posterior
    cannot order.)"""
    costs = Costs.affine(0.05, 0.005, 0.01)
    truth = max(arms(), key=lambda a: speedup(a, 0.8, 0.3, 40, costs))
    assert truth.mode != "ar"
    p = Policy(costs, alpha1=0.2, alpha2=0.6, prior_weight=4, seed=3)
    world = np.random.default_rng(11)
    late = []
    for i in range(400):
        arm = p.choose()
        if i >= 300:
            late.append(arm)
        acc = int(world.binomial(4, 0.8))
        tok = int(world.binomial(20, 0.3))
        p.observe(accepted=acc, rejected=4 - acc, tokens_accepted=tok, tokens_drafted=20, step_tokens=[40])
    best = speedup(truth, 0.8, 0.3, 40, costs)
    assert speedup(p.best(), 0.8, 0.3, 40, costs) >= 0.99 * best  # the best, or a near tie (gamma 5 vs 6 here)
    assert p.best().mode == truth.mode and abs(p.best().k1 - truth.k1) <= 1
    assert abs(p.step.mean - 0.8) < 0.03 and abs(p.token.mean - 0.3) < 0.03
    assert sum(speedup(a, 0.8, 0.3, 40, costs) < 1 for a in late) <= 5


def test_dwell_keeps_a_choice_and_the_draws_are_seeded():
    costs = Costs.affine(0.05, 0.0, 0.01)
    p = Policy(costs, dwell=3, seed=5)
    first = [p.choose() for _ in range(3)]
    assert first[0] == first[1] == first[2]
    q = Policy(costs, dwell=3, seed=5)
    assert [q.choose() for _ in range(9)] == first + [p.choose() for _ in range(6)]


def test_labels_and_bad_input():
    assert [a.label for a in (Arm("ar"), Arm("ar", 1, 4), Arm("sync", 3), Arm("async", 2, 4))] == [
        "ar", "sd k2=4", "lr-sync gamma=2", "lr-async gamma=2 +sd k2=4"]
    for bad in (dict(mode="sync", k1=1), dict(mode="ar", k1=2), dict(mode="beam", k1=2), dict(mode="ar", k2=0)):
        with pytest.raises(InputError):
            Arm(**bad)
    with pytest.raises(InputError):
        Beta.prior(1.5, 4)
    with pytest.raises(InputError):
        Policy(Costs.affine(1, 0, 0.1), dwell=0)
    b = Beta.prior(0.25, 8)
    b.update(3, 1)
    assert (b.a, b.b, b.mean) == (5.0, 7.0, 5 / 12)
