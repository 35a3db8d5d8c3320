"""A reward with a parameter of its own: −|y − stated P|^power, ``power`` a new key of the stage
that uses it (``stages.<s>.power``), declared here with its domain."""
from martingale.core.settings import Real, setting
from martingale.rewards import reward


@reward("Rpower", needs=("stated", "y"), params={"power": setting(2.0, Real(1, 4), "the loss's exponent")})
def power_loss(stated, y, *, power: float, **_):
    """Rpower: −|y − stated P|^power."""
    import numpy as np
    return -np.abs(y - stated) ** power
