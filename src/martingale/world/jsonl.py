"""``world=jsonl``: the questions come from ``world.questions_file`` (world/questions.py) instead of
being drawn; the embedded model's clue table (the synthetic world of the same config) still writes
its pretraining traces and scores its reasoning steps.

Each question is asked through its text: the prompt lists the words of its ``background`` (the
evidence), so a file exported from the synthetic world (``martingale questions export-synthetic``)
puts exactly the synthetic world's prompts in front of the model. Where a line carries ``clues``
(an exported file) the exact Bayes oracle reads it too; a real question has none, and its oracle
columns are null. Splits: a ``split`` field on every line ("train"/"heldout", as exported) is
used as written; otherwise ``questions.splits`` draws them by ``world.seed``.
"""
from __future__ import annotations

from pathlib import Path

from ..core.jsonvalue import JsonObject
from .questions import ForecastQuestion, QuestionsError, load_questions, marked_splits, splits
from .registry import world
from .synthetic import Question, SyntheticWorld


def as_question(fq: ForecastQuestion) -> Question:
    """The question the stages ask: its id, resolution and evidence text; clues where the line
    lists them (an exported synthetic question), else none."""
    clues = fq.extra.get("clues") or ()
    crowd = fq.extra.get("crowd_p")
    if crowd is not None and fq.negated:
        crowd = 1 - float(crowd)
    return Question(fq.qid, tuple(int(c) for c in clues), int(fq.y), fq.negated, text=fq.background,
                    question=fq.question, criteria=fq.resolution_criteria, option=fq.option,
                    crowd=None if crowd is None else float(crowd))


def exported_rows(world: SyntheticWorld) -> list[JsonObject]:
    """The synthetic world's train and held-out questions as questions-file lines: English question
    text, the clue words as the background, the resolution, the split, the clues and the oracle's
    final belief (which the file's reader uses to check it meets the same clue table)."""
    train, heldout = world.splits()
    rows: list[JsonObject] = []
    for split, qs in (("train", train), ("heldout", heldout)):
        for q in qs:
            rows.append({
                "id": q.qid, "question": f"Will event {q.qid} resolve yes?",
                "background": " ".join(f"c{c}" for c in q.clues),
                "resolution_criteria": "Resolves yes when the event's hidden outcome y is 1; the world "
                                       f"draws y = 1 with probability {world.base_rate}.",
                "option": "", "y": int(q.y), "split": split, "clues": list(q.clues),
                "bayes_end": round(world.clue_belief(q), 6),
            })
    return rows


@world("jsonl", reads_file=True, one_split=True)
class JsonlWorld(SyntheticWorld):
    """The synthetic world's clue table, with the questions of ``world.questions_file``."""

    def __init__(self, cfg: object):
        super().__init__(cfg)
        path = self.cfg.questions_file
        if not path:
            raise QuestionsError(["world.questions_file: world=jsonl needs a questions file"])
        self.path = Path(path)
        self.questions = load_questions(self.path)
        self._check_oracle()

    def _check_oracle(self) -> None:
        """A line's ``bayes_end`` (an exported file) must be what this clue table gives its clues:
        a file exported from another synthetic world would read another oracle."""
        for fq in self.questions:
            if "bayes_end" in fq.extra and fq.extra.get("clues"):
                mine = round(self.clue_belief(as_question(fq)), 6)
                if abs(mine - float(fq.extra["bayes_end"])) > 1e-6:
                    raise QuestionsError([f"{self.path}: bayes_end: question {fq.qid} was exported from "
                                          f"another synthetic world (oracle {fq.extra['bayes_end']}, "
                                          f"this world.* gives {mine}); export it again"])

    def splits(self) -> tuple[list[Question], list[Question]]:
        n_train, n_heldout = int(self.cfg.n_train), int(self.cfg.n_heldout)
        marked = marked_splits(self.questions)
        if marked is not None:
            train, heldout = marked["train"][:n_train], marked["heldout"][:n_heldout]
            if len(train) < n_train or len(heldout) < n_heldout:
                raise ValueError(f"world.n_train/world.n_heldout: {self.path} marks {len(train)} train and "
                                 f"{len(heldout)} held-out questions, fewer than {n_train}/{n_heldout}")
        else:
            train, heldout = splits(self.questions, int(self.cfg.seed), n_train, n_heldout,
                                    int(self.cfg.heldout_draw or 0))
        return [as_question(q) for q in train], [as_question(q) for q in heldout]

    def bayes_logodds(self, q: Question, k: int | None = None) -> float | None:
        return self.clue_logodds(q, k) if q.clues else None

    def bayes(self, q: Question, k: int | None = None) -> float | None:
        """The exact belief where the question lists its clues; None for a real question."""
        return self.clue_belief(q, k) if q.clues else None

