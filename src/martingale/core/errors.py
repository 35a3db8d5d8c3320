"""The errors a stage or a model raises, below every layer that raises them (models, episodes,
stages): one line saying what cannot go on and why."""


class StageError(RuntimeError):
    """A stage cannot go on (NaN loss, unparseable start model, a dead server, ...): the message says why."""
