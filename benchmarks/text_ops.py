"""Text ops side by side: skl2onnx's TfidfVectorizer / CountVectorizer graphs and their
TfIdfVectorizer and Tokenizer nodes alone, in onnxplex (cpu_mlas) and onnxruntime.

    python benchmarks/text_ops.py [--runs 40] [--threads 1] [--max-features 5000]

A seeded synthetic corpus (Zipf-distributed pseudo-words, 20-80 words a document, some
capitals and punctuation) trains a word TfidfVectorizer (ngram_range (1, 2)) and a char
CountVectorizer (ngram_range (1, 3)), both capped at ``--max-features`` n-grams, converted by
skl2onnx with its defaults. Timed at batch 1 and batch 1000: the whole model, its
TfIdfVectorizer node alone (fed the [B, T] tokens its Tokenizer writes) and its Tokenizer
node alone. Both engines run the same inputs alternately, ``--runs`` times each (a third of
that at batch 1000), after two warm-up runs; the figure is the ratio of median latencies,
onnxplex / onnxruntime (below 1 is faster), with the medians in ms. Outputs are compared
first (rtol 1e-4, atol 1e-5). onnxruntime's StringNormalizer gets locale C.UTF-8 (its default,
en_US.UTF-8, is often not installed; the case mapping is the same). The machine is shared:
only the ratios mean anything.

cpu_mlas runs these nodes natively when ``_mlas_native`` is built (StringNormalizer's case
change of ASCII strs, the Tokenizer's character-class runs, TfIdfVectorizer's counts; see
providers/cpu_mlas/src/register_text.cpp); ``ONNXPLEX_MLAS_NATIVE=0`` times the Python /
numpy paths instead. The TF-IDF model's "whole model" rows also hold its IDF Mul and L2
Normalizer over the dense [B, max_features] output, most of its time at batch 1000.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import onnxplex


def corpus(n_docs: int, n_words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = sorted({"".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(n_words)})
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    docs = []
    for _ in range(n_docs):
        picked = rng.choice(len(words), rng.integers(20, 81), p=p)
        toks = [words[i].capitalize() if rng.random() < 0.1 else words[i] for i in picked]
        for i in range(len(toks) - 1):
            if rng.random() < 0.08:
                toks[i] += rng.choice([",", ".", ";", "!", "?"])
        docs.append(" ".join(toks))
    return docs


def convert(estimator, docs: list[str]) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import StringTensorType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(docs)
        return convert_sklearn(estimator, initial_types=[("text", StringTensorType([None, 1]))],
                               target_opset=17)


def for_ort(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "StringNormalizer" and not any(a.name == "locale" for a in n.attribute):
            n.attribute.append(helper.make_attribute("locale", "C.UTF-8"))
    return m


def single_node(model: onnx.ModelProto, op_type: str) -> onnx.ModelProto:
    """The model's one ``op_type`` node alone, its input and output as graph input and output."""
    node = next(n for n in model.graph.node if n.op_type == op_type)
    types = {v.name: v.type for v in list(model.graph.value_info) + list(model.graph.input)
             + list(model.graph.output)}
    out_type = onnx.TensorProto.FLOAT if op_type == "TfIdfVectorizer" else onnx.TensorProto.STRING

    def info(name: str, elem: int) -> onnx.ValueInfoProto:
        if name in types:
            v = onnx.ValueInfoProto(name=name)
            v.type.CopyFrom(types[name])
            return v
        return helper.make_tensor_value_info(name, elem, None)

    graph = helper.make_graph([node], op_type, [info(node.input[0], onnx.TensorProto.STRING)],
                              [info(node.output[0], out_type)])
    return helper.make_model(graph, opset_imports=list(model.opset_import),
                             ir_version=model.ir_version)


def sessions(model: onnx.ModelProto, threads: int):
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    ours = onnxplex.InferenceSession(model.SerializeToString(), so, providers=["cpu_mlas"])
    report = ours.get_provider_assignment().report()
    assert "onnx reference fallback" not in report, report
    oso = ort.SessionOptions()
    oso.intra_op_num_threads = threads
    oso.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(for_ort(model).SerializeToString(), oso,
                               providers=["CPUExecutionProvider"])
    return ours, ref


def timed(ours, ref, feeds: dict, runs: int) -> tuple[float, float]:
    got, want = ours.run(None, feeds), ref.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        if g.dtype == object:
            assert g.shape == w.shape and (g == w).all()
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    ours.run(None, feeds)
    ref.run(None, feeds)
    t_ours, t_ref = [], []
    for _ in range(runs):
        for sess, acc in ((ours, t_ours), (ref, t_ref)):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            acc.append(time.perf_counter() - t0)
    return statistics.median(t_ours) * 1e3, statistics.median(t_ref) * 1e3


def main() -> None:
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-features", type=int, default=5000)
    args = ap.parse_args()
    docs = corpus(3000, 4000)
    models = {
        "tfidf word (1,2)": convert(TfidfVectorizer(ngram_range=(1, 2),
                                                    max_features=args.max_features), docs),
        "count char (1,3)": convert(CountVectorizer(analyzer="char", ngram_range=(1, 3),
                                                    max_features=args.max_features), docs),
    }
    print(f"threads {args.threads}; ratio = onnxplex / onnxruntime median latency (ms)")
    print(f"{'model':<18} {'part':<16} {'batch':>5} {'ratio':>7} {'onnxplex':>10} {'ort':>10}")
    for name, model in models.items():
        full = sessions(model, args.threads)
        tok_model = single_node(model, "Tokenizer")
        tfidf_model = single_node(model, "TfIdfVectorizer")
        parts = {"whole model": full, "Tokenizer": sessions(tok_model, args.threads),
                 "TfIdfVectorizer": sessions(tfidf_model, args.threads)}
        n_grams = len(next(a for n in model.graph.node if n.op_type == "TfIdfVectorizer"
                           for a in n.attribute if a.name == "ngram_indexes").ints)
        for batch in (1, 1000):
            text = np.array(docs[:batch], dtype=object).reshape(-1, 1)
            # the Tokenizer's own input (normalized) and the TfIdfVectorizer's (tokens), as
            # onnxruntime computes them in the whole model
            tok_in = for_ort(model)
            tok_in.graph.output.extend([onnx.ValueInfoProto(name=n.input[0])
                                        for n in model.graph.node
                                        if n.op_type in ("Tokenizer", "TfIdfVectorizer")])
            mids = ort.InferenceSession(tok_in.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(
                [o.name for o in tok_in.graph.output[-2:]], {"text": text})
            feeds = {"whole model": {"text": text},
                     "Tokenizer": {tok_model.graph.input[0].name: mids[0]},
                     "TfIdfVectorizer": {tfidf_model.graph.input[0].name: mids[1]}}
            runs = args.runs if batch == 1 else max(3, args.runs // 3)
            for part, (ours, ref) in parts.items():
                a, b = timed(ours, ref, feeds[part], runs)
                print(f"{name:<18} {part:<16} {batch:>5} {a / b:>7.2f} {a:>10.3f} {b:>10.3f}"
                      + (f"   ({n_grams} n-grams, tokens {mids[1].shape})"
                         if part == "TfIdfVectorizer" else ""))


if __name__ == "__main__":
    main()
