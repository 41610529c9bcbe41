"""lrsim.adaptive: the objective reduces to the paper's closed forms on a free batch, the policy picks ar where
batches cost linearly and LR where they are free, and Thompson sampling converges to the best configuration on
synthetic acceptance (seeded, exact)."""

import itertools
import math

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


# --------------------------------------------------------------------------- the speed model (issue 42, item 5)

def test_speed_model_estimates_exactly():
    """Two levels, each shrunk by its prior: the family to 0, the configuration to its family; older segments fade
    by 1 - 1/memory."""
    from lrsim.adaptive.policy import SpeedModel

    m = SpeedModel(prior_weight=1.0, memory=4.0, arm_weight=2.0)
    a, b, c = Arm("async", 4, 4), Arm("async", 6, 4), Arm("sync", 3)
    m.observe(a, 0.8)
    assert m.estimate(a) == pytest.approx((0.8 + 2 * 0.4) / 3)  # family 0.8 / 2; a: (0.8 + 2 family) / 3
    assert m.estimate(b) == pytest.approx(0.4) and m.estimate(c) == 0.0  # never run: its family's; no family: 0
    assert m.family_factor("async") == pytest.approx(math.exp(-0.4)) and m.family_factor("sync") == 1.0
    m.observe(a, 0.4)  # the first segment fades to 3/4 of its weight
    wf, sf = 0.75 + 1, 0.8 * 0.75 + 0.4
    fam = sf / (wf + 1)
    assert m.stats["async"] == pytest.approx([wf, sf]) and m.estimate(b) == pytest.approx(fam)
    assert m.estimate(a) == pytest.approx((sf + 2 * fam) / (wf + 2))
    assert m.factor(a) == pytest.approx(math.exp(-m.estimate(a)))
    rng = np.random.default_rng(0)
    assert m.draw([a, b], rng) == {a: m.factor(a), b: m.factor(b)}  # spread 0: the estimates, no random numbers
    assert rng.standard_normal() == np.random.default_rng(0).standard_normal()
    m.observe(Arm("ar", 1, 4), 0.3)  # ar's error is every family's prior: a family never run is ranked as ar is
    assert m.estimate(Arm("ar")) == pytest.approx(0.15) and m.estimate(c) == pytest.approx(0.15)
    assert m.estimate(b) == pytest.approx((sf + 0.15) / (wf + 1))  # a family fades with its own segments only


def test_speed_model_thompson_draw_is_widest_for_a_family_never_run():
    """spread > 0: one normal per family, of sd spread / sqrt(weight + prior); a configuration's draw is its
    family's shift on its own estimate, so two depths of one family move together."""
    from lrsim.adaptive.policy import SpeedModel

    m = SpeedModel(prior_weight=1.0, memory=1e9, spread=0.5)
    a, b, c = Arm("async", 4, 4), Arm("async", 6, 4), Arm("sync", 3)
    for _ in range(15):  # async seen 15 segments at log ratio 0.2; sync never
        m.observe(a, 0.2)
    rng = np.random.default_rng(3)
    draws = [m.draw([a, b, c], rng) for _ in range(4000)]
    shift_a = np.array([-math.log(d[a]) - m.estimate(a) for d in draws])
    shift_b = np.array([-math.log(d[b]) - m.estimate(b) for d in draws])
    shift_c = np.array([-math.log(d[c]) - m.estimate(c) for d in draws])
    assert np.allclose(shift_a, shift_b)  # one normal per family
    assert shift_a.std() == pytest.approx(0.5 / math.sqrt(16), rel=0.05)
    assert shift_c.std() == pytest.approx(0.5 / math.sqrt(1), rel=0.05)  # never run: the widest
    assert abs(shift_a.mean()) < 0.01 and abs(shift_c.mean()) < 0.05


def _world(costs, slow: Arm, factor: float):
    """Segments of 4 steps of 40 tokens, each arm at the closed form's predicted time except ``slow``, ``factor``
    times slower."""

    def run(p: Policy, arm: Arm) -> None:
        p.observe(accepted=3, rejected=1, step_tokens=[40] * 4)
        s = costs.target_pass(1) / speedup(arm, p.step.mean, p.token.mean, p.step_tokens, costs)
        p.observe_time(arm, 160, 160 * s * (factor if arm == slow else 1.0))

    return run


def test_a_configuration_twice_as_slow_as_its_closed_form_stops_being_chosen():
    """The closed form's best is in fact 2x slower than predicted (true speedup about half): with the speed model
    the policy leaves it after its first segment, though it was to dwell 4, and does not come back; without it,
    the policy keeps it."""
    from lrsim.adaptive.policy import SpeedModel

    costs = Costs.affine(0.05, 0.002, 0.005)
    base = dict(alpha1=0.75, alpha2=0.5, candidates=arms(max_gamma=4), dwell=4, switch_margin=1 / 16, memory=32)
    best = Policy(costs, **base).best()
    assert best.mode == "async"
    for learn in (True, False):
        p = Policy(costs, **base, speed=SpeedModel() if learn else None, seed=1)
        run = _world(costs, best, 2.0)
        chosen = []
        for _ in range(20):
            chosen.append(p.choose())
            run(p, chosen[-1])
        if learn:
            assert chosen[0] == best and best not in chosen[1:], [a.label for a in chosen]
            assert speedup(chosen[-1], 0.75, 0.5, 40, costs) > speedup(best, 0.75, 0.5, 40, costs) / 2
        else:
            assert chosen.count(best) >= 16


def test_the_correction_carries_across_requests():
    """A model shared by a workload's policies: the second request's first choice already avoids the
    configuration the first request found slow; a policy of its own model starts at the closed form's best."""
    from lrsim.adaptive.policy import AutoOptions, SpeedModel

    costs = Costs.affine(0.05, 0.002, 0.005)
    base = dict(alpha1=0.75, alpha2=0.5, candidates=arms(max_gamma=4), dwell=4, switch_margin=1 / 16)
    shared = AutoOptions().speed_model()
    first = Policy(costs, **base, speed=shared)
    best = first.best()
    run = _world(costs, best, 2.0)
    for _ in range(4):
        run(first, first.choose())
    second = Policy(costs, **base, speed=shared, seed=1)
    assert second.choose() != best and second.choose().mode != "async"  # the whole family carries the correction
    assert Policy(costs, **base, speed=SpeedModel()).choose() == best
    assert AutoOptions(learn_speed=False).speed_model() is None


def test_speed_model_bad_input():
    from lrsim.adaptive.policy import SpeedModel

    for bad in (dict(prior_weight=0), dict(memory=0.5), dict(spread=-1), dict(arm_weight=0)):
        with pytest.raises(InputError, match="speed model"):
            SpeedModel(**bad)
    with pytest.raises(InputError, match="finite"):
        SpeedModel().observe(Arm("ar"), float("nan"))
    p = Policy(Costs.affine(1, 0, 0.1), speed=SpeedModel())
    with pytest.raises(InputError, match="observe_time"):
        p.observe_time(Arm("ar"), -1, 1.0)
    p.observe_time(Arm("ar"), 0, 1.0)  # nothing kept: nothing learnt
    assert p.speed.stats == {}
    with pytest.raises(InputError, match="ar_token_s"):
        Policy(Costs.affine(1, 0, 0.1), ar_token_s=0.0)


# --------------------------------------------------------------------------- issue 42 item 5: two rules of AutoOptions

def test_near_ties_in_lr_async_depth_go_to_the_deepest():
    """deep_ties: the best configuration's mode and k2 stay; among its lr-async depths within the switch margin m,
    S (1 + m) >= S_best, the deepest is chosen.  Nearly free batches: gamma 7 for the argmax's 4; batches that cost
    (a fifth of a pass per position): 8 for 6, as the margin allows, while ar's linear batches leave ar.  A Policy
    built without the rule (lrref's, lrsim serve's) keeps the argmax."""
    m = 1 / 16
    cases = ((Costs.affine(0.05, 0.0005, 0.004), 0.5, 4, 7), (Costs.affine(0.05, 0.01, 0.01), 0.9, 6, 8),
             (Costs.affine(0.05, 0.05, 0.025), 0.6, None, None))
    for costs, a1, k_top, k_deep in cases:
        score = {a: speedup(a, a1, 0.3, 40, costs) for a in arms()}
        top = max(arms(), key=score.__getitem__)
        plain = Policy(costs, alpha1=a1, alpha2=0.3, switch_margin=m).best()
        deep = Policy(costs, alpha1=a1, alpha2=0.3, switch_margin=m, deep_ties=True).best()
        assert plain == top
        if k_top is None:  # a CPU: ar, whatever the rule
            assert top == deep == Arm("ar")
            continue
        assert (top.mode, top.k1, deep.mode, deep.k1, deep.k2) == ("async", k_top, "async", k_deep, top.k2)
        ties = [a for a in arms() if a.mode == "async" and a.k2 == top.k2 and score[a] * (1 + m) >= score[top]]
        assert deep == max(ties, key=lambda a: a.k1) and score[deep] * (1 + m) >= score[top] > score[deep]
        deeper = Arm("async", k_deep + 1, top.k2) if k_deep < 8 else None
        assert deeper is None or score[deeper] * (1 + m) < score[top]  # just outside the margin
    exact = Policy(cases[0][0], alpha1=0.5, alpha2=0.3, deep_ties=True)  # margin 0: only exact ties, none here
    assert exact.best() == Policy(cases[0][0], alpha1=0.5, alpha2=0.3).best()


def test_token_acceptance_is_not_drawn_before_a_token_verdict():
    """draw_token_prior False: while no drafted token was observed, each decision draws step acceptance and takes
    token acceptance at its prior mean; from the first token verdict on, it is drawn.  The default Policy (as
    before) draws it from the prior."""
    costs = Costs.affine(0.05, 0.0005, 0.004)
    for draw_prior in (False, True):
        p = Policy(costs, alpha1=0.6, alpha2=0.3, switch_margin=1 / 16, draw_token_prior=draw_prior)
        calls = []
        real = p.token.sample
        p.token.sample = lambda rng, real=real, calls=calls: calls.append(1) or real(rng)
        p.choose()  # the first choice: the best at the prior means, no draw
        for _ in range(10):
            p.observe(accepted=3, rejected=1)
            p.choose()
        assert len(calls) == (10 if draw_prior else 0) and p.token.mean == pytest.approx(0.3)
        p.observe(tokens_accepted=2, tokens_drafted=6)
        p.choose()
        assert len(calls) == (11 if draw_prior else 1) and p.tokens_seen == 6
    assert Policy(costs).draw_token_prior and not Policy(costs).deep_ties


def test_surprise_is_the_tail_of_the_beta_binomial_predictive():
    """Under Beta(1, 1) the predictive of n verdicts is uniform on 0..n: the smaller tail of k is
    min(k + 1, n - k + 1) / (n + 1); under Beta(3.8, 0.2) (mean 0.95, worth 4), 0 of 4 is far in the low tail."""
    p = Policy(Costs.affine(1, 0, 0.1), alpha1=0.5, prior_weight=2)
    assert (p.step.a, p.step.b) == (1.0, 1.0)
    for n in (1, 4, 7):
        for k in range(n + 1):
            assert p.surprise(k, n) == pytest.approx(min(k + 1, n - k + 1) / (n + 1), rel=1e-12)
    q = Policy(Costs.affine(1, 0, 0.1), alpha1=0.95, prior_weight=4)
    p0 = math.gamma(4.2) / math.gamma(0.2) * math.gamma(4) / math.gamma(8)  # B(3.8, 4.2) / B(3.8, 0.2)
    assert q.surprise(0, 4) == pytest.approx(p0, rel=1e-9)
    assert q.surprise(0, 4) < 0.01 < q.surprise(3, 4)
    with pytest.raises(InputError, match="surprise"):
        q.surprise(5, 4)


def test_a_change_of_acceptance_restarts_the_posterior_from_the_prior():
    """changepoint 0.01: eight segments of 4 of 4 accepted, then 0 of 4 (surprise far below 0.01): the posterior
    restarts from the prior (0.95, worth 4) before the 0 of 4 is added, a=3.8 b=4.2, and the current choice stops
    dwelling; 3 of 4 after 4 of 4 is no change.  Without the test, the 32-verdict memory keeps the mean at 0.86."""
    costs = Costs.affine(0.05, 0.0005, 0.004)
    for level in (0.01, None):
        p = Policy(costs, alpha1=0.95, prior_weight=4, memory=32, dwell=4, changepoint=level)
        p.choose()
        for _ in range(8):
            p.observe(accepted=4, rejected=0)
        p.observe(accepted=3, rejected=1)
        assert p.changes == 0 and p.left == 3
        p.observe(accepted=0, rejected=4)
        if level is None:
            b = Beta.prior(0.95, 4)
            for acc in [4] * 8 + [3, 0]:
                b.update(acc, 4 - acc, 32)
            assert p.changes == 0 and (p.step.a, p.step.b) == pytest.approx((b.a, b.b)) and p.left == 3
            assert p.step.mean == pytest.approx(0.86, abs=0.005)
        else:
            assert p.changes == 1 and (p.step.a, p.step.b) == pytest.approx((3.8, 4.2)) and p.left == 0
    with pytest.raises(InputError, match="changepoint"):
        Policy(costs, changepoint=0.5)
    assert Policy(costs).changepoint is None  # lrref's tuner and lrsim serve: no test, as before
