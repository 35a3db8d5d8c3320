"""A word-level tokenizer built locally with ``tokenizers`` and wrapped for transformers."""
from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<unk>", "<s>"]


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """Whitespace-split words, one id each; ``end`` is the end-of-sequence token."""
    vocab = {w: i for i, w in enumerate(SPECIAL + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
        eos_token="end", padding_side="left",
    )
