"""The model zoo's registry: standard architectures with seeded random weights, ready to export.

    from benchmarks.zoo import models
    entry = models.REGISTRY["resnet18"]
    module = entry.make_module()           # torch.manual_seed(0), then build, eval mode
    inputs = entry.make_inputs()           # {onnx input name: torch.Tensor}, ordered
    models.export(entry, "out/resnet18.onnx")

Every entry (a :class:`ZooModel`) names the torch module builder, its example inputs, the
exporter (``"dynamo"``: ``torch.onnx.export(..., dynamo=True)``; ``"torchscript"``:
``torch.onnx.export(..., dynamo=False)``), the output names, the dynamic axes and the opset.
Nothing is downloaded: torchvision models are built with ``weights=None`` and transformers
models from a config (the default one or one sized like the named architecture; many are cut
to 2-4 layers to keep the export fast and the files modest: the ``note`` of each entry says
so). ``benchmarks/zoo/build.py`` writes the ONNX files and the inputs, ``benchmarks/zoo/run.py``
compares onnxplex with onnxruntime on them.

Requirements: ``torch`` for everything; ``transformers`` for the ``needs=("transformers",)``
entries; ``torchvision`` for the ``needs=("torchvision",)`` ones. A torchvision whose C++
extension does not load beside the installed torch (e.g. PyPI's CUDA wheel next to a CPU
torch, "operator torchvision::nms does not exist") is still usable: :func:`torchvision`
declares the extension's operator schemas itself and gives ``nms`` and ``roi_align``
pure-torch CPU kernels, so the Python model code imports and the detector traces to ONNX
NonMaxSuppression / RoiAlign through torchvision's own symbolics. If torchvision is not
installed in the environment, point ``ONNXPLEX_ZOO_SITE`` at a directory that holds it (an
unzipped wheel, or ``pip install --no-deps --target DIR torchvision==<match>``): it is added to
``sys.path`` only when torchvision is needed, so the environment itself stays untouched.

The cheapest entries (``tiny_cnn``, ``gru_bi``, ``lstm_bi``, ``unet``) need torch only; the
smoke test ``tests/test_zoo_smoke.py`` builds them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 0
DYNAMO_OPSET = 18
TORCHSCRIPT_OPSET = 17


@dataclass(frozen=True)
class ZooModel:
    """One architecture of the zoo."""

    name: str
    build: Callable[[], Any]  # () -> torch.nn.Module (eval mode), called after manual_seed
    inputs: Callable[[], dict[str, Any]]  # () -> {input name: torch.Tensor}, in call order
    exporter: str  # "dynamo" or "torchscript"
    outputs: tuple[str, ...]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    opset: int | None = None  # None: DYNAMO_OPSET or TORCHSCRIPT_OPSET by exporter
    needs: tuple[str, ...] = ()  # extra packages: "torchvision", "transformers"
    family: str = ""
    note: str = ""

    @property
    def target_opset(self) -> int:
        if self.opset is not None:
            return self.opset
        return DYNAMO_OPSET if self.exporter == "dynamo" else TORCHSCRIPT_OPSET

    def make_module(self):
        import torch

        torch.manual_seed(SEED)
        module = self.build()
        module.eval()
        return module

    def make_inputs(self) -> dict[str, Any]:
        import torch

        torch.manual_seed(SEED + 1)
        return self.inputs()


REGISTRY: dict[str, ZooModel] = {}


def _register(entry: ZooModel) -> ZooModel:
    if entry.name in REGISTRY:
        raise ValueError(f"duplicate zoo entry {entry.name!r}")
    if entry.exporter not in ("dynamo", "torchscript"):
        raise ValueError(f"{entry.name}: unknown exporter {entry.exporter!r}")
    REGISTRY[entry.name] = entry
    return entry


# --------------------------------------------------------------------------------------------
# torchvision, with a fallback for an extension that does not load
# --------------------------------------------------------------------------------------------

_TV_SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align": "(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                 "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward": "(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
                           "SymInt pooled_width, SymInt batch_size, SymInt channels, "
                           "SymInt height, SymInt width, int sampling_ratio, bool aligned) "
                           "-> Tensor",
    "ps_roi_align": "(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                    "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward": "(Tensor grad, Tensor rois, Tensor channel_mapping, "
                              "float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
                              "int sampling_ratio, SymInt batch_size, SymInt channels, "
                              "SymInt height, SymInt width) -> Tensor",
    "roi_pool": "(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                "SymInt pooled_width) -> (Tensor, Tensor)",
    "_roi_pool_backward": "(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, "
                          "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
                          "SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool": "(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                   "SymInt pooled_width) -> (Tensor, Tensor)",
    "_ps_roi_pool_backward": "(Tensor grad, Tensor rois, Tensor channel_mapping, "
                             "float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
                             "SymInt batch_size, SymInt channels, SymInt height, SymInt width) "
                             "-> Tensor",
    "qroi_align": "(Tensor input, Tensor rois, float input_scale, int input_zero_point, "
                  "float rois_scale, int rois_zero_point, float spatial_scale, "
                  "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, bool aligned) "
                  "-> Tensor",
    "deform_conv2d": "(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
                     "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
                     "SymInt dilation_h, SymInt dilation_w, SymInt groups, "
                     "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward": "(Tensor grad, Tensor input, Tensor weight, Tensor offset, "
                               "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, "
                               "SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
                               "SymInt dilation_w, SymInt groups, SymInt offset_groups, "
                               "bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
}
_TV_LIBS: list[Any] = []  # keeps the torch.library.Library objects alive


def _nms_cpu(dets, scores, iou_threshold: float):
    """Greedy NMS in plain torch (torchvision's CPU kernel's result: kept indices by score)."""
    import torch

    if dets.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=dets.device)
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = scores.argsort(descending=True)
    suppressed = torch.zeros(dets.shape[0], dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        xx1 = torch.maximum(x1[i], x1)
        yy1 = torch.maximum(y1[i], y1)
        xx2 = torch.minimum(x2[i], x2)
        yy2 = torch.minimum(y2[i], y2)
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _roi_align_cpu(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                   aligned):
    from torchvision.ops.roi_align import _roi_align

    return _roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                      aligned)


def _declare_torchvision_ops() -> None:
    import torch

    if _TV_LIBS:
        return
    lib = torch.library.Library("torchvision", "DEF")
    for op, schema in _TV_SCHEMAS.items():
        lib.define(op + schema)
    impl = torch.library.Library("torchvision", "IMPL", "CPU")
    impl.impl("nms", _nms_cpu)
    impl.impl("roi_align", _roi_align_cpu)
    _TV_LIBS.extend([lib, impl])


def torchvision():
    """Import torchvision, working around an extension that does not load (module docstring)."""
    try:
        import torchvision as tv

        return tv
    except ImportError:
        site = os.environ.get("ONNXPLEX_ZOO_SITE")
        if not site or site in sys.path:
            raise
        sys.path.append(site)
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[mod]
    import torch

    if not hasattr(torch.ops.torchvision, "nms"):
        _declare_torchvision_ops()
    import torchvision as tv
    import torchvision.ops  # noqa: F401 - loads the modules patched below

    extension = sys.modules["torchvision.extension"]
    if not extension._has_ops():
        # nms / roi_align now have kernels (above); let the ops call them so they trace to
        # torchvision::nms / torchvision::roi_align (ONNX NonMaxSuppression / RoiAlign).
        # (torchvision.ops.roi_align is the function; the module is in sys.modules.)
        def has_ops():
            return True

        extension._has_ops = has_ops
        sys.modules["torchvision.ops.roi_align"]._has_ops = has_ops
    return tv


def _tv(fn_name: str, **kwargs):
    def build():
        import torch

        model = getattr(torchvision().models, fn_name)(weights=None, **kwargs)
        head = getattr(getattr(model, "heads", None), "head", None)
        if head is not None:  # ViT zero-initialises its head: the logits would all be 0
            torch.nn.init.normal_(head.weight, std=0.02)
        return model

    return build


def _tv_detection(fn_name: str, **kwargs):
    def build():
        import torch

        det = getattr(torchvision().models.detection, fn_name)(
            weights=None, weights_backbone=None, **kwargs)

        class Detector(torch.nn.Module):
            """Takes one [3, H, W] image (a batch of one), returns boxes, scores, labels."""

            def __init__(self):
                super().__init__()
                self.det = det

            def forward(self, image):
                out = self.det([image])[0]
                return out["boxes"], out["scores"], out["labels"]

        return Detector()

    return build


def _tv_segmentation(fn_name: str, **kwargs):
    def build():
        import torch

        seg = getattr(torchvision().models.segmentation, fn_name)(
            weights=None, weights_backbone=None, **kwargs)

        class Segmenter(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.seg = seg

            def forward(self, x):
                return self.seg(x)["out"]

        return Segmenter()

    return build


def _tv_video(fn_name: str, **kwargs):
    def build():
        return getattr(torchvision().models.video, fn_name)(weights=None, **kwargs)

    return build


def _image(size: int = 224, batch: int = 1):
    def make():
        import torch

        return {"x": torch.randn(batch, 3, size, size)}

    return make


_BATCH = {"x": {0: "batch"}}

for _name, _kw, _note in [
    ("resnet18", {}, ""),
    ("resnet50", {}, ""),
    ("mobilenet_v2", {}, ""),
    ("mobilenet_v3_small", {}, ""),
    ("mobilenet_v3_large", {}, ""),
    ("efficientnet_b0", {}, ""),
    ("shufflenet_v2_x1_0", {}, ""),
    ("squeezenet1_0", {}, ""),
    ("googlenet", {"aux_logits": False, "init_weights": True}, "no auxiliary heads"),
    ("densenet121", {}, ""),
    ("regnet_y_400mf", {}, ""),
    ("mnasnet0_5", {}, ""),
    ("convnext_tiny", {}, ""),
    ("vit_b_16", {}, "full ViT-B/16 (86M parameters), head re-initialised N(0, 0.02)"),
    ("swin_t", {}, ""),
]:
    _register(ZooModel(
        name=_name, build=_tv(_name, **_kw), inputs=_image(), exporter="dynamo",
        outputs=("logits",), dynamic_axes={**_BATCH, "logits": {0: "batch"}},
        needs=("torchvision",), family="vision-classification", note=_note))

_register(ZooModel(
    name="lraspp_mobilenet_v3_large", build=_tv_segmentation("lraspp_mobilenet_v3_large"),
    inputs=_image(320), exporter="dynamo", outputs=("out",),
    dynamic_axes={**_BATCH, "out": {0: "batch"}}, needs=("torchvision",),
    family="vision-segmentation", note="21 classes, bilinear Resize to the input size"))
_register(ZooModel(
    name="deeplabv3_mobilenet_v3_large", build=_tv_segmentation("deeplabv3_mobilenet_v3_large"),
    inputs=_image(320), exporter="dynamo", outputs=("out",),
    dynamic_axes={**_BATCH, "out": {0: "batch"}}, needs=("torchvision",),
    family="vision-segmentation", note="21 classes, aux head off, ASPP + Resize"))


def _detector_image():
    import torch

    return {"image": torch.rand(3, 320, 320)}


def _detector(name: str, note: str, **kwargs) -> None:
    """A torchvision detector on one 320 x 320 image: boxes, scores, labels (TorchScript
    exporter: torchvision's NMS and RoiAlign symbolics)."""
    _register(ZooModel(
        name=name, build=_tv_detection(name, **kwargs), inputs=_detector_image,
        exporter="torchscript", outputs=("boxes", "scores", "labels"),
        dynamic_axes={"boxes": {0: "detections"}, "scores": {0: "detections"},
                      "labels": {0: "detections"}},
        opset=17, needs=("torchvision",), family="vision-detection", note=note))


_detector("fasterrcnn_mobilenet_v3_large_320_fpn",
          "one 3x320x320 image; NonMaxSuppression, RoiAlign, TopK; box_score_thresh 0 so "
          "random weights still give detections (up to 100)", box_score_thresh=0.0)


# --------------------------------------------------------------------------------------------
# torch.nn only (the smoke test's entries)
# --------------------------------------------------------------------------------------------

def _tiny_cnn():
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.Conv2d(16, 32, 1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


_register(ZooModel(
    name="tiny_cnn", build=_tiny_cnn, inputs=_image(32, batch=2), exporter="dynamo",
    outputs=("logits",), dynamic_axes={**_BATCH, "logits": {0: "batch"}},
    family="vision-classification", note="3 convs (one depthwise), 32x32 input: smoke test"))


def _rnn(kind: str, hidden: int, layers: int):
    def build():
        import torch
        from torch import nn

        cls = nn.LSTM if kind == "lstm" else nn.GRU

        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = cls(64, hidden, num_layers=layers, bidirectional=True,
                               batch_first=False)
                self.head = nn.Linear(2 * hidden, 16)

            def forward(self, x):
                y, _ = self.rnn(x)
                return torch.log_softmax(self.head(y), dim=-1)

        return Tagger()

    return build


def _sequence(seq: int = 50, batch: int = 2, width: int = 64):
    def make():
        import torch

        return {"x": torch.randn(seq, batch, width)}

    return make


_SEQ_AXES = {"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"}}
_register(ZooModel(
    name="gru_bi", build=_rnn("gru", 64, 1), inputs=_sequence(), exporter="torchscript",
    outputs=("y",), dynamic_axes=_SEQ_AXES, family="rnn",
    note="bidirectional GRU 64->64 + Linear, seq 50, batch 2 (ONNX GRU)"))
_register(ZooModel(
    name="lstm_bi", build=_rnn("lstm", 128, 2), inputs=_sequence(), exporter="torchscript",
    outputs=("y",), dynamic_axes=_SEQ_AXES, family="rnn",
    note="2-layer bidirectional LSTM 64->128 + Linear, seq 50, batch 2 (ONNX LSTM)"))


# --------------------------------------------------------------------------------------------
# transformers, built from configs
# --------------------------------------------------------------------------------------------

def _hf(config_cls: str, model_cls: str, **config):
    def make_config():
        import transformers

        return getattr(transformers, config_cls)(**config)

    def build():
        import transformers

        cfg = make_config()
        cfg._attn_implementation = "eager"
        return getattr(transformers, model_cls)(cfg)

    return build


def _wrap(build_inner: Callable[[], Any], arg_names: tuple[str, ...], out_keys: tuple[str, ...],
          **fixed):
    def build():
        import torch

        inner = build_inner()

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, *args):
                out = self.inner(**dict(zip(arg_names, args)), **fixed)
                return tuple(out[k] for k in out_keys)

        return Wrapper()

    return build


def _tokens(batch: int, seq: int, vocab: int, names=("input_ids", "attention_mask"), seed=0):
    def make():
        import torch

        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        out = {"input_ids": ids}
        if "attention_mask" in names:
            mask = torch.ones(batch, seq, dtype=torch.int64)
            mask[-1, seq - seq // 4:] = 0  # padding at the end of the last row
            out["attention_mask"] = mask
        if "token_type_ids" in names:
            out["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.int64)
        return out

    return make


def _text_axes(names, outs):
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes.update({o: {0: "batch", 1: "seq"} for o in outs})
    return axes


def _encoder(name, config_cls, model_cls, config, note, names=("input_ids", "attention_mask"),
             outs=("last_hidden_state",), batch=2, seq=128):
    _register(ZooModel(
        name=name,
        build=_wrap(_hf(config_cls, model_cls, **config), names, outs),
        inputs=_tokens(batch, seq, config.get("vocab_size", 1000), names),
        exporter="dynamo", outputs=outs, dynamic_axes=_text_axes(names, outs),
        needs=("transformers",), family="text-encoder", note=note))


_encoder("bert", "BertConfig", "BertModel", {"num_hidden_layers": 4},
         "BERT-base width (768, 12 heads, 30522 vocab), 4 of 12 layers; batch 2, seq 128",
         names=("input_ids", "attention_mask", "token_type_ids"))
_encoder("distilbert", "DistilBertConfig", "DistilBertModel", {"n_layers": 4},
         "DistilBERT width (768, 12 heads), 4 of 6 layers; batch 2, seq 128")
_encoder("roberta", "RobertaConfig", "RobertaModel",
         {"num_hidden_layers": 4, "vocab_size": 50265, "max_position_embeddings": 514,
          "pad_token_id": 1, "type_vocab_size": 1},
         "RoBERTa-base width (768, 12 heads, 50265 vocab), 4 of 12 layers; batch 2, seq 128")
_encoder("albert", "AlbertConfig", "AlbertModel",
         {"num_hidden_layers": 4, "hidden_size": 768, "num_attention_heads": 12,
          "intermediate_size": 3072, "embedding_size": 128},
         "ALBERT-base sizes (768, 128 embedding, shared layer weights), 4 layers; seq 128")
_encoder("electra_small", "ElectraConfig", "ElectraModel",
         {"embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4,
          "intermediate_size": 1024, "num_hidden_layers": 12},
         "ELECTRA-small discriminator config (256 wide, 12 layers); batch 2, seq 128")


def _clip():
    import torch
    import transformers

    cfg = transformers.CLIPConfig(
        text_config={"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4,
                     "num_attention_heads": 4, "vocab_size": 49408,
                     "max_position_embeddings": 77},
        vision_config={"hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 4,
                       "num_attention_heads": 6, "image_size": 224, "patch_size": 32},
        projection_dim=256)
    cfg._attn_implementation = "eager"
    model = transformers.CLIPModel(cfg)

    class Clip(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.clip = model

        def forward(self, input_ids, attention_mask, pixel_values):
            out = self.clip(input_ids=input_ids, attention_mask=attention_mask,
                            pixel_values=pixel_values)
            return out.logits_per_image, out.text_embeds, out.image_embeds

    return Clip()


def _clip_inputs():
    import torch

    toks = _tokens(3, 16, 49408)()
    return {**toks, "pixel_values": torch.randn(2, 3, 224, 224)}


_register(ZooModel(
    name="clip", build=_clip, inputs=_clip_inputs, exporter="dynamo",
    outputs=("logits_per_image", "text_embeds", "image_embeds"),
    dynamic_axes={"input_ids": {0: "texts"}, "attention_mask": {0: "texts"},
                  "pixel_values": {0: "images"}, "logits_per_image": {0: "images", 1: "texts"},
                  "text_embeds": {0: "texts"}, "image_embeds": {0: "images"}},
    needs=("transformers",), family="multimodal",
    note="CLIPModel, 4-layer text tower (256 wide) and 4-layer ViT-B/32-like vision tower "
         "(384 wide, 224px); 3 texts x 16 tokens, 2 images"))


def _t5():
    import torch
    import transformers

    cfg = transformers.T5Config(d_model=512, d_ff=2048, num_heads=8, d_kv=64, num_layers=2,
                                num_decoder_layers=2, vocab_size=32128)
    cfg._attn_implementation = "eager"
    cfg.use_cache = False
    model = transformers.T5ForConditionalGeneration(cfg)

    class T5(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t5 = model

        def forward(self, input_ids, attention_mask, decoder_input_ids):
            out = self.t5(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids, use_cache=False)
            return out.logits, out.encoder_last_hidden_state

    return T5()


def _seq2seq_inputs(vocab: int):
    """An encoder-decoder's inputs: batch 2, 64 source tokens (the last row padded), 16
    decoder tokens."""
    def make():
        import torch

        toks = _tokens(2, 64, vocab)()
        g = torch.Generator().manual_seed(5)
        return {**toks, "decoder_input_ids": torch.randint(0, vocab, (2, 16), generator=g)}

    return make


_register(ZooModel(
    name="t5_small", build=_t5, inputs=_seq2seq_inputs(32128), exporter="torchscript",
    outputs=("logits", "encoder_hidden_states"),
    dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                  "decoder_input_ids": {0: "batch", 1: "dec_seq"},
                  "logits": {0: "batch", 1: "dec_seq"},
                  "encoder_hidden_states": {0: "batch", 1: "seq"}},
    needs=("transformers",), family="encoder-decoder",
    note="T5-small width (512, 8 heads, 32128 vocab), 2+2 of 6+6 layers, no cache; "
         "encoder seq 64, decoder seq 16"))


# decoder-only LLMs ---------------------------------------------------------------------------

_LLM_CONFIGS = {
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {"hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8,
                  "num_hidden_layers": 4, "vocab_size": 50304, "rotary_pct": 0.25,
                  "max_position_embeddings": 2048},
                 "Pythia-70m sizes (512 wide, 8 heads, 50304 vocab, rotary 25%), 4 of 6 layers"),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              {"hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
               "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 32000,
               "max_position_embeddings": 2048},
              "Llama architecture (RMSNorm, SwiGLU, rotary, GQA 8q/4kv heads), 512 wide, "
              "4 layers, 32000 vocab"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_layer": 4},
             "GPT-2 small width (768, 12 heads, 50257 vocab), 4 of 12 layers"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              {"hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
               "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 32000,
               "max_position_embeddings": 2048},
              "Qwen2 architecture (QKV bias, GQA 8q/2kv heads), 512 wide, 4 layers, 32000 vocab"),
    "bloom": ("BloomConfig", "BloomForCausalLM",
              {"hidden_size": 512, "n_head": 8, "n_layer": 4, "vocab_size": 32000},
              "BLOOM architecture (ALiBi position bias, fused QKV, embedding LayerNorm), "
              "512 wide, 4 layers, 32000 vocab"),
    "phi": ("PhiConfig", "PhiForCausalLM",
            {"hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8,
             "num_hidden_layers": 4, "vocab_size": 32000, "partial_rotary_factor": 0.5},
            "Phi architecture (parallel attention and MLP, partial rotary, GELU), 512 wide, "
            "4 layers, 32000 vocab"),
}
_LLM_BATCH, _LLM_SEQ, _LLM_PAST = 1, 64, 63


def _llm_config(family: str):
    import transformers

    config_cls, _, kwargs, _ = _LLM_CONFIGS[family]
    cfg = getattr(transformers, config_cls)(**kwargs)
    cfg._attn_implementation = "eager"
    return cfg


def _llm_nocache(family: str):
    def build():
        import torch
        import transformers

        cfg = _llm_config(family)
        cfg.use_cache = False
        model = getattr(transformers, _LLM_CONFIGS[family][1])(cfg)

        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lm = model

            def forward(self, input_ids, attention_mask):
                return self.lm(input_ids=input_ids, attention_mask=attention_mask,
                               use_cache=False).logits

        return LM()

    return build


def _llm_kv(family: str):
    """One decode step: input_ids [B, 1], attention_mask [B, past + 1], past keys/values per
    layer; outputs logits and the present keys/values (the DynamicCache is built inside)."""

    def build():
        import torch
        import transformers

        cfg = _llm_config(family)
        model = getattr(transformers, _LLM_CONFIGS[family][1])(cfg)
        n_layers = cfg.num_hidden_layers

        class LMStep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lm = model

            def forward(self, input_ids, attention_mask, *past):
                cache = transformers.DynamicCache(config=cfg)
                for i in range(n_layers):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                out = self.lm(input_ids=input_ids, attention_mask=attention_mask,
                              past_key_values=cache, use_cache=True)
                present = []
                for layer in out.past_key_values.layers:
                    present.extend([layer.keys, layer.values])
                return (out.logits, *present)

        return LMStep()

    return build


def _llm_kv_inputs(family: str):
    def make():
        import torch

        cfg = _llm_config(family)
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        g = torch.Generator().manual_seed(3)
        out = {"input_ids": torch.randint(0, cfg.vocab_size, (_LLM_BATCH, 1), generator=g),
               "attention_mask": torch.ones(_LLM_BATCH, _LLM_PAST + 1, dtype=torch.int64)}
        for i in range(cfg.num_hidden_layers):
            for kv in ("key", "value"):
                out[f"past_{kv}_{i}"] = torch.randn(_LLM_BATCH, heads, _LLM_PAST, head_dim,
                                                    generator=g)
        return out

    return make


def _llm_kv_names(family: str, n_layers: int):
    past = [f"past_{kv}_{i}" for i in range(n_layers) for kv in ("key", "value")]
    present = [f"present_{kv}_{i}" for i in range(n_layers) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: "total"},
            "logits": {0: "batch"}}
    axes.update({n: {0: "batch", 2: "past"} for n in past})
    axes.update({n: {0: "batch", 2: "total"} for n in present})
    return tuple(["logits", *present]), axes


for _family, (_cc, _mc, _cfg, _note) in _LLM_CONFIGS.items():
    _register(ZooModel(
        name=_family, build=_llm_nocache(_family),
        inputs=_tokens(_LLM_BATCH, _LLM_SEQ, _cfg.get("vocab_size", 50257)),
        exporter="dynamo", outputs=("logits",),
        dynamic_axes=_text_axes(("input_ids", "attention_mask"), ("logits",)),
        needs=("transformers",), family="decoder-llm",
        note=f"{_note}; prefill without cache, batch {_LLM_BATCH}, seq {_LLM_SEQ}"))

for _family in ("llama", "gpt_neox"):
    _outs, _axes = _llm_kv_names(_family, _LLM_CONFIGS[_family][2]["num_hidden_layers"])
    _register(ZooModel(
        name=f"{_family}_kv", build=_llm_kv(_family), inputs=_llm_kv_inputs(_family),
        exporter="dynamo", outputs=_outs, dynamic_axes=_axes,
        needs=("transformers",), family="decoder-llm",
        note=f"{_LLM_CONFIGS[_family][3]}; one decode step with a KV cache of {_LLM_PAST} "
             "positions (past_key_i/past_value_i in, present_* out)"))


# speech -------------------------------------------------------------------------------------

def _whisper_encoder():
    import torch
    import transformers

    cfg = transformers.WhisperConfig(
        d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
        decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536,
        num_mel_bins=80, max_source_positions=1500)
    cfg._attn_implementation = "eager"
    enc = transformers.WhisperModel(cfg).get_encoder()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def forward(self, input_features):
            return self.enc(input_features=input_features).last_hidden_state

    return Encoder()


def _mel():
    import torch

    return {"input_features": torch.randn(1, 80, 3000)}


_register(ZooModel(
    name="whisper_tiny_encoder", build=_whisper_encoder, inputs=_mel, exporter="dynamo",
    outputs=("last_hidden_state",),
    dynamic_axes={"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}},
    needs=("transformers",), family="speech",
    note="Whisper-tiny encoder config (384 wide, 6 heads, 4 layers, 80 mels), 30 s of "
         "features [1, 80, 3000]"))


def _wav2vec2():
    import torch
    import transformers

    cfg = transformers.Wav2Vec2Config(num_hidden_layers=4, do_stable_layer_norm=False,
                                      feat_extract_norm="group")
    cfg._attn_implementation = "eager"
    model = transformers.Wav2Vec2Model(cfg)

    class W2V(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w2v = model

        def forward(self, input_values):
            return self.w2v(input_values=input_values).last_hidden_state

    return W2V()


def _wave():
    import torch

    return {"input_values": torch.randn(1, 16000)}


_register(ZooModel(
    name="wav2vec2", build=_wav2vec2, inputs=_wave, exporter="dynamo",
    outputs=("last_hidden_state",),
    dynamic_axes={"input_values": {0: "batch", 1: "samples"},
                  "last_hidden_state": {0: "batch", 1: "frames"}},
    needs=("transformers",), family="speech",
    note="wav2vec2-base config (conv feature extractor, 768 wide), 4 of 12 layers; 1 s at "
         "16 kHz"))



# breadth, round two: architectures none of the above covers ---------------------------------
# (grouped 32-way and asymmetric 1x7 convs, fused MBConv, block attention, 3-D convs, an SSD
# head, transposed convs, encoder-decoder text, disentangled attention, efficient attention
# with a mix-FFN, unfolded patches, ALiBi, parallel blocks, relative position bias, GRN)

for _name, _kw, _size, _note in [
    ("inception_v3", {"aux_logits": False, "init_weights": False}, 299,
     "no auxiliary head, torch's default init (its own truncated normal makes logits of "
     "~1e12); 299px (1x7 / 7x1 convs, average pools that count padding)"),
    ("resnext50_32x4d", {}, 224, "32-group 3x3 convs"),
    ("efficientnet_v2_s", {}, 224, "fused MBConv stages, squeeze-excite, SiLU; 224px"),
    ("maxvit_t", {}, 224, "MBConv + block and grid attention with relative position bias"),
]:
    _register(ZooModel(
        name=_name, build=_tv(_name, **_kw), inputs=_image(_size), exporter="dynamo",
        outputs=("logits",), dynamic_axes={**_BATCH, "logits": {0: "batch"}},
        needs=("torchvision",), family="vision-classification", note=_note))


def _clip_frames():
    import torch

    return {"x": torch.randn(1, 3, 8, 112, 112)}


_register(ZooModel(
    name="r3d_18", build=_tv_video("r3d_18"), inputs=_clip_frames, exporter="dynamo",
    outputs=("logits",), dynamic_axes={**_BATCH, "logits": {0: "batch"}},
    needs=("torchvision",), family="vision-video",
    note="ResNet-3D-18 (Conv3d, BatchNorm3d, 3-D pooling); 8 frames of 112 x 112"))

_detector("ssdlite320_mobilenet_v3_large",
          "SSDlite head (depthwise-separable box and class predictors), batched NMS; "
          "score_thresh 0 so random weights still give detections", score_thresh=0.0)


def _unet():
    import torch
    from torch import nn

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                             nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1),
                             nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        """Three levels down (max pools), three up (stride-2 transposed convs, skip concat)."""

        def __init__(self, widths=(32, 64, 128, 256)):
            super().__init__()
            self.down = nn.ModuleList([block(3, widths[0])] + [
                block(a, b) for a, b in zip(widths[:-1], widths[1:])])
            self.up = nn.ModuleList([nn.ConvTranspose2d(b, a, 2, stride=2)
                                     for a, b in zip(widths[:-1], widths[1:])][::-1])
            self.fuse = nn.ModuleList([block(2 * a, a) for a in widths[:-1]][::-1])
            self.head = nn.Conv2d(widths[0], 2, 1)

        def forward(self, x):
            skips = []
            for i, down in enumerate(self.down):
                x = down(x if i == 0 else nn.functional.max_pool2d(x, 2))
                skips.append(x)
            for up, fuse, skip in zip(self.up, self.fuse, skips[-2::-1]):
                x = fuse(torch.cat([up(x), skip], dim=1))
            return self.head(x)

    return UNet()


_register(ZooModel(
    name="unet", build=_unet, inputs=_image(128), exporter="dynamo", outputs=("mask",),
    dynamic_axes={**_BATCH, "mask": {0: "batch"}}, family="vision-segmentation",
    note="a small U-Net written here (32-256 channels, stride-2 ConvTranspose2d, skip "
         "concatenation); 128px"))


def _bart():
    import torch
    import transformers

    cfg = transformers.BartConfig(d_model=512, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=8, decoder_attention_heads=8,
                                  encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=32000,
                                  max_position_embeddings=256)
    cfg._attn_implementation = "eager"
    cfg.use_cache = False
    model = transformers.BartForConditionalGeneration(cfg)

    class Bart(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bart = model

        def forward(self, input_ids, attention_mask, decoder_input_ids):
            return self.bart(input_ids=input_ids, attention_mask=attention_mask,
                             decoder_input_ids=decoder_input_ids, use_cache=False).logits

    return Bart()


_register(ZooModel(
    name="bart", build=_bart, inputs=_seq2seq_inputs(32000), exporter="dynamo", outputs=("logits",),
    dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                  "decoder_input_ids": {0: "batch", 1: "target"},
                  "logits": {0: "batch", 1: "target"}},
    needs=("transformers",), family="text-seq2seq",
    note="BART encoder-decoder (512 wide, 2 + 2 layers, 32000 vocab), cross attention, "
         "learned positions; 64 source and 16 target tokens, batch 2"))

_encoder("deberta_v2", "DebertaV2Config", "DebertaV2Model",
         {"num_hidden_layers": 4, "hidden_size": 768, "num_attention_heads": 12,
          "intermediate_size": 3072, "vocab_size": 32000, "relative_attention": True,
          "position_buckets": 256, "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1,
          "position_biased_input": False, "norm_rel_ebd": "layer_norm", "share_att_key": True},
         "DeBERTa-v2/v3 style (768, disentangled c2p/p2c attention over log buckets), 4 layers, "
         "32000 vocab; batch 2, seq 128")


def _pixels(size: int):
    def make():
        import torch

        return {"pixel_values": torch.randn(1, 3, size, size)}

    return make


def _hf_vision(name, config_cls, model_cls, config, size, out_key, note, family):
    _register(ZooModel(
        name=name, build=_wrap(_hf(config_cls, model_cls, **config), ("pixel_values",),
                               (out_key,)),
        inputs=_pixels(size), exporter="dynamo", outputs=(out_key,),
        dynamic_axes={"pixel_values": {0: "batch"}, out_key: {0: "batch"}},
        needs=("transformers",), family=family, note=note))


_hf_vision("segformer", "SegformerConfig", "SegformerForSemanticSegmentation", {}, 256,
           "logits", "SegFormer-B0 config (efficient attention with spatial reduction, "
           "mix-FFN depthwise convs, all-MLP decoder); 256px", "vision-segmentation")
_hf_vision("mobilevit", "MobileViTConfig", "MobileViTForImageClassification",
           {"initializer_range": 0.1}, 256,
           "logits", "MobileViT-S config (MobileNetV2 blocks, transformers over unfolded "
           "2x2 patches), initializer range 0.1 (at 0.02 the logits are ~1e-41); 256px",
           "vision-classification")
_hf_vision("beit", "BeitConfig", "BeitForImageClassification",
           {"num_hidden_layers": 4, "use_relative_position_bias": True,
            "use_mean_pooling": True, "num_labels": 1000}, 224, "logits",
           "BEiT-base width, 4 of 12 layers, relative position bias per layer; 224px",
           "vision-transformer")
_hf_vision("convnextv2", "ConvNextV2Config", "ConvNextV2ForImageClassification",
           {"depths": [2, 2, 6, 2], "hidden_sizes": [40, 80, 160, 320], "num_labels": 1000},
           224, "logits", "ConvNeXt-V2 atto sizes (7x7 depthwise, global response "
           "normalisation); 224px", "vision-classification")


def names() -> list[str]:
    return list(REGISTRY)


def available(entry: ZooModel) -> str | None:
    """None if the entry's extra packages import, else the reason they don't."""
    for pkg in entry.needs:
        try:
            if pkg == "torchvision":
                torchvision()
            else:
                __import__(pkg)
        except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
            return f"{pkg}: {type(exc).__name__}: {exc}"
    return None


def dynamic_shapes(entry: ZooModel, inputs: dict[str, Any], module) -> tuple:
    """``entry.dynamic_axes`` of the inputs as torch.export ``dynamic_shapes`` (Dim.DYNAMIC:
    the exporter names the dims and infers relations such as ``total = past + 1``). A forward
    taking ``*args`` gets one tuple for all of them."""
    import inspect

    import torch

    specs = tuple({axis: torch.export.Dim.DYNAMIC for axis in entry.dynamic_axes.get(name, {})}
                  or None for name in inputs)
    params = list(inspect.signature(module.forward).parameters.values())
    if params and params[-1].kind is inspect.Parameter.VAR_POSITIONAL:
        fixed = len(params) - 1
        return (*specs[:fixed], specs[fixed:])
    return specs


def export(entry: ZooModel, path, module=None, inputs: dict[str, Any] | None = None) -> None:
    """Export ``entry`` to ``path`` with its exporter, opset, names and dynamic axes."""
    import torch

    module = entry.make_module() if module is None else module
    inputs = entry.make_inputs() if inputs is None else inputs
    args = tuple(inputs.values())
    kwargs: dict[str, Any] = {
        "input_names": list(inputs), "output_names": list(entry.outputs),
        "opset_version": entry.target_opset,
    }
    with torch.no_grad():
        if entry.exporter == "dynamo":
            if entry.dynamic_axes:
                kwargs["dynamic_shapes"] = dynamic_shapes(entry, inputs, module)
            torch.onnx.export(module, args, str(path), dynamo=True, external_data=False,
                              optimize=True, verbose=False, **kwargs)
        else:
            if entry.dynamic_axes:
                kwargs["dynamic_axes"] = entry.dynamic_axes
            torch.onnx.export(module, args, str(path), dynamo=False, do_constant_folding=True,
                              **kwargs)
