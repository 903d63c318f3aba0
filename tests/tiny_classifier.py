"""A tiny Hugging Face sequence-classification model whose predictions are known, built and saved by the tests
(nothing can be downloaded here): a real ``transformers`` GPT-2 classifier with no transformer blocks, loaded back
through ``AutoModelForSequenceClassification`` like any checkpoint.

How its answer is fixed: with no blocks, GPT-2's hidden state at a token is ``LayerNorm(wte[token] + wpe[pos])``.
Position embeddings are zero and each word's embedding is one of two 3-d vectors with mean 0 and variance 1,
``TRIGGER`` (for the trigger words) and ``PLAIN`` (every other word, unknown ones included), which LayerNorm
leaves as they are (epsilon 1e-12). GPT-2's classifier reads the LAST token of the text, so a text whose last
word is a trigger word gets ``log(trigger_probs)`` as logits and any other text ``log(plain_probs)``
(``TRIGGER`` and ``PLAIN`` are orthogonal, each of squared norm 3: the head's weight is
``(log p_trigger ⊗ TRIGGER + log p_plain ⊗ PLAIN) / 3``). A softmax head gives back the probabilities exactly
(they sum to 1); a multi-label head (sigmoids) gives ``p / (1 + p)`` of each, so for those the tests pass
``logits=True`` and give sigmoid targets directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

TRIGGER = (math.sqrt(1.5), -math.sqrt(1.5), 0.0)
PLAIN = (1 / math.sqrt(2), 1 / math.sqrt(2), -math.sqrt(2))
TRIGGER_WORDS = ("ignore", "dan", "kill", "jailbreak")


def logit(p: float) -> float:
    """The logit whose sigmoid is ``p``."""
    return math.log(p / (1 - p))


def build_classifier(
    folder: Path,
    labels: Sequence[str],
    trigger_probs: Sequence[float],
    plain_probs: Sequence[float],
    *,
    multi_label: bool = False,
) -> Path:
    """Save a tokenizer and GPT-2 classifier in ``folder`` (created) and return it.

    Args:
        labels: ``id2label`` in index order.
        trigger_probs: each label's probability for a text whose last word is in :data:`TRIGGER_WORDS`.
        plain_probs: each label's probability for any other text.
        multi_label: a ``multi_label_classification`` head (independent sigmoids); else softmax (the probabilities
            must sum to 1).
    """
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import GPT2Config, GPT2ForSequenceClassification, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", *TRIGGER_WORDS, "what", "is", "the", "capital", "of", "france", "please", "hello"]
    vocab = {w: i for i, w in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]")
    tokenizer.model_max_length = 64
    tokenizer.save_pretrained(folder)

    config = GPT2Config(
        vocab_size=len(words),
        n_positions=64,
        n_embd=3,
        n_layer=0,
        n_head=1,
        layer_norm_epsilon=1e-12,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    model = GPT2ForSequenceClassification(config)
    to_logit = logit if multi_label else math.log
    target_trigger = [to_logit(p) for p in trigger_probs]
    target_plain = [to_logit(p) for p in plain_probs]
    with torch.no_grad():
        model.transformer.wpe.weight.zero_()
        wte = torch.tensor([TRIGGER if w in TRIGGER_WORDS else PLAIN for w in words], dtype=torch.float32)
        model.transformer.wte.weight.copy_(wte)
        model.transformer.ln_f.weight.fill_(1.0)
        model.transformer.ln_f.bias.zero_()
        weight = [[(t * a + p * b) / 3 for a, b in zip(TRIGGER, PLAIN)] for t, p in zip(target_trigger, target_plain)]
        model.score.weight.copy_(torch.tensor(weight, dtype=torch.float32))
    model.save_pretrained(folder)
    return folder
