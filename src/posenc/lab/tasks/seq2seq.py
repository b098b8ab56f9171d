"""Sequence-to-sequence tasks: a source sentence in, its transformation out, in the decoder
tasks' layout (``source SEP target EOS``: a decoder-only model reads the source as its prompt,
an encoder-decoder would encode it and decode ``SEP target``). ``reverse`` and ``copy`` in
``sequence`` are the two simplest; these add a positional offset and a word-order change.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import FIRST
from .sequence import Pair, SeqTask


class CopyOffset(SeqTask):
    """Copy n random symbols starting ``offset`` places in, wrapping around: the answer's i-th
    symbol is the prompt's (i + offset) mod n-th (offset 2), so every output reads a position
    a fixed distance from its own.

    n=5:  s2 s9 s4 s5 s7 SEP | s4 s5 s7 s2 s9 EOS
    """

    name = "copy_offset"
    source = "posenc's own (no published split): copy with a cyclic offset of 2"
    offset: ClassVar[int] = 2

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))
        return x, np.roll(x, -self.offset, axis=1)


class Translate(SeqTask):
    """Translate n clauses "subject verb object", joined by "and", from an SVO language into an
    SOV one through a fixed lexicon: each source noun and verb has one target word (a fixed
    permutation), and each clause's verb moves after its object (English-to-Japanese word
    order, as in synthetic reordering benchmarks). ``n_symbols`` nouns and as many verbs per
    language; the length n counts clauses.

    n=2, lexicon nouns/verbs 0->2, 1->4, 2->3, 3->6, 4->5, 5->0, 6->1, 7->7:
    N3 V1 N0 and N5 V6 N2 SEP | n6 n2 v4 and' n0 n3 v1 EOS
    """

    name = "translate"
    source = "posenc's own (no published split): SVO to SOV clauses through a fixed lexicon"
    default_symbols = 8
    #: The lexicon: source noun (verb) i translates to target noun (verb) LEXICON[i] (a fixed
    #: permutation of each word class, the same for every run).
    lexicon_seed: ClassVar[int] = 0

    @property
    def default_train_len(self) -> tuple[int, int]:
        return (1, 4)  # up to 31 source tokens; evaluation up to 16 clauses (127)

    @property
    def vocab_size(self) -> int:
        return FIRST + 4 * self.n_symbols + 2  # nouns, verbs, "and" in each language

    def seq_len(self, n: int) -> int:
        return 8 * n  # 4n - 1 words each way, SEP, EOS

    def lexicon(self) -> np.ndarray:
        """(N,) target index of each source word index, one permutation for nouns and verbs."""
        return np.random.default_rng(self.lexicon_seed).permutation(self.n_symbols)

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        N = self.n_symbols
        src_noun, src_verb, src_and = FIRST, FIRST + N, FIRST + 2 * N
        tgt_noun, tgt_verb, tgt_and = src_and + 1, src_and + 1 + N, src_and + 1 + 2 * N
        subj, obj = rng.integers(0, N, size=(2, batch, n))  # (B, n) word indices
        verb = rng.integers(0, N, size=(batch, n))
        lex = self.lexicon()
        source = np.stack([src_noun + subj, src_verb + verb, src_noun + obj], axis=2)
        target = np.stack(
            [tgt_noun + lex[subj], tgt_noun + lex[obj], tgt_verb + lex[verb]], axis=2
        )  # (B, n, 3): S O V
        return _joined(source, src_and), _joined(target, tgt_and)


def _joined(clauses: np.ndarray, conjunction: int) -> np.ndarray:
    """Clauses (B, n, w) as one row (B, n·(w + 1) - 1) with ``conjunction`` between them."""
    batch, n, _ = clauses.shape
    glue = np.full((batch, n, 1), conjunction)
    return np.concatenate([clauses, glue], axis=2).reshape(batch, -1)[:, :-1]
