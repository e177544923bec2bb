"""BeamSearch over a GPT decoder exported by torch (causal attention over the past keys and
values, the attention mask growing each step, learned positions), against onnxruntime: the
decoder in the layout onnxruntime's convert_generation gives it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import onnxplex

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

VOCAB, WIDTH, HEADS, LAYERS = 50, 32, 4, 2
HEAD = WIDTH // HEADS


def _decoder_graph(tmp_path):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
            self.out = torch.nn.Linear(WIDTH, WIDTH)
            self.norm = torch.nn.LayerNorm(WIDTH)
            self.ff = torch.nn.Linear(WIDTH, WIDTH)

        def forward(self, x, past, mask):   # x [B, S, D], past [2, B, H, P, d], mask [B, T]
            b, s, _ = x.shape
            q, k, v = (t.view(b, s, HEADS, HEAD).transpose(1, 2)
                       for t in self.qkv(self.norm(x)).split(WIDTH, -1))
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
            t = k.shape[2]
            keep = torch.ones(s, t, dtype=torch.bool).tril(t - s)[None, None] \
                & (mask[:, None, None, :] > 0)
            att = (q @ k.transpose(-1, -2) / HEAD ** 0.5).masked_fill(~keep, -1e4).softmax(-1)
            x = x + self.out((att @ v).transpose(1, 2).reshape(b, s, WIDTH))
            return x + torch.tanh(self.ff(x)), torch.stack([k, v])

    class Gpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(VOCAB, WIDTH)
            self.positions = torch.nn.Embedding(64, WIDTH)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(LAYERS)])
            self.head = torch.nn.Linear(WIDTH, VOCAB)

        def forward(self, input_ids, position_ids, attention_mask, past_0, past_1):
            x = self.tokens(input_ids.long()) + self.positions(position_ids.long())
            x, p0 = self.blocks[0](x, past_0, attention_mask)
            x, p1 = self.blocks[1](x, past_1, attention_mask)
            return self.head(x) * 3, p0, p1

    import onnx

    torch.manual_seed(0)
    model = Gpt().eval()
    b, s = 2, 5
    args = (torch.randint(3, VOCAB, (b, s), dtype=torch.int32),
            torch.arange(s, dtype=torch.int32).repeat(b, 1), torch.ones(b, s, dtype=torch.int32),
            torch.zeros(2, b, HEADS, 0, HEAD), torch.zeros(2, b, HEADS, 0, HEAD))
    names = ["input_ids", "position_ids", "attention_mask", "past_0", "past_1"]
    axes = {"input_ids": {0: "b", 1: "s"}, "position_ids": {0: "b", 1: "s"},
            "attention_mask": {0: "b", 1: "t"}, "past_0": {1: "b", 3: "p"},
            "past_1": {1: "b", 3: "p"}, "logits": {0: "b", 1: "s"},
            "present_0": {1: "b", 3: "t"}, "present_1": {1: "b", 3: "t"}}
    path = tmp_path / "decoder.onnx"
    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17,
                      input_names=names, output_names=["logits", "present_0", "present_1"],
                      dynamic_axes=axes)
    return onnx.load(str(path)).graph


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # (the TorchScript exporter's)
def test_beam_search_over_a_torch_exported_gpt_decoder(tmp_path):
    inputs = ["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences",
              "length_penalty", "repetition_penalty"]
    types = {"input_ids": (TP.INT32, ["batch", "len"]), "length_penalty": (TP.FLOAT, [1]),
             "repetition_penalty": (TP.FLOAT, [1])}
    node = helper.make_node("BeamSearch", inputs, ["sequences", "sequences_scores"],
                            domain="com.microsoft", decoder=_decoder_graph(tmp_path),
                            eos_token_id=2, pad_token_id=1, model_type=0, early_stopping=0)
    graph = helper.make_graph([node], "beam_search", [
        helper.make_tensor_value_info(n, *types.get(n, (TP.INT32, [1]))) for n in inputs], [
        helper.make_tensor_value_info("sequences", TP.INT32, None),
        helper.make_tensor_value_info("sequences_scores", TP.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    ours = onnxplex.InferenceSession(data)
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ids = np.array([[5, 9, 11, 4, 7], [1, 1, 3, 8, 12]], np.int32)   # (the second padded)
    ended = False
    for beams, n_return in [(1, 1), (4, 2), (6, 3)]:
        feeds = {"input_ids": ids, "max_length": np.array([20], np.int32),
                 "min_length": np.array([0], np.int32), "num_beams": np.array([beams], np.int32),
                 "num_return_sequences": np.array([n_return], np.int32),
                 "length_penalty": np.array([1.0], np.float32),
                 "repetition_penalty": np.array([1.0], np.float32)}
        (seq, score), (want, want_score) = ours.run(None, feeds), theirs.run(None, feeds)
        np.testing.assert_array_equal(seq, want)
        np.testing.assert_allclose(score, want_score, rtol=1e-5, atol=1e-6)
        ended |= bool((want[:, :, -1] == 1).any())
    assert ended   # (a hypothesis ended before max_length: the eos path ran)
