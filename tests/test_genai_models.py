"""LLMs as onnxruntime-genai's model builder writes them, run in onnxplex against onnxruntime.

The builder (``python -m onnxruntime_genai.models.builder``) is how most LLMs reach ONNX for
onnxruntime-genai: com.microsoft GroupQueryAttention with the rotary embedding inside it,
SkipSimplifiedLayerNormalization, MatMulNBits for int4 weights, and a KV cache of inputs and
outputs. A two-layer Llama (fp32 and int4) and Gemma-2 (fp32) with random weights (built here
with transformers, their tokenizer with tokenizers: no hub) go through the builder for the
CPU; a prompt of 10 tokens and two decoding steps (the presents fed back as the past) must
give onnxruntime's logits and presents. Before GroupQueryAttention had a kernel, no such
model loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import onnxplex

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_genai")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

LAYERS, KV_HEADS, HEAD = 2, 2, 16


WINDOW = 8   # Gemma-2's sliding window (its local layers' KV cache capacity)
ARCHS = {"llama": ("LlamaConfig", "LlamaForCausalLM", {}),
         "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"sliding_window": WINDOW})}


def _hf_model(path, arch: str):
    config, model, extra = ARCHS[arch]
    torch.manual_seed(0)
    cfg = getattr(transformers, config)(hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=LAYERS, num_attention_heads=4,
                                        num_key_value_heads=KV_HEADS, head_dim=HEAD,
                                        vocab_size=256, max_position_embeddings=128, **extra)
    getattr(transformers, model)(cfg).save_pretrained(path)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(256)},
                                                           unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1",
                                         eos_token="t2", pad_token="t0").save_pretrained(path)
    return path


@pytest.mark.parametrize("arch, precision", [("llama", "fp32"), ("llama", "int4"),
                                             ("gemma2", "fp32")])
def test_builder_model_matches_onnxruntime(arch, precision, tmp_path):
    """Gemma-2 adds the logit softcap and local layers whose KV cache is a buffer of the
    window's capacity (GroupQueryAttention's sliding_window_cache)."""
    hf_model = _hf_model(tmp_path / "hf", arch)
    out = tmp_path / precision
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                           str(hf_model), "-o", str(out), "-p", precision, "-e", "cpu"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    path = str(out / "model.onnx")
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    sess = onnxplex.InferenceSession(path)
    assert {p.provider for p in sess.get_provider_assignment().partitions} == {"cpu_mlas"}
    names = [o.name for o in ref.get_outputs()]
    prompt = np.array([[5, 17, 3, 99, 42, 8, 9, 11, 12, 13]], np.int64)   # (past the window)
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    for i in ref.get_inputs():
        if i.name.startswith("past_key_values"):
            capacity = WINDOW if i.shape[2] == "past_sliding_length" else 0
            feeds[i.name] = np.zeros((1, KV_HEADS, capacity, HEAD), np.float32)
    # int4: MatMulNBits at accuracy level 4 rounds the activations to 8 bits in both engines
    # (before cpu_mlas did so, up to 5e-3 apart on logits of magnitude ~0.5)
    tol = 1e-5
    for step in range(3):
        want = ref.run(None, feeds)
        got = sess.run(None, feeds)
        for name, g, w in zip(names, got, want):
            assert g.shape == w.shape, name
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"step {step} {name}")
        total = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": np.array([[7]], np.int64),
                 "attention_mask": np.ones((1, total), np.int64)}
        for i in ref.get_inputs():
            if i.name.startswith("past_key_values"):
                feeds[i.name] = want[names.index(i.name.replace("past_key_values", "present"))]
