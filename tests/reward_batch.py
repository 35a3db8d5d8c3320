"""One reward over one batch, as a stage calls it (rewards.bind), for the reward tests."""
from martingale import rewards


def compute(name: str, prior, posterior, stated, y, cfg):
    """Reward ``name`` of one batch, its parameters from ``cfg``; NaN where a needed input is NaN."""
    return rewards.bind(name, cfg)(prior=prior, posterior=posterior, stated=stated, y=y)
