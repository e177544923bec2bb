"""com.microsoft BeamSearch, WhisperBeamSearch, GreedySearch and Sampling: decoding loops
over decoder subgraphs.

onnxruntime's ``convert_generation`` tool (and its Whisper export) wraps a model's decoder
into one node that generates tokens until ``max_length`` or every sequence has ended. These
forms run here, as onnxruntime's CPU kernels run them, step for step, so that the same
tokens come out:

* model_type 0 (GPT): the ``decoder`` graph takes ``input_ids``, ``position_ids``,
  ``attention_mask``, ``past_0..past_{L-1}`` and gives ``logits``, ``present_0..``, each
  past/present ``[2, batch * beams, heads, length, head_size]`` (BeamSearch, GreedySearch,
  Sampling: its draws are onnxruntime's, C++'s default_random_engine reproduced);
* model_types 1 (T5, BART) and 2 (Whisper): an ``encoder`` graph runs once and seeds a
  ``decoder`` graph's self- and cross-attention pasts (BeamSearch, WhisperBeamSearch; see
  :func:`_make_encoder_decoder_beam_search`). A decoder input ``encoder_hidden_states`` gets
  the encoder's hidden states, repeated per beam; onnxruntime 1.32 passes a tensor of their
  shape whose contents it does not copy (its exporters' decoders read the cross pasts only),
  so a decoder that reads those values gets different answers from the two.

Declined by name: decoders sharing one past/present buffer (a ``past_sequence_length``
input), the cross_qk / non_finished_beams / no_speech_probs outputs and extra_decoding_ids.
What the loop does:

* the prompt's pad tokens get attention mask 0 and position 0 (positions count the other
  tokens); every beam starts from the prompt, the first beam of each batch with score 0 and
  the others with -1e9, so the first step does not pick one token num_beams times;
* a step takes the last position's logits and, for beam search, their log-softmax; then the
  logits processors in onnxruntime's order (repetition penalty, no-repeat n-grams, the vocab
  mask, the prefix vocab mask on the first step only, eos forbidden below ``min_length``);
* beam search adds each beam's running score, keeps the ``2 * num_beams`` best candidates of
  each batch (ties to the lower index), and its scorer keeps the finished hypotheses (an
  end-of-sequence candidate ranked among the first ``num_beams``) scored
  ``sum_logprobs / length ** length_penalty``; a batch is done when it holds ``num_beams``
  of them and (without ``early_stopping``) no running beam can beat the worst (onnxruntime
  reads the best running score from an offset slice of the candidates; so does this);
* greedy search takes the arg-max of the processed logits; a sequence that has produced the
  eos token continues with ``pad_token_id`` (which replaces the eos in the output too).

The decoder runs through the session's own machinery (``ctx.compile_graph``), with the past
states of the chosen beams gathered after each step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex._errors import KernelExecutionError

from ._registry import op
from .contrib_sequence import repeated_ngram_bans
from .control_flow import _outer_picker, _runner

MS = "com.microsoft"
_LOWEST = np.finfo(np.float32).min
_MAX_LENGTH = 4096
_MAX_BEAMS = 128


def _scalar(value: Any, default: Any, kind: type = int) -> Any:
    if value is None:
        return default
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"expected a single value, got shape {list(arr.shape)}")
    return kind(arr.reshape(-1)[0])


def _gpt_problem(node: NodeView) -> str | None:
    graph = node.attr("decoder")
    if graph is None:
        return "no 'decoder' graph attribute"
    names_in = [v.name for v in graph.inputs]
    names_out = [v.name for v in graph.outputs]
    if names_in[:4] != ["input_ids", "position_ids", "attention_mask", "past_0"] or \
            names_out[:2] != ["logits", "present_0"]:
        return (f"the decoder's inputs {names_in[:4]} and outputs {names_out[:2]} are not the "
                "GPT form (input_ids, position_ids, attention_mask, past_0...; logits, "
                "present_0...)")
    if len(names_in) != len(names_out) + 2:
        return ("the decoder shares its past and present buffers (past_sequence_length "
                "input), which is not implemented")
    return None


def _top_candidates(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, the columns of the ``k`` largest scores, largest first, ties to the lower
    column (onnxruntime's TopK order). A full stable sort of a row of beams x vocabulary
    (200,000 for GPT-2 at 4 beams) is replaced by a partition when rows are long: the
    values above the k-th largest, then the first columns equal to it, sorted."""
    n = scores.shape[1]
    if n <= 8 * k or n <= 4096:
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    rows = []
    for row, t in zip(scores, kth):
        above = np.flatnonzero(row > t)
        cols = np.concatenate([above, np.flatnonzero(row == t)[:k - len(above)]])
        rows.append(cols[np.lexsort((cols, -row[cols]))])
    return np.stack(rows)


def _encoder_decoder_problem(node: NodeView, model_type: int) -> str | None:
    """Why onnxruntime's T5 (model_type 1) or Whisper (2) form does not fit, or None."""
    whisper = model_type == 2
    encoder, decoder = node.attr("encoder"), node.attr("decoder")
    if encoder is None or decoder is None:
        return f"model_type {model_type} needs 'encoder' and 'decoder' graph attributes"
    enc_in = [v.name for v in encoder.inputs]
    enc_out = [v.name for v in encoder.outputs]
    want_in = ["encoder_input_ids", "decoder_input_ids"] if whisper else \
        ["encoder_input_ids", "encoder_attention_mask", "decoder_input_ids"]
    if enc_in != want_in or enc_out[:2] != ["logits", "encoder_hidden_states"] or \
            (len(enc_out) - 2) % 4:
        return (f"the encoder's inputs {enc_in} and outputs {enc_out[:2]} are not the form "
                f"onnxruntime's {'Whisper' if whisper else 'T5'} BeamSearch takes")
    if not whisper and int(node.attr("decoder_start_token_id", -1)) < 0:
        return "model_type 1 needs decoder_start_token_id"
    layout = _DecoderLayout(decoder, whisper=whisper)
    if layout.problem:
        return layout.problem
    if len(enc_out) - 2 != 4 * layout.layers:
        return (f"the encoder's {len(enc_out) - 2} present outputs do not match the "
                f"decoder's {layout.layers} layers")
    if whisper and len(node.inputs) > 12 and [v for v in node.inputs[12:14] if v is not None]:
        return "the cross_qk_layer_head and extra_decoding_ids inputs are not implemented"
    return None


def _beam_predicate(node: NodeView) -> str | None:
    if [v for v in node.outputs[3:] if v is not None]:
        return ("the cross_qk / non_finished_beams / no_speech_probs outputs are not "
                "implemented")
    model_type = int(node.attr("model_type", 2 if node.op_type == "WhisperBeamSearch" else 0))
    if model_type == 0:
        return _gpt_problem(node)
    if model_type in (1, 2):
        return _encoder_decoder_problem(node, model_type)
    return f"model_type {model_type} is not a BeamSearch model type (0, 1 or 2)"


def _greedy_predicate(node: NodeView) -> str | None:
    model_type = int(node.attr("model_type", 0))
    if model_type != 0:
        return f"model_type {model_type} is not implemented for GreedySearch; model_type 0 is"
    return _gpt_problem(node)


class _DecoderLayout:
    """Where an encoder-decoder's decoder subgraph takes what: input_ids, then T5's
    [encoder_input_ids] and encoder_attention_mask (Whisper's decoder has neither), an
    optional encoder_hidden_states, then per layer the self-attention past key and value
    and, after them, the cross-attention ones; outputs logits and the self-attention
    presents."""

    def __init__(self, decoder: Any, whisper: bool = False) -> None:
        names = [v.name for v in decoder.inputs]
        outs = [v.name for v in decoder.outputs]
        self.problem: str | None = None
        self.has_ids = not whisper and len(names) > 1 and names[1] == "encoder_input_ids"
        self.has_mask = not whisper
        mask_at = 1 + self.has_ids   # (where encoder_attention_mask is, when there is one)
        hidden_at = mask_at + self.has_mask
        self.has_hidden = len(names) > hidden_at and names[hidden_at] == "encoder_hidden_states"
        self.first_past = hidden_at + self.has_hidden
        self.layers = (len(outs) - 1) // 2
        # onnxruntime feeds the next token alone only when input_ids is declared [batch, 1];
        # any other declared length gets the whole sequence so far.
        shape = decoder.inputs[0].shape if names else None
        self.whole_sequence = not (shape is not None and len(shape) == 2 and shape[1] == 1)
        if not names or names[0] != "input_ids" or outs[:1] != ["logits"] or (
                self.has_mask and (len(names) <= mask_at
                                   or names[mask_at] != "encoder_attention_mask")):
            self.problem = (f"the decoder's inputs {names[:mask_at + 1]} are not the T5 form "
                            "(input_ids, [encoder_input_ids], encoder_attention_mask, ...)")
        elif self.layers < 1 or len(outs) != 1 + 2 * self.layers or \
                len(names) != self.first_past + 4 * self.layers:
            self.problem = ("the decoder's past inputs are not 4 per layer with 2 presents per "
                            "layer (a shared past buffer or no past state is not implemented)")


class _Hypotheses:
    """One batch's finished hypotheses, best first, at most ``beams`` of them (onnxruntime's
    BeamHypotheses: a newcomer goes after the ones of equal score)."""

    __slots__ = ("beams", "length_penalty", "items", "done")

    def __init__(self, beams: int, length_penalty: float) -> None:
        self.beams = beams
        self.length_penalty = np.float32(length_penalty)
        self.items: list[tuple[np.float32, np.ndarray]] = []
        self.done = False

    def score(self, sum_logprobs: float, length: int) -> np.float32:
        return np.float32(np.float32(sum_logprobs)
                          / np.float32(np.power(np.float32(length), self.length_penalty)))

    def add(self, hypothesis: np.ndarray, sum_logprobs: float) -> None:
        score = self.score(sum_logprobs, len(hypothesis))
        items = self.items
        if len(items) == self.beams:
            if score <= items[-1][0]:
                return
            items.pop()
        at = len(items)
        while at > 0 and score > items[at - 1][0]:
            at -= 1
        items.insert(at, (score, hypothesis.copy()))

    def can_improve(self, best_sum_logprobs: float, length: int) -> bool:
        return bool(self.items[-1][0] < self.score(best_sum_logprobs, length))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32, copy=False)
    shifted = x - x.max(axis=-1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True,
                                                  dtype=np.float32))).astype(np.float32)


class _Processors:
    """onnxruntime's logits processors, in its order, on ``scores [rows, vocab]`` in place."""

    def __init__(self, *, repetition_penalty: float, no_repeat_ngram_size: int,
                 vocab_mask: np.ndarray | None, prefix_vocab_mask: np.ndarray | None,
                 min_length: int, eos_token_id: int, batch_size: int, vocab_size: int,
                 temperature: float = 1.0, timestamps: _Timestamps | None = None) -> None:
        self.repetition_penalty = np.float32(repetition_penalty)
        self.temperature = np.float32(temperature)
        self.timestamps = timestamps
        self.ngram = no_repeat_ngram_size
        self.vocab_block = None if vocab_mask is None else \
            np.asarray(vocab_mask).reshape(-1)[:vocab_size] == 0
        self.prefix_block = None if prefix_vocab_mask is None else \
            np.asarray(prefix_vocab_mask).reshape(batch_size, -1)[:, :vocab_size] == 0
        self.min_length = min_length
        self.eos = eos_token_id

    def __call__(self, scores: np.ndarray, sequences: np.ndarray, step: int) -> None:
        rows = scores.shape[0]
        length = sequences.shape[1]
        if self.repetition_penalty != 1:
            p = self.repetition_penalty
            for i in range(rows):
                ids = np.unique(sequences[i])
                s = scores[i, ids]
                scores[i, ids] = np.where(s < 0, s * p, s / p)
        if self.ngram > 0:
            scores[repeated_ngram_bans(sequences, self.ngram)] = _LOWEST
        if self.vocab_block is not None:
            scores[:, self.vocab_block] = _LOWEST
        if self.prefix_block is not None and step <= 1:
            per = rows // self.prefix_block.shape[0]
            scores[np.repeat(self.prefix_block, per, axis=0)] = _LOWEST
        if self.min_length > 0 and length < self.min_length:
            scores[:, self.eos] = _LOWEST
        if self.temperature > 0 and self.temperature != 1:
            scores /= self.temperature
        if self.timestamps is not None:
            for i in range(rows):
                self.timestamps(scores[i], sequences[i])


class _Timestamps:
    """onnxruntime's Whisper timestamp rules on one beam's scores (WhisperBeamSearch with
    logits_processor 1): timestamp tokens (ids from ``beginning``) come in pairs and never go
    back, the first at most 50 steps in; no <|notimestamps|> or <|startoflm|>, nor task
    tokens after the prompt; text is forbidden when the timestamps together are likelier than
    any text token."""

    def __init__(self, *, eos: int, start: int, translate: int, transcribe: int,
                 start_of_lm: int, no_timestamps: int, beginning: int,
                 max_initial: int = 50) -> None:
        self.eos, self.beginning, self.max_initial = eos, beginning, max_initial
        self.always = [t for t in (no_timestamps, start_of_lm) if t >= 0]
        self.after_prompt = [t for t in (start, translate, transcribe) if t >= 0]

    def __call__(self, scores: np.ndarray, seq: np.ndarray) -> None:
        beg = self.beginning
        n = len(seq)
        is_ts = seq >= beg
        first = int(np.argmax(is_ts)) if is_ts.any() else n - 1
        sample_begin = first + 1 if n else 0
        scores[self.always] = _LOWEST
        if n > sample_begin:
            scores[self.after_prompt] = _LOWEST
        last_ts = n > 0 and bool(is_ts[-1])
        penult_ts = n <= sample_begin or bool(is_ts[n - 2])
        if last_ts:
            if penult_ts:
                scores[beg:] = _LOWEST
            else:
                scores[:max(self.eos, 0)] = _LOWEST
        stamps = seq[is_ts]
        if len(stamps):
            last = int(stamps[-1]) if last_ts and not penult_ts else int(stamps[-1]) + 1
            scores[beg:max(last, beg)] = _LOWEST
        if n == sample_begin:
            scores[beg + self.max_initial + 1:] = _LOWEST
        tail = scores[beg:]
        top = tail.max()
        live = tail[tail > _LOWEST]
        total = np.float32(np.exp(live - top).sum(dtype=np.float32)) if len(live) else \
            np.float32(0)
        stamp_logprob = np.float32(np.log(total) + top) if total > 0 else _LOWEST
        if stamp_logprob > scores[:beg].max():
            scores[:beg] = _LOWEST


class _GptDecoder:
    """The decoder subgraph and its feeds: the prompt expanded to ``rows`` = batch * beams,
    positions and mask as onnxruntime makes them, empty past states."""

    def __init__(self, run, outer: list[Any], graph: Any) -> None:
        self.run = run
        self.outer = outer
        past = graph.inputs[3]
        shape = past.shape
        if shape is None or len(shape) != 5 or not all(isinstance(shape[k], int)
                                                        for k in (2, 4)):
            raise ValueError(f"the decoder's past_0 must be 5-D [2, batch, heads, length, "
                             f"head_size] with known heads and head_size, got {shape}")
        self.heads, self.head_size = int(shape[2]), int(shape[4])
        self.past_dtype = past.dtype.numpy()
        self.n_past = len(graph.inputs) - 3
        logits = graph.outputs[0].shape
        self.vocab = int(logits[2]) if logits is not None and len(logits) == 3 and \
            isinstance(logits[2], int) else None

    def first_feeds(self, input_ids: np.ndarray, mask: np.ndarray | None, pad: int,
                    beams: int) -> tuple[list[Any], np.ndarray]:
        not_pad = input_ids != pad
        positions = np.where(not_pad, np.cumsum(not_pad, axis=1, dtype=np.int32) - 1,
                             0).astype(np.int32)
        lengths = not_pad.sum(axis=1).astype(np.int32)
        mask = not_pad.astype(np.int32) if mask is None else np.asarray(mask, np.int32)
        rows = input_ids.shape[0] * beams
        past = np.zeros((2, rows, self.heads, 0, self.head_size), self.past_dtype)
        feeds = [np.repeat(a, beams, axis=0) for a in (input_ids, positions, mask)]
        return feeds + [past] * self.n_past, np.repeat(lengths, beams)

    def next_feeds(self, feeds: list[Any], tokens: np.ndarray, positions: np.ndarray,
                   past: list[Any]) -> list[Any]:
        """The feeds of the step after ``feeds``: the new tokens, their positions, the mask
        one longer, the past states (already gathered by beam)."""
        rows = len(tokens)
        return [tokens.reshape(rows, 1), positions,
                np.concatenate([feeds[2], np.ones((rows, 1), np.int32)], axis=1), *past]

    def __call__(self, feeds: list[Any]) -> list[Any]:
        return self.run(*feeds, *self.outer)


def _prompt(input_ids: Any) -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be 2-D [batch, length], got shape {list(ids.shape)}")
    return ids.astype(np.int32, copy=False)


def _start(args: tuple, n_explicit: int, width: int, run: Any, outer: Any, graph: Any
           ) -> tuple[list[Any], _GptDecoder, np.ndarray, int, int]:
    """A run's inputs (``width`` of them, ``None`` where omitted), its decoder, the prompt,
    max_length and min_length (inputs 1 and 2 of both ops)."""
    inputs = list(args[:n_explicit]) + [None] * (width - n_explicit)
    return (inputs, _GptDecoder(run, outer(args), graph), _prompt(inputs[0]),
            _scalar(inputs[1], _MAX_LENGTH), _scalar(inputs[2], 0))


def _check_lengths(prompt_len: int, max_length: int, repetition_penalty: float) -> None:
    if not prompt_len < max_length <= _MAX_LENGTH:
        raise ValueError(f"max_length ({max_length}) must exceed the input length "
                         f"({prompt_len}) and be at most {_MAX_LENGTH}")
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be positive, got {repetition_penalty}")


def _vocab(decoder: _GptDecoder, node: NodeView) -> int | None:
    given = int(node.attr("vocab_size", -1))
    return given if given > 0 else decoder.vocab


def _next_logits(logits: Any, rows: int, vocab: int | None) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.ndim != 3 or logits.shape[0] != rows:
        raise ValueError(f"the decoder's logits must be [{rows}, length, vocab], got "
                         f"{list(logits.shape)}")
    last = logits[:, -1, :] if vocab is None else logits[:, -1, :vocab]
    return np.array(last, np.float32)


def _setup(node: NodeView, ctx: ProviderContext) -> tuple[Any, Any, Any, int, int, int]:
    """The decoder's runner, its outer-value picker and graph; eos, pad, no-repeat size."""
    run = _runner(node, ctx, "decoder")
    eos = int(node.attr("eos_token_id", -1))
    pad = int(node.attr("pad_token_id", -1))
    if eos < 0 or pad < 0:
        raise ValueError(f"{node.op_type} needs eos_token_id and pad_token_id (got {eos}, "
                         f"{pad})")
    return (run, _outer_picker(node, run), node.attr("decoder"), eos, pad,
            int(node.attr("no_repeat_ngram_size", 0)))


class _Beams:
    """A beam search's state across steps: the sequences of every beam, their running scores,
    each batch's finished hypotheses; ``advance`` takes one step's last-position logits."""

    def __init__(self, sequences: np.ndarray, length: int, batch: int, beams: int,
                 max_length: int, params: dict[str, Any], node: NodeView) -> None:
        self.batch, self.beams, self.max_length = batch, beams, max_length
        self.sequences = sequences
        self.length = length
        self.first_length = length
        self.eos, self.pad, self.early = params["eos"], params["pad"], params["early"]
        self.params = params
        scores = np.zeros((batch, beams), np.float32)
        scores[:, 1:] = -1e9
        self.scores = scores.reshape(-1)
        self.hyps = [_Hypotheses(beams, params["length_penalty"]) for _ in range(batch)]
        self.processors: _Processors | None = None
        self.step = 0
        self.want_scores = len(node.outputs) > 2 and node.outputs[2] is not None
        # (the scores outputs are float16 in a float16 model: computed in float32, cast)
        declared = node.outputs[1].dtype if len(node.outputs) > 1 and node.outputs[1] else None
        self.score_dtype = declared if declared in (np.float16, np.float32) else np.float32
        self.steps_scores: list[np.ndarray] = []
        self.vocab = 0

    def advance(self, last_logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """(next tokens, the rows they extend, whether every batch is done)."""
        self.step += 1
        scores = _log_softmax(last_logits)
        self.vocab = vocab = scores.shape[1]
        if self.processors is None:
            p = self.params
            self.processors = _Processors(
                repetition_penalty=p["repetition_penalty"], no_repeat_ngram_size=p["no_repeat"],
                vocab_mask=p["vocab_mask"], prefix_vocab_mask=p["prefix_vocab_mask"],
                min_length=p["min_length"], eos_token_id=self.eos, batch_size=self.batch,
                vocab_size=vocab, temperature=p.get("temperature", 1.0),
                timestamps=p.get("timestamps"))
        self.processors(scores, self.sequences[:, :self.length], self.step)
        scores += self.scores[:, None]
        if self.want_scores:
            self.steps_scores.append(scores.copy())
        flat = scores.reshape(self.batch, self.beams * vocab)
        order = _top_candidates(flat, 2 * self.beams)
        top = np.take_along_axis(flat, order, axis=1)
        self.scores, tokens, sources = _score_step(
            self.hyps, self.sequences, self.length, top, order // vocab, order % vocab,
            self.beams, self.eos, self.pad, self.early)
        self.sequences = self.sequences[sources]
        self.sequences[:, self.length] = tokens
        self.length += 1
        return tokens, sources, all(h.done for h in self.hyps)

    def finish(self, n_return: int) -> tuple[np.ndarray, ...]:
        beams = self.beams
        out_seq = np.full((self.batch, n_return, self.max_length), self.pad, np.int32)
        out_scores = np.zeros((self.batch, n_return), np.float32)
        for b, h in enumerate(self.hyps):
            if not h.done:
                for j in range(beams):
                    h.add(self.sequences[b * beams + j, :self.length], self.scores[b * beams + j])
            for r in range(n_return):
                score, seq = h.items[r]
                out_seq[b, r, :len(seq)] = seq
                out_scores[b, r] = score
        out_scores = out_scores.astype(self.score_dtype, copy=False)
        if not self.want_scores:
            return out_seq, out_scores
        every = np.zeros((self.max_length - self.first_length, self.batch, beams, self.vocab),
                         np.float32)
        for t, s in enumerate(self.steps_scores):
            every[t] = s.reshape(self.batch, beams, self.vocab)
        return out_seq, out_scores, every.astype(self.score_dtype, copy=False)


def _beam_params(inputs: list[Any], prompt_len: int, max_length: int, min_length: int,
                 setup: tuple) -> tuple[int, int, dict[str, Any]]:
    """num_beams, num_return_sequences and the rest of a BeamSearch run's parameters."""
    beams = _scalar(inputs[3], 1)
    n_return = _scalar(inputs[4], 1)
    repetition_penalty = _scalar(inputs[6], 1.0, float)
    _check_lengths(prompt_len, max_length, repetition_penalty)
    if min_length >= max_length:
        raise ValueError(f"min_length ({min_length}) must be below max_length ({max_length})")
    if not 1 <= beams <= _MAX_BEAMS:
        raise ValueError(f"num_beams must be in [1, {_MAX_BEAMS}], got {beams}")
    if not 1 <= n_return <= beams:
        raise ValueError(f"num_return_sequences ({n_return}) must be in [1, num_beams "
                         f"({beams})]")
    eos, pad, no_repeat, early = setup
    return beams, n_return, {
        "eos": eos, "pad": pad, "no_repeat": no_repeat, "early": early,
        "length_penalty": _scalar(inputs[5], 1.0, float),
        "repetition_penalty": repetition_penalty, "min_length": min_length,
        "vocab_mask": inputs[7], "prefix_vocab_mask": inputs[8]}


@op(["BeamSearch", "WhisperBeamSearch"], since=1, domain=MS, predicate=_beam_predicate)
def make_beam_search(node: NodeView, ctx: ProviderContext):
    model_type = int(node.attr("model_type", 2 if node.op_type == "WhisperBeamSearch" else 0))
    if model_type in (1, 2):
        return _make_encoder_decoder_beam_search(node, ctx, whisper=model_type == 2)
    run, outer, graph, eos, pad, no_repeat = _setup(node, ctx)
    setup = (eos, pad, no_repeat, int(node.attr("early_stopping", 0)) == 1)
    n_explicit = len(node.inputs)

    def kernel(*args):
        inputs, decoder, ids, max_length, min_length = _start(args, n_explicit, 15, run,
                                                              outer, graph)
        batch, prompt_len = ids.shape
        beams, n_return, params = _beam_params(inputs, prompt_len, max_length, min_length,
                                               setup)
        rows = batch * beams
        feeds, lengths = decoder.first_feeds(ids, inputs[9], pad, beams)
        positions = lengths.reshape(rows, 1)
        sequences = np.full((rows, max_length), pad, np.int32)
        sequences[:, :prompt_len] = feeds[0]
        state = _Beams(sequences, prompt_len, batch, beams, max_length, params, node)
        vocab = _vocab(decoder, node)
        while state.length < max_length:
            outs = decoder(feeds)
            tokens, sources, done = state.advance(_next_logits(outs[0], rows, vocab))
            if done:
                break
            if state.length < max_length:
                if state.step > 1:
                    positions = positions + 1
                past = outs[1:1 + decoder.n_past]
                if beams > 1:
                    past = [p[:, sources] for p in past]
                feeds = decoder.next_feeds(feeds, tokens, positions, past)
        return state.finish(n_return)

    return kernel


def _make_encoder_decoder_beam_search(node: NodeView, ctx: ProviderContext, whisper: bool):
    """model_type 1 (T5, BART) and 2 (Whisper): the encoder subgraph once, on the unexpanded
    batch (its logits give the first token, the same for every beam of a batch), then the
    decoder per token with the encoder's presents, expanded to every beam, as its first past
    states; the self-attention ones are gathered by beam after each step, the cross-attention
    ones stay. T5's sequences start with decoder_start_token_id and its encoder takes the
    prompt and its mask; Whisper's encoder takes the audio features and the decoder prompt
    (input 10, else the start token), its decoder no mask, and WhisperBeamSearch's
    logits_processor 1 adds the timestamp rules (and input 14 a temperature)."""
    run, outer, graph, eos, pad, no_repeat = _setup(node, ctx)
    enc_run = _runner(node, ctx, "encoder")
    enc_outer = _outer_picker(node, enc_run)
    layout = _DecoderLayout(graph, whisper=whisper)
    start = int(node.attr("decoder_start_token_id", -1))
    setup = (eos, pad, no_repeat, int(node.attr("early_stopping", 0)) == 1)
    n_explicit = len(node.inputs)
    vocab_attr = int(node.attr("vocab_size", -1))
    stamps = None
    if whisper:
        stamps = {k: int(node.attr(f"{k}_token_id", -1)) for k in (
            "translate", "transcribe", "start_of_lm", "no_timestamps",
            "beginning_timestamp")}

    def kernel(*args):
        inputs = list(args[:n_explicit]) + [None] * (15 - n_explicit)
        source = np.asarray(inputs[0])
        batch = source.shape[0]
        max_length = _scalar(inputs[1], _MAX_LENGTH)
        if whisper:
            if source.ndim != 3:
                raise ValueError("Whisper's input features must be 3-D [batch, mels, frames], "
                                 f"got shape {list(source.shape)}")
            if inputs[10] is not None:
                prompt = _prompt(inputs[10])
            elif start >= 0:
                prompt = np.full((batch, 1), start, np.int32)
            else:
                raise ValueError("Whisper BeamSearch needs decoder_input_ids (input 10) or "
                                 "decoder_start_token_id")
            enc = enc_run(source, prompt, *enc_outer(args))
        else:
            source = _prompt(source)
            if inputs[9] is None:   # (only leading pad tokens are masked, as onnxruntime does)
                mask = (np.cumsum(source != pad, axis=1) > 0).astype(np.int32)
            else:
                mask = np.asarray(inputs[9], np.int32)
            prompt = np.full((batch, 1), start, np.int32)
            enc = enc_run(source, mask, prompt, *enc_outer(args))
        prompt_len = prompt.shape[1]
        beams, n_return, params = _beam_params(inputs, prompt_len, max_length,
                                               _scalar(inputs[2], 0), setup)
        if whisper:
            params["temperature"] = _scalar(inputs[14], 1.0, float)
            if _scalar(inputs[11], 0) == 1 and stamps["beginning_timestamp"] >= 0:
                params["timestamps"] = _Timestamps(
                    eos=eos, start=start, translate=stamps["translate"],
                    transcribe=stamps["transcribe"], start_of_lm=stamps["start_of_lm"],
                    no_timestamps=stamps["no_timestamps"],
                    beginning=stamps["beginning_timestamp"])
        rows = batch * beams
        sequences = np.full((rows, max_length), pad, np.int32)
        sequences[:, :prompt_len] = np.repeat(prompt, beams, axis=0)
        state = _Beams(sequences, prompt_len, batch, beams, max_length, params, node)
        vocab = vocab_attr if vocab_attr > 0 else None

        def next_ids(tokens: np.ndarray) -> np.ndarray:
            if layout.whole_sequence:
                return np.ascontiguousarray(state.sequences[:, :state.length])
            return tokens.reshape(rows, 1)

        if prompt_len + 1 < max_length:   # (as onnxruntime: nothing is generated otherwise)
            first = np.repeat(np.asarray(enc[0]), beams, axis=0)
            tokens, sources, _ = state.advance(_next_logits(first, rows, vocab))
            feeds = [next_ids(tokens)]
            if layout.has_ids:
                feeds.append(np.repeat(source, beams, axis=0))
            if layout.has_mask:
                feeds.append(np.repeat(mask, beams, axis=0))
            if layout.has_hidden:
                feeds.append(np.repeat(np.asarray(enc[1]), beams, axis=0))
            feeds += [np.repeat(np.asarray(v), beams, axis=0) for v in enc[2:]]
            dec_outer = outer(args)
            n_self = 2 * layout.layers
            while state.length < max_length:
                outs = run(*feeds, *dec_outer)
                tokens, sources, done = state.advance(_next_logits(outs[0], rows, vocab))
                if done:
                    break
                if state.length < max_length:
                    feeds[0] = next_ids(tokens)
                    past = outs[1:1 + n_self]
                    if beams > 1:
                        past = [np.asarray(p)[sources] for p in past]
                    feeds[layout.first_past:layout.first_past + n_self] = past
        return state.finish(n_return)

    return kernel


def _score_step(hyps: list[_Hypotheses], sequences: np.ndarray, length: int, top: np.ndarray,
                top_beam: np.ndarray, top_token: np.ndarray, beams: int, eos: int, pad: int,
                early_stopping: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """onnxruntime's BeamSearchScorer.Process: each batch's next beams (score, token, source
    row) from its ``2 * beams`` candidates, finished hypotheses set aside."""
    batch = len(hyps)
    scores = np.zeros(batch * beams, np.float32)
    tokens = np.full(batch * beams, pad, np.int32)
    sources = np.zeros(batch * beams, np.int64)
    k = 2 * beams
    flat_top = top.reshape(-1)
    for b, h in enumerate(hyps):
        base = b * beams
        if h.done:
            sources[base:base + beams] = 0
            continue
        used = 0
        for j in range(k):
            token = int(top_token[b, j])
            score = top[b, j]
            row = base + int(top_beam[b, j])
            if token == eos:
                if j >= beams:
                    continue
                h.add(sequences[row, :length], score)
            else:
                scores[base + used] = score
                tokens[base + used] = token
                sources[base + used] = row
                used += 1
            if used == beams:
                break
        if used != beams:
            raise KernelExecutionError("BeamSearch: fewer candidates than beams (vocabulary "
                                       "smaller than 2 * num_beams?)")
        if len(h.items) < beams:
            continue
        if not early_stopping:
            # onnxruntime reads the best running score at offset b * beams of the candidates
            # (not b * 2 * beams): the same slice is read here, for the same answers.
            best = flat_top[b * beams:b * beams + k].max()
            if h.can_improve(best, length):
                continue
        h.done = True
    return scores, tokens, sources


@op(["GreedySearch", "Sampling"], since=1, domain=MS, predicate=_greedy_predicate)
def make_greedy_search(node: NodeView, ctx: ProviderContext):
    """GreedySearch takes the arg-max of each step's processed logits; Sampling draws from
    them after onnxruntime's top-p filter (:class:`_Sampler`)."""
    run, outer, graph, eos, pad, no_repeat = _setup(node, ctx)
    n_explicit = len(node.inputs)
    sampling = node.op_type == "Sampling"
    temperature = float(node.attr("temperature", 1.0)) if sampling else 1.0

    def kernel(*args):
        inputs, decoder, ids, max_length, min_length = _start(args, n_explicit, 9, run,
                                                              outer, graph)
        batch, prompt_len = ids.shape
        repetition_penalty = _scalar(inputs[3], 1.0, float)
        _check_lengths(prompt_len, max_length, repetition_penalty)
        sampler = _Sampler(node, _scalar(inputs[8], 0)) if sampling else None
        feeds, lengths = decoder.first_feeds(ids, inputs[6], pad, 1)
        positions = lengths.reshape(batch, 1).astype(np.int32)
        sequences = np.full((batch, max_length), pad, np.int32)
        sequences[:, :prompt_len] = ids
        ended = np.zeros(batch, bool)
        vocab = _vocab(decoder, node)
        processors = None
        length = prompt_len
        step = 0
        while length < max_length:
            outs = decoder(feeds)
            step += 1
            scores = _next_logits(outs[0], batch, vocab)
            if processors is None:
                processors = _Processors(
                    repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat,
                    vocab_mask=inputs[4], prefix_vocab_mask=inputs[5], min_length=min_length,
                    eos_token_id=eos, batch_size=batch, vocab_size=scores.shape[1],
                    temperature=temperature)
            processors(scores, sequences[:, :length], step)
            if sampler is not None:
                sampler.presence(scores, inputs[7])
                tokens = sampler(scores)
            else:
                tokens = scores.argmax(axis=1).astype(np.int32)
            ended |= tokens == eos
            tokens[ended] = pad
            sequences[:, length] = tokens
            length += 1
            if ended.all() or length >= max_length:
                break
            if step > 1:
                positions = positions + 1
            feeds = decoder.next_feeds(feeds, tokens, positions, outs[1:1 + decoder.n_past])
        return sequences

    return kernel


class _MinStd:
    """C++'s ``std::default_random_engine`` as libstdc++ defines it (``minstd_rand0``:
    x = x * 16807 mod 2^31 - 1), with ``uniform_real_distribution<double>(0, 1)`` over it as
    libstdc++ computes it (two draws of 31 bits make the 53 of a double): onnxruntime's
    Sampling draws from this, seeded with its ``seed`` input, so the same seed gives the same
    tokens here."""

    _M = 2147483647
    _R = float(_M - 1)   # (max - min + 1 of an engine whose outputs are 1 .. 2^31 - 2)

    def __init__(self, seed: int) -> None:
        s = seed % self._M
        self.x = s if s else 1

    def _next(self) -> int:
        self.x = self.x * 16807 % self._M
        return self.x

    def uniform(self) -> float:
        total = float(self._next() - 1) + float(self._next() - 1) * self._R
        u = total / (self._R * self._R)
        return u if u < 1.0 else float(np.nextafter(1.0, 0.0))


class _Sampler:
    """onnxruntime's Sampling step on ``scores [batch, vocab]``: the presence penalty as it
    applies it, the top-p filter over the scores' softmax in ascending order (``custom``: in
    descending order, its other rule), then one draw per row from the filtered scores'
    distribution, as its Multinomial draws (double cumulative sums of exp, upper bound)."""

    def __init__(self, node: NodeView, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"Sampling's seed must be >= 0, got {seed}")
        self.top_p = np.float32(node.attr("top_p", 0.0))
        self.filter_value = np.float32(node.attr("filter_value", -np.inf))
        self.keep = int(node.attr("min_tokens_to_keep", 0))
        self.penalty = np.float32(node.attr("presence_penalty", 0.0))
        self.custom = int(node.attr("custom", 0)) != 0
        self.rng = _MinStd(seed)

    def presence(self, scores: np.ndarray, mask: Any) -> None:
        """onnxruntime subtracts every ``mask[i] * penalty`` from the first score (its loop
        never moves its pointer); so is it done here."""
        if mask is None or self.penalty == 0:
            return
        first = scores.reshape(-1)[:1]
        for m in np.asarray(mask).reshape(-1):
            if m:
                first -= np.float32(m) * self.penalty

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        vocab = scores.shape[1]
        tokens = np.empty(scores.shape[0], np.int32)
        for b, row in enumerate(scores):
            order = np.argsort(-row if self.custom else row, kind="stable")
            ranked = row[order]
            probs = np.exp(ranked - ranked.max(), dtype=np.float32)
            cum = np.cumsum(probs * (np.float32(1) / probs.sum(dtype=np.float32)),
                            dtype=np.float32)
            if self.custom:
                # (cum[0] alone decides position 1; then cum[j] decides j + 1)
                drop = np.flatnonzero(cum[:vocab - 1] > self.top_p) + 1
            else:
                limit = vocab - self.keep
                drop = np.flatnonzero(cum[:max(limit, 1)] <= 1 - self.top_p)
            row[order[drop[drop < vocab]]] = self.filter_value
            finite = np.isfinite(row)
            top = row[finite].max() if finite.any() else np.float32(np.finfo(np.float32).min)
            weights = np.where(finite, np.exp(row.astype(np.float64) - float(top)), 0.0)
            cdf = np.cumsum(weights)
            pick = self.rng.uniform() * cdf[-1]
            tokens[b] = min(int(np.searchsorted(cdf, pick, side="right")), vocab - 1)
        return tokens
