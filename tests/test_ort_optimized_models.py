"""Transformers as onnxruntime's own tools leave them, run in onnxplex against onnxruntime.

The recipe of onnxruntime's BERT tutorials: export (torch.onnx, TorchScript exporter), fuse
with ``onnxruntime.transformers.optimizer.optimize_model`` (com.microsoft Attention,
EmbedLayerNormalization, SkipLayerNormalization, BiasGelu / FastGelu), then either quantize
dynamically (``quantize_dynamic``: QAttention, QEmbedLayerNormalization) or convert to
float16. Small BERT, DistilBERT and GPT-2 models with random weights (transformers, eager
attention so the fusions match). Before this, the optimized BERTs did not load
(EmbedLayerNormalization had no kernel), nor did their quantized forms (QAttention,
QEmbedLayerNormalization).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import onnxplex

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime.transformers.optimizer")


def _model(arch: str):
    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=300,
                                      n_positions=64)
        cls, names, kind = transformers.GPT2Model, ["input_ids", "attention_mask"], "gpt2"
    else:
        config, cls = {"bert": (transformers.BertConfig, transformers.BertModel),
                       "distilbert": (transformers.DistilBertConfig,
                                      transformers.DistilBertModel)}[arch]
        cfg = (config(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=300)
               if arch == "distilbert" else
               config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, vocab_size=300))
        names, kind = ["input_ids", "attention_mask"], "bert"
        if arch == "bert":
            names.append("token_type_ids")
    cfg._attn_implementation = "eager"   # (the optimizer's fusions match eager attention)
    model = cls(cfg).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, *args):
            return self.m(**dict(zip(names, args))).last_hidden_state

    ids = torch.randint(3, 300, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 9:] = 0
    args = (ids, mask, torch.zeros(2, 12, dtype=torch.int64))[:len(names)]
    return LastHidden(), args, names, kind


@pytest.mark.parametrize("arch", ["bert", "distilbert", "gpt2"])
def test_optimized_quantized_and_fp16_models_match_onnxruntime(arch, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    module, args, names, kind = _model(arch)
    src = tmp_path / "model.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, src, input_names=names, opset_version=17,
                          dynamo=False, dynamic_axes={n: {0: "b", 1: "s"} for n in names})
        opt = optimize_model(str(src), model_type=kind, num_heads=4, hidden_size=64,
                             opt_level=1)
        fused = tmp_path / "fused.onnx"
        opt.save_model_to_file(str(fused))
        quantized = tmp_path / "quantized.onnx"
        quantize_dynamic(fused, quantized, weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": 1})
        opt.convert_float_to_float16(keep_io_types=True)
        half = tmp_path / "fp16.onnx"
        opt.save_model_to_file(str(half))
    if kind == "bert":   # (the fusions this test is for did happen)
        import onnx

        def ops(path):
            return {n.op_type for n in onnx.load(str(path)).graph.node}
        assert {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization"} <= ops(fused)
        assert {"QAttention", "QEmbedLayerNormalization"} <= ops(quantized)
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    for path, tol in ((fused, 1e-5), (quantized, 1e-4), (half, 1e-2)):
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]
                                    ).run(None, feeds)
        sess = onnxplex.InferenceSession(str(path))
        assert {p.provider for p in sess.get_provider_assignment().partitions} == {"cpu_mlas"}
        got = sess.run(None, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol, err_msg=path.name)


def test_onnxplex_fuses_the_raw_eager_export_itself(tmp_path):
    """The same BERT export, not fused by onnxruntime's tool: onnxplex's own attention fusion
    takes every layer (it missed them: onnx's inference named each Reshape's head count anew,
    and the fusion wants Q's and K's to be one; the load now sizes them)."""
    module, args, names, _ = _model("bert")
    src = tmp_path / "model.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, src, input_names=names, opset_version=17,
                          dynamo=False, dynamic_axes={n: {0: "b", 1: "s"} for n in names})
    sess = onnxplex.InferenceSession(str(src))
    fused = [n.op_type for n in sess.model.nodes if n.domain == "com.microsoft"]
    assert fused.count("MultiHeadAttention") + fused.count("Attention") == 2   # (2 layers)
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(sess.run(None, feeds)[0], want[0], rtol=1e-4, atol=1e-5)
