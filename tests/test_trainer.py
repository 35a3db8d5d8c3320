"""The policy-gradient trainer's guards: KL sign, advantage normalisation, NaN stops the stage."""
import numpy as np
import pytest
import torch
from typed import typed_section, typed_slice

from martingale.core.errors import StageError
from martingale.stages.body import train
from martingale.training.loss import advantages, policy_loss


def test_kl_term_penalises_divergence_from_the_start_model():
    ref = torch.log_softmax(torch.tensor([[1.0, 0.0, -1.0]]), -1)
    logits = torch.tensor([[1.0, 0.0, -1.0]], requires_grad=True)
    mask = torch.ones(1, 3)
    zero_adv = torch.zeros(1)
    same, kl_same = policy_loss(torch.log_softmax(logits, -1), ref, zero_adv, mask, beta=1.0)
    moved = torch.log_softmax(logits + torch.tensor([[3.0, 0.0, 0.0]]), -1)
    far, kl_far = policy_loss(moved, ref, zero_adv, mask, beta=1.0)
    assert kl_same.item() == pytest.approx(0.0, abs=1e-7)
    assert kl_far.item() > 0 and far.item() > same.item()


def test_kl_gradient_pulls_the_policy_back_towards_the_start_model():
    ref = torch.tensor([[-0.5, -1.5]])
    logp = torch.tensor([[-2.0, -0.1]], requires_grad=True)
    loss, _ = policy_loss(logp, ref, torch.zeros(1), torch.ones(1, 2), beta=1.0)
    loss.backward()
    # Lower loss means moving log π towards ref: the gradient points away from ref.
    assert logp.grad[0, 0] < 0 and logp.grad[0, 1] > 0


def test_positive_advantage_raises_the_sample_log_prob():
    logp = torch.tensor([[-1.0]], requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 1), beta=0.0)
    loss.backward()
    assert logp.grad.item() < 0


def test_advantages_are_group_centred_batch_normalised_and_clipped():
    r = np.array([1.0, 0.0, 5.0, 5.0, 0.0, 100.0])
    g = np.array([0, 0, 1, 1, 2, 2])
    a = advantages(r, g, clip=1.5)
    assert a[2] == a[3] == 0.0          # no spread within a question: no signal
    assert a[0] > 0 > a[1]
    assert np.abs(a).max() <= 1.5


def test_unparsed_sample_gets_the_worst_advantage():
    a = advantages(np.array([0.2, np.nan, 0.1, 0.3]), np.zeros(4, int), clip=3.0)
    assert a[1] == -3.0 and np.isfinite(a).all()


def _moved_policy(model, cfg, stage, loss_batch):
    """The LoRA policy with its adapter moved off zero (seed 0), the loss taken loss_batch rows at a time."""
    import torch

    from martingale.model.hf import HFBackend
    from martingale.training.policy import lora_policy
    torch.manual_seed(0)
    policy = lora_policy(HFBackend.load(model, cfg["model"]), typed_section("stage", stage),
                         typed_section("model", {**cfg["model"], "loss_batch": loss_batch}))
    with torch.no_grad():
        for p in policy.params:
            p.normal_(0, 0.05)
    return policy


def test_constant_rewards_give_zero_advantage():
    assert np.all(advantages(np.ones(6), np.array([0, 0, 0, 1, 1, 1]), 3.0) == 0)


@pytest.mark.slow   # loads and steps a model (~20 s with the fixture)
def test_nan_loss_stops_the_stage_with_a_clear_error_and_writes_nothing(tmp_path, default_cfg, untrained_model):
    stage = {**default_cfg["stages"]["s1"], "reward": "B", "kl_beta": float("nan"),
             "batch_questions": 2, "generations": 2}
    cfg = {"world": default_cfg["world"], "model": default_cfg["model"],
           "elicit": {"mode": "samemode", "judge": "trace", "cut": 0.5}, "stage": stage, "seed": 1, "name": "s1"}
    with pytest.raises(StageError, match=r"train stage \(B reward\): loss is nan at step 0"):
        train.run(typed_slice("train", cfg), untrained_model, untrained_model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_loss_accumulated_a_few_rows_at_a_time_has_the_whole_batchs_gradient(default_cfg, untrained_model):
    """model.loss_batch: the loss's gradient accumulated over row chunks (padding cut, logits at
    completion positions only) equals the gradient of the whole batch's loss."""
    import torch

    from martingale.beliefs.elicit import rollout
    from martingale.beliefs.readers import ReadContext
    from martingale.training.loss import rollout_loss
    from martingale.world.synthetic import SyntheticWorld
    world = SyntheticWorld(default_cfg["world"])
    qs = [q for q in world.splits()[0][:3] for _ in range(2)]
    stage = {**default_cfg["stages"]["s1"], "lora_r": 4}
    grads = []
    for rows in (0, 2):
        policy = _moved_policy(untrained_model, default_cfg, stage, rows)
        ro = rollout(policy.gen, qs, ReadContext(world=world, judge=policy.gen, config=default_cfg),
                     {"mode": "samemode", "judge": "trace", "cut": 0.5}, seed=3, temperature=1.0)
        adv = torch.linspace(-1, 1, len(qs))
        policy.opt.zero_grad(set_to_none=True)
        loss, kl = rollout_loss(policy, ro, adv, beta=0.1, temperature=1.0)
        if loss.requires_grad:
            loss.backward()
        grads.append((float(loss), float(kl), [p.grad.clone() for p in policy.params]))
    (l0, k0, g0), (l1, k1, g1) = grads
    assert abs(l0 - l1) < 1e-5 and abs(k0 - k1) < 1e-6
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(g0, g1))


def test_the_instructors_utterance_loss_accumulated_a_few_episodes_at_a_time_has_the_whole_gradient(
        default_cfg, untrained_model):
    """With model.loss_batch the instructor's loss over every turn is accumulated a few episodes at a
    time (its graphs for all turns at once OOM-killed SmolLM2's stage): the same loss, KL, adapter gap
    and gradient as all turns at once, and the loss comes back already backpropagated (detached)."""
    from types import SimpleNamespace

    import torch

    from martingale.beliefs.elicit import rollout
    from martingale.beliefs.readers import ReadContext
    from martingale.stages.body.instructor import utterance_loss
    from martingale.world.synthetic import SyntheticWorld
    world = SyntheticWorld(default_cfg["world"])
    qs = world.splits()[0][:4]
    stage = {**default_cfg["stages"]["s1"], "lora_r": 4}
    out = []
    for rows in (0, 2):
        policy = _moved_policy(untrained_model, default_cfg, stage, rows)
        turns = [rollout(policy.gen, qs, ReadContext(world=world, judge=policy.gen, config=default_cfg),
                         {"mode": "samemode", "judge": "trace", "cut": 0.5}, seed=s, temperature=1.0).trace
                 for s in (3, 4)]                     # two turns of four episodes
        policy.opt.zero_grad(set_to_none=True)
        loss, kl, gap = utterance_loss(policy, SimpleNamespace(turns=turns), torch.linspace(-1, 1, 4), 0.1, 1.0)
        assert loss.requires_grad == (rows == 0)
        if loss.requires_grad:
            loss.backward()
        out.append((float(loss), float(kl), gap, [p.grad.clone() for p in policy.params]))
    (l0, k0, gap0, g0), (l1, k1, gap1, g1) = out
    assert abs(l0 - l1) < 1e-5 and abs(k0 - k1) < 1e-6 and abs(gap0 - gap1) < 1e-5
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(g0, g1))
