"""BeamSearch and GreedySearch (com.microsoft) over a GPT-style decoder, against onnxruntime.

The decoder is built here with onnx.helper in the form onnxruntime's ``convert_generation``
writes (``input_ids``, ``position_ids``, ``attention_mask``, ``past_0`` -> ``logits``,
``present_0``): token and position embeddings, the new keys/values appended to the past, and
logits from the token plus the mask-weighted sum of every key so far, so that the prompt's
padding, the positions, the beams' reordered past states and the mask all change the tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnxplex

ort = pytest.importorskip("onnxruntime")

VOCAB, HIDDEN, HEADS, HEAD = 23, 8, 2, 4
EOS, PAD = 2, 1


def _decoder(seed: int = 0):
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("tok_emb", rng.standard_normal((VOCAB, HIDDEN))),
        ("pos_emb", rng.standard_normal((64, HIDDEN)) * 0.5),
        ("w_out", rng.standard_normal((HIDDEN, VOCAB)) * 1.5),
        ("w_ctx", rng.standard_normal((HIDDEN, VOCAB)) * 0.7),
    )] + [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("kv_shape", [0, 0, HEADS, HEAD]), ("ax0", [0]), ("ax13", [1, 3]),
        ("flat", [0, 1, HIDDEN]))]
    nodes = [
        helper.make_node("Gather", ["tok_emb", "input_ids"], ["te"]),
        helper.make_node("Gather", ["pos_emb", "position_ids"], ["pe"]),
        helper.make_node("Add", ["te", "pe"], ["h"]),                      # [B, S, 8]
        helper.make_node("Reshape", ["h", "kv_shape"], ["h4"]),            # [B, S, H, D]
        helper.make_node("Transpose", ["h4"], ["kv"], perm=[0, 2, 1, 3]),  # [B, H, S, D]
        helper.make_node("Unsqueeze", ["kv", "ax0"], ["kv1"]),
        helper.make_node("Neg", ["kv1"], ["kv2"]),
        helper.make_node("Concat", ["kv1", "kv2"], ["new"], axis=0),       # [2, B, H, S, D]
        helper.make_node("Concat", ["past_0", "new"], ["present_0"], axis=3),
        helper.make_node("Gather", ["present_0", "zero"], ["keys"], axis=0),  # [B, H, T, D]
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TP.FLOAT),  # [B, T]
        helper.make_node("Unsqueeze", ["maskf", "ax13"], ["mask4"]),        # [B, 1, T, 1]
        helper.make_node("Mul", ["keys", "mask4"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "two"], ["ctx"], keepdims=1),  # [B, H, 1, D]
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),   # [B, 1, H, D]
        helper.make_node("Reshape", ["ctx_t", "flat"], ["ctx_f"]),             # [B, 1, 8]
        helper.make_node("Tanh", ["ctx_f"], ["ctx_a"]),
        helper.make_node("MatMul", ["h", "w_out"], ["l1"]),
        helper.make_node("MatMul", ["ctx_a", "w_ctx"], ["l2"]),
        helper.make_node("Add", ["l1", "l2"], ["logits"]),
    ]
    inits += [numpy_helper.from_array(np.array(0, np.int64), "zero"),
              numpy_helper.from_array(np.array([2], np.int64), "two")]
    return helper.make_graph(
        nodes, "decoder",
        [helper.make_tensor_value_info("input_ids", TP.INT32, ["b", "s"]),
         helper.make_tensor_value_info("position_ids", TP.INT32, ["b", "s"]),
         helper.make_tensor_value_info("attention_mask", TP.INT32, ["b", "t"]),
         helper.make_tensor_value_info("past_0", TP.FLOAT, [2, "b", HEADS, "p", HEAD])],
        [helper.make_tensor_value_info("logits", TP.FLOAT, ["b", "s", VOCAB]),
         helper.make_tensor_value_info("present_0", TP.FLOAT, [2, "b", HEADS, "t", HEAD])],
        inits)


_BEAM_INPUTS = ["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences",
                "length_penalty", "repetition_penalty", "vocab_mask", "prefix_vocab_mask",
                "attention_mask"]
_TYPES = {"input_ids": (TP.INT32, ["batch", "len"]), "max_length": (TP.INT32, [1]),
          "min_length": (TP.INT32, [1]), "num_beams": (TP.INT32, [1]),
          "num_return_sequences": (TP.INT32, [1]), "length_penalty": (TP.FLOAT, [1]),
          "repetition_penalty": (TP.FLOAT, [1]), "vocab_mask": (TP.INT32, [VOCAB]),
          "prefix_vocab_mask": (TP.INT32, ["batch", VOCAB]),
          "attention_mask": (TP.INT32, ["batch", "len"])}


_OUT_TYPES = {"sequences": TP.INT32, "sequences_scores": TP.FLOAT, "scores": TP.FLOAT}


def _wrap(node, types=_TYPES):
    """A model of the one generation ``node``: its named inputs typed by ``types``."""
    graph = helper.make_graph([node], node.op_type, [
        helper.make_tensor_value_info(n, *types[n]) for n in node.input if n], [
        helper.make_tensor_value_info(n, _OUT_TYPES[n], None) for n in node.output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _model(op: str, inputs: list[str], scores: bool = False, **attrs):
    outputs = (["sequences", "sequences_scores"] + (["scores"] if scores else [])
               if op == "BeamSearch" else ["sequences"])
    return _wrap(helper.make_node(op, inputs, outputs, domain="com.microsoft",
                                  decoder=_decoder(), eos_token_id=EOS, pad_token_id=PAD,
                                  model_type=0, **attrs))


def _both(model, feeds):
    data = model.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxplex.InferenceSession(data).run(None, feeds)
    return got, want


def _prompt(batch: int = 2, padded: bool = True) -> np.ndarray:
    ids = np.array([[5, 9, 11, 4, 7], [PAD, PAD, 3, 8, 12], [6, 6, 6, 10, 13]], np.int32)
    if not padded:
        ids[1, :2] = [14, 15]
    return ids[:batch]


def _i32(v):
    return np.array([v], np.int32)


def _f32(v):
    return np.array([v], np.float32)


@pytest.mark.parametrize(("beams", "n_return", "length_penalty", "early", "batch"), [
    (1, 1, 1.0, 0, 2), (2, 1, 1.0, 0, 2), (3, 2, 1.0, 0, 3), (4, 4, 0.6, 0, 2),
    (4, 2, 1.4, 1, 2), (5, 3, 1.0, 0, 1)])
def test_beam_search_matches_onnxruntime(beams, n_return, length_penalty, early, batch):
    inputs = _BEAM_INPUTS[:7]
    model = _model("BeamSearch", inputs, early_stopping=early)
    feeds = {"input_ids": _prompt(batch), "max_length": _i32(16), "min_length": _i32(0),
             "num_beams": _i32(beams), "num_return_sequences": _i32(n_return),
             "length_penalty": _f32(length_penalty), "repetition_penalty": _f32(1.0)}
    (seq, score), (want_seq, want_score) = _both(model, feeds)
    assert seq.shape == (batch, n_return, 16) and seq.dtype == np.int32
    np.testing.assert_array_equal(seq, want_seq)
    np.testing.assert_allclose(score, want_score, rtol=1e-5, atol=1e-5)


def test_beam_search_ends_sequences_at_eos_and_pads_them():
    """The decoder's eos logit raised: hypotheses end early, onnxruntime's padding after."""
    model = _model("BeamSearch", _BEAM_INPUTS[:7])
    graph = model.graph.node[0].attribute[0].g
    w = numpy_helper.to_array(graph.initializer[2]).copy()
    w[:, EOS] += 1.2
    graph.initializer[2].CopyFrom(numpy_helper.from_array(w, "w_out"))
    feeds = {"input_ids": _prompt(3), "max_length": _i32(20), "min_length": _i32(0),
             "num_beams": _i32(3), "num_return_sequences": _i32(3),
             "length_penalty": _f32(1.0), "repetition_penalty": _f32(1.0)}
    (seq, score), (want_seq, want_score) = _both(model, feeds)
    assert (want_seq[:, :, -1] == PAD).any()   # (the case is what it claims)
    np.testing.assert_array_equal(seq, want_seq)
    np.testing.assert_allclose(score, want_score, rtol=1e-5, atol=1e-5)


def test_beam_search_processors_and_scores_output():
    inputs = _BEAM_INPUTS[:9] + ["attention_mask"]
    model = _model("BeamSearch", inputs, scores=True, no_repeat_ngram_size=2)
    mask = np.ones(VOCAB, np.int32)
    mask[[0, 17]] = 0
    prefix = np.ones((2, VOCAB), np.int32)
    prefix[0, 5:12] = 0
    ids = _prompt(2)
    feeds = {"input_ids": ids, "max_length": _i32(14), "min_length": _i32(9),
             "num_beams": _i32(3), "num_return_sequences": _i32(2),
             "length_penalty": _f32(1.0), "repetition_penalty": _f32(1.3),
             "vocab_mask": mask, "prefix_vocab_mask": prefix,
             "attention_mask": (ids != PAD).astype(np.int32)}
    got, want = _both(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    assert got[2].shape == want[2].shape == (14 - 5, 2, 3, VOCAB)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-4)
    assert not np.isin(got[0][:, :, 5:], [0, 17]).any()


@pytest.mark.parametrize("padded", [True, False])
def test_greedy_search_matches_onnxruntime(padded):
    inputs = ["input_ids", "max_length", "min_length", "repetition_penalty"]
    model = _model("GreedySearch", inputs)
    feeds = {"input_ids": _prompt(3, padded), "max_length": _i32(15), "min_length": _i32(3),
             "repetition_penalty": _f32(1.2)}
    (seq,), (want,) = _both(model, feeds)
    assert seq.shape == (3, 15)
    np.testing.assert_array_equal(seq, want)


def test_an_encoder_decoder_beam_search_without_its_encoder_is_declined_by_name():
    model = _model("BeamSearch", _BEAM_INPUTS[:7])
    model.graph.node[0].attribute.append(helper.make_attribute("model_type", 1))
    del model.graph.node[0].attribute[-2]   # (the earlier model_type=0)
    with pytest.raises(onnxplex.PartitionError, match="model_type 1 needs 'encoder'"):
        onnxplex.InferenceSession(model.SerializeToString())


def _t5_graphs(hidden: bool, seed: int = 1, whole_sequence: bool = False):
    """An encoder and a decoder in the form onnxruntime's T5 BeamSearch (model_type 1)
    takes: the encoder's presents seed the decoder's self- and cross-attention pasts; the
    decoder's logits depend on its own tokens so far, the masked encoder states and (with
    ``hidden``) the encoder_hidden_states input."""
    rng = np.random.default_rng(seed)

    def consts():
        return [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
            ("emb", rng.standard_normal((VOCAB, HIDDEN))),
            ("dec_emb", rng.standard_normal((VOCAB, HIDDEN))),
            ("w", rng.standard_normal((HIDDEN, VOCAB)) * 1.5),
        )] + [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
            ("heads", [0, 0, HEADS, HEAD]), ("flat", [0, 1, HIDDEN]), ("ax2", [2]),
            ("ax1", [1]), ("ax13", [1, 3]))]

    def heads(x, out):   # [B, S, 8] -> [B, H, S, D]
        return [helper.make_node("Reshape", [x, "heads"], [out + "_r"]),
                helper.make_node("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3])]

    def pooled(x, out):   # [B, H, T, D] -> [B, 1, 8], summed over T
        return [helper.make_node("ReduceSum", [x, "ax2"], [out + "_s"], keepdims=1),
                helper.make_node("Transpose", [out + "_s"], [out + "_t"], perm=[0, 2, 1, 3]),
                helper.make_node("Reshape", [out + "_t", "flat"], [out])]

    masked_cross = [  # cross keys weighted by the encoder mask
        helper.make_node("Cast", ["encoder_attention_mask"], ["mf"], to=TP.FLOAT),
        helper.make_node("Unsqueeze", ["mf", "ax13"], ["m4"]),
        helper.make_node("Mul", ["ck", "m4"], ["ckm"])]
    i32, f32 = TP.INT32, TP.FLOAT
    enc_nodes = [helper.make_node("Gather", ["emb", "encoder_input_ids"],
                                  ["encoder_hidden_states"]),
                 *heads("encoder_hidden_states", "present_key_cross_0"),
                 helper.make_node("Neg", ["present_key_cross_0"], ["present_value_cross_0"]),
                 helper.make_node("Identity", ["present_key_cross_0"], ["ck"]), *masked_cross,
                 *pooled("ckm", "cross_ctx"),
                 helper.make_node("Gather", ["dec_emb", "decoder_input_ids"], ["de"]),
                 *heads("de", "present_key_self_0"),
                 helper.make_node("Sin", ["present_key_self_0"], ["present_value_self_0"]),
                 helper.make_node("Tanh", ["cross_ctx"], ["cc"]),
                 helper.make_node("Add", ["de", "cc"], ["hsum"]),
                 helper.make_node("MatMul", ["hsum", "w"], ["logits"])]
    encoder = helper.make_graph(enc_nodes, "encoder", [
        helper.make_tensor_value_info("encoder_input_ids", i32, ["b", "s"]),
        helper.make_tensor_value_info("encoder_attention_mask", i32, ["b", "s"]),
        helper.make_tensor_value_info("decoder_input_ids", i32, ["b", 1])], [
        helper.make_tensor_value_info("logits", f32, ["b", 1, VOCAB]),
        helper.make_tensor_value_info("encoder_hidden_states", f32, ["b", "s", HIDDEN]),
        *(helper.make_tensor_value_info(n, f32, ["b", HEADS, "t", HEAD]) for n in (
            "present_key_self_0", "present_value_self_0", "present_key_cross_0",
            "present_value_cross_0"))], consts())
    dec_nodes = [helper.make_node("Gather", ["dec_emb", "input_ids"], ["de"]),
                 *heads("de", "nk"),
                 helper.make_node("Concat", ["past_key_self_0", "nk"], ["present_key_self_0"],
                                  axis=2),
                 helper.make_node("Sin", ["nk"], ["nv"]),
                 helper.make_node("Concat", ["past_value_self_0", "nv"],
                                  ["present_value_self_0"], axis=2),
                 *pooled("present_value_self_0", "self_ctx"),
                 helper.make_node("Identity", ["past_key_cross_0"], ["ck"]), *masked_cross,
                 *pooled("ckm", "cross_ctx"),
                 helper.make_node("Tanh", ["self_ctx"], ["sc"]),
                 helper.make_node("Tanh", ["cross_ctx"], ["cc"]),
                 helper.make_node("Add", ["de", "sc"], ["h1"]),
                 helper.make_node("Add", ["h1", "cc"], ["h2"])]
    if hidden:   # (its shape only: onnxruntime passes the decoder a tensor of the hidden
        # states' shape without copying them, as its exporters' decoders read the cross pasts)
        dec_nodes += [helper.make_node("Shape", ["encoder_hidden_states"], ["hs"], start=1,
                                       end=2),
                      helper.make_node("Cast", ["hs"], ["hsf"], to=TP.FLOAT),
                      helper.make_node("Sin", ["hsf"], ["hm"]),
                      helper.make_node("Add", ["h2", "hm"], ["h3"])]
    dec_nodes.append(helper.make_node("MatMul", ["h3" if hidden else "h2", "w"], ["logits"]))
    dec_inputs = [helper.make_tensor_value_info("input_ids", i32,
                                                ["b", "n" if whole_sequence else 1]),
                  helper.make_tensor_value_info("encoder_attention_mask", i32, ["b", "s"])]
    if hidden:
        dec_inputs.append(helper.make_tensor_value_info("encoder_hidden_states", f32,
                                                        ["b", "s", HIDDEN]))
    dec_inputs += [helper.make_tensor_value_info(n, f32, ["b", HEADS, t, HEAD]) for n, t in (
        ("past_key_self_0", "p"), ("past_value_self_0", "p"), ("past_key_cross_0", "s"),
        ("past_value_cross_0", "s"))]
    rng = np.random.default_rng(seed)   # (the same constants in both graphs)
    decoder = helper.make_graph(dec_nodes, "decoder", dec_inputs, [
        helper.make_tensor_value_info("logits", f32, ["b", 1, VOCAB]),
        helper.make_tensor_value_info("present_key_self_0", f32, ["b", HEADS, "t", HEAD]),
        helper.make_tensor_value_info("present_value_self_0", f32, ["b", HEADS, "t", HEAD])],
        consts())
    return encoder, decoder


@pytest.mark.parametrize(("hidden", "beams", "n_return", "batch", "masked", "whole"), [
    (False, 1, 1, 2, False, False), (False, 3, 2, 3, False, False),
    (True, 4, 4, 2, True, False), (True, 2, 1, 1, False, False), (False, 3, 3, 2, True, True)])
def test_encoder_decoder_beam_search_matches_onnxruntime(hidden, beams, n_return, batch,
                                                         masked, whole):
    """``whole``: the decoder declares input_ids [batch, n], so onnxruntime feeds it every
    token so far at each step instead of the last one."""
    encoder, decoder = _t5_graphs(hidden, whole_sequence=whole)
    inputs = _BEAM_INPUTS[:7] + (["", "", "attention_mask"] if masked else [])
    node = helper.make_node("BeamSearch", inputs, ["sequences", "sequences_scores"],
                            domain="com.microsoft", encoder=encoder, decoder=decoder,
                            eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=0,
                            model_type=1, early_stopping=0)
    model = _wrap(node)
    ids = _prompt(batch)
    ids[0, 3] = PAD   # (unmasked, onnxruntime masks leading pad tokens only)
    feeds = {"input_ids": ids, "max_length": _i32(12), "min_length": _i32(4),
             "num_beams": _i32(beams), "num_return_sequences": _i32(n_return),
             "length_penalty": _f32(0.8), "repetition_penalty": _f32(1.1)}
    if masked:
        feeds["attention_mask"] = (ids != PAD).astype(np.int32)
    (seq, score), (want_seq, want_score) = _both(model, feeds)
    assert seq.shape == (batch, n_return, 12)
    np.testing.assert_array_equal(seq, want_seq)
    np.testing.assert_allclose(score, want_score, rtol=1e-5, atol=1e-5)


# Whisper's special tokens in the toy vocabulary: timestamps are ids 15..22.
START, TRANSLATE, TRANSCRIBE, START_OF_LM, NO_TIMESTAMPS, FIRST_STAMP = 0, 3, 4, 5, 6, 15


def _whisper_graphs(hidden: bool, seed: int = 3):
    """The T5 pair reshaped into Whisper's form: the encoder takes audio features
    [batch, 4, frames] and the decoder prompt, and gives the prompt's logits; the decoder
    has no mask input."""
    encoder, decoder = _t5_graphs(hidden, seed)
    rng = np.random.default_rng(seed + 1)
    enc = helper.make_graph([], "encoder", [], [])
    enc.CopyFrom(encoder)
    del enc.input[:]
    enc.input.extend([
        helper.make_tensor_value_info("encoder_input_ids", TP.FLOAT, ["b", 4, "f"]),
        helper.make_tensor_value_info("decoder_input_ids", TP.INT32, ["b", "l"])])
    kept = [n for n in enc.node if n.output[0] not in ("mf", "m4", "ckm")
            and n.output[0] != "encoder_hidden_states"]
    for n in kept:   # (no mask: the cross keys pass unweighted)
        for i, name in enumerate(n.input):
            if name == "ckm":
                n.input[i] = "ck"
    del enc.node[:]
    enc.node.extend([
        helper.make_node("Transpose", ["encoder_input_ids"], ["feat_t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["feat_t", "w_in"], ["encoder_hidden_states"]), *kept])
    enc.initializer.append(numpy_helper.from_array(
        rng.standard_normal((4, HIDDEN)).astype(np.float32), "w_in"))
    # the prompt's logits: every position's (the beam search reads the last)
    enc.output[0].CopyFrom(helper.make_tensor_value_info("logits", TP.FLOAT,
                                                         ["b", "l", VOCAB]))
    dec = helper.make_graph([], "decoder", [], [])
    dec.CopyFrom(decoder)
    keep_inputs = [i for i in dec.input if i.name != "encoder_attention_mask"]
    del dec.input[:]
    dec.input.extend(keep_inputs)
    kept = [n for n in dec.node if n.output[0] not in ("mf", "m4", "ckm")]
    for n in kept:
        for i, name in enumerate(n.input):
            if name == "ckm":
                n.input[i] = "ck"
    del dec.node[:]
    dec.node.extend(kept)
    return enc, dec


@pytest.mark.parametrize(("op", "hidden", "beams", "stamps", "temperature"), [
    ("WhisperBeamSearch", False, 3, 1, 1.0), ("WhisperBeamSearch", True, 2, 1, 0.7),
    ("WhisperBeamSearch", False, 4, 0, 1.3), ("BeamSearch", True, 3, 0, 1.0)])
def test_whisper_beam_search_matches_onnxruntime(op, hidden, beams, stamps, temperature):
    encoder, decoder = _whisper_graphs(hidden)
    inputs = _BEAM_INPUTS[:7] + ["", "", "", "decoder_input_ids", "logits_processor"]
    if op == "WhisperBeamSearch":   # (BeamSearch's schema stops at logits_processor)
        inputs += ["", "", "temperature"]
    attrs = dict(eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=START,
                 model_type=2, early_stopping=0)
    if op == "WhisperBeamSearch":
        attrs.update(translate_token_id=TRANSLATE, transcribe_token_id=TRANSCRIBE,
                     start_of_lm_token_id=START_OF_LM, no_timestamps_token_id=NO_TIMESTAMPS,
                     beginning_timestamp_token_id=FIRST_STAMP)
    node = helper.make_node(op, inputs, ["sequences", "sequences_scores"],
                            domain="com.microsoft", encoder=encoder, decoder=decoder, **attrs)
    types = dict(_TYPES, input_ids=(TP.FLOAT, ["batch", 4, "frames"]),
                 decoder_input_ids=(TP.INT32, ["batch", "l"]), logits_processor=(TP.INT32, [1]),
                 temperature=(TP.FLOAT, [1]))
    model = _wrap(node, types)
    rng = np.random.default_rng(7)
    feeds = {"input_ids": rng.standard_normal((2, 4, 6)).astype(np.float32),
             "max_length": _i32(14), "min_length": _i32(0), "num_beams": _i32(beams),
             "num_return_sequences": _i32(2), "length_penalty": _f32(1.0),
             "repetition_penalty": _f32(1.0),
             "decoder_input_ids": np.array([[START, 9, TRANSCRIBE]] * 2, np.int32),
             "logits_processor": _i32(stamps)}
    if op == "WhisperBeamSearch":
        feeds["temperature"] = _f32(temperature)
    (seq, score), (want_seq, want_score) = _both(model, feeds)
    assert seq.shape == (2, 2, 14)
    np.testing.assert_array_equal(seq, want_seq)
    np.testing.assert_allclose(score, want_score, rtol=1e-5, atol=1e-5)
    if stamps:
        assert (want_seq[:, :, 3:] >= FIRST_STAMP).any()   # (the rules had work to do)


def test_a_decoder_reading_the_main_graph_s_initializers():
    """convert_generation moves the weights its subgraphs share to the main graph; the
    decoder then reads them from the outer scope."""
    model = _model("BeamSearch", _BEAM_INPUTS[:7])
    dec = model.graph.node[0].attribute[0].g
    moved = [i for i in dec.initializer if i.name in ("tok_emb", "w_out")]
    kept = [i for i in dec.initializer if i.name not in ("tok_emb", "w_out")]
    del dec.initializer[:]
    dec.initializer.extend(kept)
    model.graph.initializer.extend(moved)
    feeds = {"input_ids": _prompt(2), "max_length": _i32(14), "min_length": _i32(0),
             "num_beams": _i32(3), "num_return_sequences": _i32(2),
             "length_penalty": _f32(1.0), "repetition_penalty": _f32(1.0)}
    (seq, score), (want_seq, want_score) = _both(model, feeds)
    np.testing.assert_array_equal(seq, want_seq)
    np.testing.assert_allclose(score, want_score, rtol=1e-5, atol=1e-5)


def test_top_candidates_on_long_rows_keep_onnxruntime_s_order():
    """Rows of beams x a real vocabulary take the partition path: the same columns in the
    same order as a stable sort (largest first, ties to the lower column), ties included."""
    from onnxplex.providers.cpu_mlas.generation import _top_candidates

    rng = np.random.default_rng(0)
    for trial in range(60):
        k = 2 * int(rng.integers(1, 6))
        n = int(rng.integers(4097, 20000))
        x = (rng.integers(-40, 3, (3, n)) if trial % 2 else
             rng.standard_normal((3, n))).astype(np.float32)
        np.testing.assert_array_equal(_top_candidates(x, k),
                                      np.argsort(-x, axis=1, kind="stable")[:, :k])


def test_a_float16_decoder_runs_and_its_scores_are_float16():
    """onnxruntime's CPU BeamSearch refuses float16 models (no kernel; with float32 penalties
    'use float32 model or CUDA'); onnxplex runs them (logits processed in float32) and
    returns the scores in the declared float16. The best sequence's first tokens are the
    float32 model's (fp16 rounding flips no choice there)."""
    def half(model):
        dec = model.graph.node[0].attribute[0].g
        for i, init in enumerate(list(dec.initializer)):
            a = numpy_helper.to_array(init)
            if a.dtype == np.float32:
                dec.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float16),
                                                                    init.name))
        for n in dec.node:
            for a in n.attribute:
                if a.name == "to" and a.i == TP.FLOAT:
                    a.i = TP.FLOAT16
        for v in [*dec.input, *dec.output, *model.graph.input, *model.graph.output]:
            if v.type.tensor_type.elem_type == TP.FLOAT:
                v.type.tensor_type.elem_type = TP.FLOAT16
        return model

    feeds = {"input_ids": _prompt(2), "max_length": _i32(12), "min_length": _i32(0),
             "num_beams": _i32(3), "num_return_sequences": _i32(2)}
    model = half(_model("BeamSearch", _BEAM_INPUTS[:7]))
    data = model.SerializeToString()
    with pytest.raises(Exception, match="float16|implementation"):   # (no fp16 CPU kernel)
        ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {
            **feeds, "length_penalty": np.array([1], np.float16),
            "repetition_penalty": np.array([1], np.float16)})
    seq, score = onnxplex.InferenceSession(data).run(None, {
        **feeds, "length_penalty": np.array([1], np.float16),
        "repetition_penalty": np.array([1], np.float16)})
    assert seq.dtype == np.int32 and seq.shape == (2, 2, 12)
    assert score.dtype == np.float16 and np.isfinite(score).all()
    full = onnxplex.InferenceSession(_model("BeamSearch", _BEAM_INPUTS[:7]).SerializeToString())
    ref, _ = full.run(None, {**feeds, "length_penalty": _f32(1.0),
                             "repetition_penalty": _f32(1.0)})
    np.testing.assert_array_equal(seq[:, 0, :6], ref[:, 0, :6])


@pytest.mark.parametrize(("top_p", "temperature", "custom", "seed"), [
    (0.9, 1.0, 0, 0), (0.6, 0.7, 0, 7), (0.95, 1.3, 0, 123), (0.5, 1.0, 1, 5)])
def test_sampling_matches_onnxruntime_for_a_seed(top_p, temperature, custom, seed):
    """Sampling draws from C++'s default_random_engine as onnxruntime does (reproduced in
    generation._MinStd): the same seed gives the same tokens."""
    inputs = ["input_ids", "max_length", "min_length", "repetition_penalty", "", "",
              "attention_mask", "", "seed"]
    node = helper.make_node("Sampling", inputs, ["sequences"], domain="com.microsoft",
                            decoder=_decoder(), eos_token_id=EOS, pad_token_id=PAD,
                            model_type=0, top_p=top_p, temperature=temperature, custom=custom)
    types = dict(_TYPES, seed=(TP.INT32, [1]))
    model = _wrap(node, types)
    ids = _prompt(3)
    feeds = {"input_ids": ids, "max_length": _i32(20), "min_length": _i32(2),
             "repetition_penalty": _f32(1.1), "attention_mask": (ids != PAD).astype(np.int32),
             "seed": _i32(seed)}
    (seq,), (want,) = _both(model, feeds)
    assert seq.shape == (3, 20)
    np.testing.assert_array_equal(seq, want)


@pytest.mark.parametrize("penalty", [0.5, 2.0])
def test_sampling_presence_penalty_as_onnxruntime_applies_it(penalty):
    """onnxruntime's presence penalty subtracts every mask[i] * penalty from the first score
    only; onnxplex does the same, so the tokens stay onnxruntime's."""
    inputs = ["input_ids", "max_length", "min_length", "repetition_penalty", "", "",
              "attention_mask", "presence_mask", "seed"]
    node = helper.make_node("Sampling", inputs, ["sequences"], domain="com.microsoft",
                            decoder=_decoder(), eos_token_id=EOS, pad_token_id=PAD,
                            model_type=0, top_p=0.9, presence_penalty=penalty)
    types = dict(_TYPES, seed=(TP.INT32, [1]), presence_mask=(TP.INT32, ["batch", VOCAB]))
    model = _wrap(node, types)
    ids = _prompt(3)
    mask = np.zeros((3, VOCAB), np.int32)
    mask[:, [4, 9, 13]] = 1
    mask[1, 20] = 1
    feeds = {"input_ids": ids, "max_length": _i32(16), "min_length": _i32(0),
             "repetition_penalty": _f32(1.0), "attention_mask": (ids != PAD).astype(np.int32),
             "presence_mask": mask, "seed": _i32(3)}
    (seq,), (want,) = _both(model, feeds)
    np.testing.assert_array_equal(seq, want)
