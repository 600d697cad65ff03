"""Export the real-model corpus: `transformers` and plain `torch` models, random weights from
configs (no hub access), written by torch's own ONNX exporters with dynamic batch (and
sequence), plus quantized variants made by `onnxruntime.quantization`, and the same
architectures as PyTorch programs (torch.export, saved as NAME.pt2) for the PyTorch frontend.

    python tools/export_corpus.py [--out DIR] [--only NAME ...] [--list]

Needs torch, transformers, onnxscript (for the dynamo exporter) and onnxruntime; none of them
is a dependency of tcc. Each model is written once to DIR/NAME.onnx (default
`$TCC_CORPUS_DIR`, else `$XDG_CACHE_HOME/tcc/corpus`, else `~/.cache/tcc/corpus`) with a
NAME.json beside it describing its inputs; an export made by this version of the script
(CORPUS_VERSION) is kept, so a rerun only exports what is missing or out of date.
`tests/e2e/test_corpus.py` compiles every model found there and compares it at two shapes
from one pack, in both runtimes, with onnxruntime (ONNX models) or with the program itself
run by torch (.pt2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np


def default_dir() -> Path:
    if os.environ.get("TCC_CORPUS_DIR"):
        return Path(os.environ["TCC_CORPUS_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tcc" / "corpus"


# -- input descriptions (written to NAME.json, read by the tests) ------------------------------
# Each input: name, dtype, dims (ints or a symbolic name: "batch", "seq", "frames"), and how to
# fill it: "normal", "ids:<vocab>" (integers below vocab), "ones".


def text(vocab: int, mask: bool = True) -> list[dict]:
    ins = [{"name": "input_ids", "dtype": "int64", "dims": ["batch", "seq"], "fill": f"ids:{vocab}"}]
    if mask:
        ins.append({"name": "attention_mask", "dtype": "int64", "dims": ["batch", "seq"],
                    "fill": "mask"})
    return ins


def image(size: int, channels: int = 3) -> list[dict]:
    return [{"name": "pixel_values", "dtype": "float32", "dims": ["batch", channels, size, size],
             "fill": "normal"}]


# -- model builders ------------------------------------------------------------------------


def _tiny(**kw):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128)
    base.update(kw)
    return base


def bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=1000, max_position_embeddings=256, **_tiny())), text(1000)


def bert_base():
    """BERT-base's width (hidden 768, 12 heads, FFN 3072) in 2 layers: weights as large as
    real exports have, where the tiny configs' fit in cache."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=1000, max_position_embeddings=256, hidden_size=768,
                     num_hidden_layers=2, num_attention_heads=12, intermediate_size=3072)
    return BertModel(cfg), text(1000)


def gpt2():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=1000, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                     use_cache=False)
    return GPT2Model(cfg), text(1000)


def llama():
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=1000, max_position_embeddings=256, num_key_value_heads=2,
                      use_cache=False, **_tiny())
    return LlamaModel(cfg), text(1000)


def t5_encoder():
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                   use_cache=False)
    return T5EncoderModel(cfg), text(1000)


def vit():
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=32, patch_size=8, **_tiny())
    return ViTModel(cfg, add_pooling_layer=False), image(32)


def swin():
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                     window_size=4)
    return SwinModel(cfg), image(32)


def resnet():
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                       layer_type="basic")
    return ResNetModel(cfg), image(64)


def mobilenet_v2():
    from transformers import MobileNetV2Config, MobileNetV2Model

    # depthwise 3x3 convolutions between pointwise ones, ReLU6 (Clip), TF-style padding
    cfg = MobileNetV2Config(image_size=64, depth_multiplier=0.35)
    return MobileNetV2Model(cfg), image(64)


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                         **_tiny())
    ins = [{"name": "input_values", "dtype": "float32", "dims": ["batch", "frames"],
            "fill": "normal"}]
    return Wav2Vec2Model(cfg), ins


def convnext():
    from transformers import ConvNextConfig, ConvNextModel

    # 4 x 4 patchify stem, 7 x 7 depthwise convs, LayerNorm over channels, GELU
    cfg = ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=64)
    return ConvNextModel(cfg), image(64)


def segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    # overlapping patch embeddings, efficient (spatially reduced) attention, an upsampling
    # decoder
    cfg = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2],
                          hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                          decoder_hidden_size=32, num_labels=5, patch_sizes=[7, 3],
                          strides=[4, 2], mlp_ratios=[2, 2])
    return SegformerForSemanticSegmentation(cfg), image(64)


def whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    # a conv1d stem (the second strided) over log-mel frames, then attention layers
    cfg = WhisperConfig(num_mel_bins=16, d_model=64, encoder_layers=2,
                        encoder_attention_heads=4, encoder_ffn_dim=128,
                        max_source_positions=50)
    ins = [{"name": "input_features", "dtype": "float32", "dims": ["batch", 16, 100],
            "fill": "normal"}]
    return WhisperEncoder(cfg), ins


def bloom():
    from transformers import BloomConfig, BloomModel

    # ALiBi: position biases built from the attention mask's cumulative sum, no position ids
    cfg = BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4, use_cache=False)
    return BloomModel(cfg), text(1000)


def gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXModel

    # rotary embeddings over a quarter of each head, attention and MLP in parallel
    cfg = GPTNeoXConfig(vocab_size=1000, max_position_embeddings=256, use_cache=False,
                        **_tiny())
    return GPTNeoXModel(cfg), text(1000)


def falcon():
    from transformers import FalconConfig, FalconModel

    # multi-query attention (one key/value head for all query heads)
    cfg = FalconConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, use_cache=False)
    return FalconModel(cfg), text(1000)


def mobilevit():
    from transformers import MobileViTConfig, MobileViTModel

    # convolutions, then attention over unfolded patches: the legacy exporter computes the
    # patch grid with Ceil in float, so its reshapes take run-time shapes
    cfg = MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64],
                          neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 160])
    return MobileViTModel(cfg), image(64)


def mpt():
    from transformers import MptConfig, MptModel

    # ALiBi: the legacy exporter slices the bias table with a run-time Slice whose end is
    # INT64_MAX, and its attention arenas get sizes known only at run time
    cfg = MptConfig(vocab_size=1000, d_model=64, n_heads=4, n_layers=2, max_seq_len=256,
                    use_cache=False)
    return MptModel(cfg), text(1000)


def levit():
    from transformers import LevitConfig, LevitModel

    # a stem of stride-2 3 x 3 convs from 3 to 4 channels, hardswish, attention with
    # learned biases, subsampling attention
    cfg = LevitConfig(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2],
                      depths=[1, 1, 1], key_dim=[8, 8, 8], drop_path_rate=0, mlp_ratio=[2, 2, 2],
                      attention_ratio=[2, 2, 2])
    return LevitModel(cfg), image(64)


def deberta_v2():
    from transformers import DebertaV2Config, DebertaV2Model

    # disentangled attention: relative positions bucketed by a log, gathered per head
    cfg = DebertaV2Config(vocab_size=1000, max_position_embeddings=256, **_tiny())
    return DebertaV2Model(cfg), text(1000)


def gptj():
    from transformers import GPTJConfig, GPTJModel

    # rotary embedding on interleaved pairs of the first 8 dims, attention and MLP in parallel
    cfg = GPTJConfig(vocab_size=1000, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                     rotary_dim=8, use_cache=False)
    return GPTJModel(cfg), text(1000)


def efficientnet():
    from transformers import EfficientNetConfig, EfficientNetModel

    # depthwise convs of 3 x 3 and 5 x 5, squeeze-and-excitation, swish
    cfg = EfficientNetConfig(image_size=64, width_coefficient=0.5, depth_coefficient=0.5,
                             hidden_dim=640)
    return EfficientNetModel(cfg), image(64)


def regnet():
    from transformers import RegNetConfig, RegNetModel

    # grouped 3 x 3 convs with squeeze-and-excitation (RegNetY)
    cfg = RegNetConfig(embedding_size=16, hidden_sizes=[24, 56, 152, 368], depths=[1, 1, 2, 1],
                       groups_width=8, layer_type="y")
    return RegNetModel(cfg), image(64)


def lstm_lm():
    import torch

    class LstmLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(500, 32)
            self.lstm = torch.nn.LSTM(32, 48, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(48, 500)

        def forward(self, input_ids):
            out, _ = self.lstm(self.embed(input_ids))
            return self.head(out)

    return LstmLM(), text(500, mask=False)


# name -> (builder, exporter, opset)
MODELS = {
    "bert_dynamo": (bert, "dynamo", 18),
    "bert_legacy": (bert, "legacy", 17),
    "bert_base_legacy": (bert_base, "legacy", 17),
    "gpt2_dynamo": (gpt2, "dynamo", 18),
    "gpt2_legacy": (gpt2, "legacy", 17),
    "llama_dynamo": (llama, "dynamo", 18),
    "t5_encoder_legacy": (t5_encoder, "legacy", 17),
    "vit_dynamo": (vit, "dynamo", 18),
    "swin_legacy": (swin, "legacy", 17),
    "resnet_legacy": (resnet, "legacy", 17),
    "mobilenet_v2_legacy": (mobilenet_v2, "legacy", 17),
    "wav2vec2_dynamo": (wav2vec2, "dynamo", 18),
    "lstm_legacy": (lstm_lm, "legacy", 17),
    "convnext_legacy": (convnext, "legacy", 17),
    "segformer_legacy": (segformer, "legacy", 17),
    "whisper_encoder_legacy": (whisper_encoder, "legacy", 17),
    "bloom_legacy": (bloom, "legacy", 17),
    "gpt_neox_dynamo": (gpt_neox, "dynamo", 18),
    "falcon_dynamo": (falcon, "dynamo", 18),
    "mobilevit_legacy": (mobilevit, "legacy", 17),
    "mpt_legacy": (mpt, "legacy", 17),
    "levit_dynamo": (levit, "dynamo", 18),
    "deberta_v2_legacy": (deberta_v2, "legacy", 17),
    "gptj_dynamo": (gptj, "dynamo", 18),
    "efficientnet_legacy": (efficientnet, "legacy", 17),
    "regnet_dynamo": (regnet, "dynamo", 18),
}
# PyTorch programs (torch.export, saved with torch.export.save as NAME.pt2) of the same
# builders, for the PyTorch frontend: name -> builder
PROGRAMS = {
    "bert_pt2": bert,
    "gpt2_pt2": gpt2,
    "llama_pt2": llama,
    "t5_encoder_pt2": t5_encoder,
    "vit_pt2": vit,
    "swin_pt2": swin,
    "resnet_pt2": resnet,
    "mobilenet_v2_pt2": mobilenet_v2,
    "wav2vec2_pt2": wav2vec2,
}
# quantized variants: name -> (float model, "static" (QDQ) or "dynamic" (operator format))
QUANTIZED = {
    "resnet_qdq": ("resnet_legacy", "static"),
    "bert_dynamic_quant": ("bert_legacy", "dynamic"),
}


def example_inputs(spec: list[dict], sizes: dict[str, int], seed: int = 0) -> dict:
    """Seeded inputs for `spec` at `sizes` (the tests fill inputs the same way)."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in spec:
        shape = [sizes[d] if isinstance(d, str) else d for d in s["dims"]]
        fill = s["fill"]
        if fill.startswith("ids:"):
            out[s["name"]] = rng.integers(0, int(fill[4:]), size=shape).astype(s["dtype"])
        elif fill == "mask":
            m = np.ones(shape, s["dtype"])
            m[-1, shape[1] // 2:] = 0  # one padded sequence
            out[s["name"]] = m
        else:
            out[s["name"]] = rng.standard_normal(shape).astype(s["dtype"])
    return out


EXPORT_SIZES = {"batch": 2, "seq": 16, "frames": 4000}
# Written into each NAME.json; an export whose version differs is made again. 2: batch norms
# reset and calibrated (`_calibrated`).
CORPUS_VERSION = 2


def _calibrated(model, spec: list[dict]):
    """`model` (called with its inputs by position) in eval mode, each BatchNorm's running
    mean and variance measured on seeded inputs, as a trained network's are, and its scale
    and shift 1 and 0 (some `transformers` models draw them with std 0.02 as they do their
    weights). A fresh BatchNorm assumes unit statistics, and with `transformers`' random
    weights (std 0.02) a deep CNN's activations then shrink layer by layer: MobileNetV2's
    output was at most 2e-24, MobileViT's all zeros, LeViT's 6e-9, EfficientNet's 8e-32, so
    a comparison with onnxruntime had nothing to catch. Calibrated, every BatchNorm's output
    has unit scale."""
    import torch

    model.eval()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_parameters()  # statistics (0, 1) and affine (1, 0)
        m.momentum = None  # a cumulative average over the batches
        m.train()
    with torch.no_grad():
        for seed in range(100, 104):  # not the tests' seeds
            feeds = example_inputs(spec, EXPORT_SIZES, seed=seed)
            model(*(torch.from_numpy(feeds[s["name"]]) for s in spec))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
        m.eval()
    return model


def _by_keyword(model, names: list[str]):
    """`model` called with its inputs by keyword, returning its first output as a tensor: the
    way an application calls it, and a signature both exporters take."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)))
            return out if isinstance(out, torch.Tensor) else out[0]

    return Wrapped()


def dynamic_dims(spec: list[dict], auto: tuple[str, ...] = ()) -> tuple[dict, ...]:
    """torch.export.Dim ranges of the inputs' named dimensions, as `dynamic_shapes` wants them
    for a model called with its inputs as positional arguments; the dimensions named in
    `auto` are left to torch (Dim.AUTO)."""
    import torch

    dims = {d: torch.export.Dim.AUTO if d in auto else
            torch.export.Dim(d, min=2 if d == "batch" else 4, max=64 if d != "frames" else 100000)
            for s in spec for d in s["dims"] if isinstance(d, str)}
    return tuple({k: dims[d] for k, d in enumerate(s["dims"]) if isinstance(d, str)}
                 for s in spec)


def export_program(name: str, out_dir: Path) -> None:
    """NAME.pt2: torch.export of the model with dynamic batch (and sequence), as saved by
    torch.export.save, with NAME.json beside it."""
    import torch

    torch.manual_seed(0)
    model, spec = PROGRAMS[name]()
    model = _calibrated(_by_keyword(model, [s["name"] for s in spec]), spec)
    feeds = example_inputs(spec, EXPORT_SIZES)
    args = tuple(torch.from_numpy(feeds[s["name"]]) for s in spec)
    path = out_dir / f"{name}.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # torch.export refuses a named range for a speech model's length: its strided
        # convolutions' lengths are expressions it cannot prove over the range, and left to
        # itself it finds the range they need (60 samples and more)
        shapes = dynamic_dims(spec, auto=("frames",))
        program = torch.export.export(model, args, dynamic_shapes={"args": shapes})
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp.pt2")
        torch.export.save(program, str(tmp))
    os.replace(tmp, path)
    (out_dir / f"{name}.json").write_text(json.dumps({"inputs": spec, "exporter": "torch.export",
                                                      "torch": torch.__version__,
                                                      "corpus_version": CORPUS_VERSION}, indent=1))


def export(name: str, out_dir: Path) -> None:
    import torch

    build, exporter, opset = MODELS[name]
    torch.manual_seed(0)
    model, spec = build()
    model = _calibrated(_by_keyword(model, [s["name"] for s in spec]), spec)
    feeds = example_inputs(spec, EXPORT_SIZES)
    args = tuple(torch.from_numpy(feeds[s["name"]]) for s in spec)
    names = [s["name"] for s in spec]
    path = out_dir / f"{name}.onnx"
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tmp_path = Path(tmp) / "model.onnx"
        if exporter == "dynamo":
            torch.onnx.export(model, args, str(tmp_path), input_names=names, dynamo=True,
                              opset_version=opset, dynamic_shapes={"args": dynamic_dims(spec)},
                              external_data=False)
        else:
            axes = {s["name"]: {k: d for k, d in enumerate(s["dims"]) if isinstance(d, str)}
                    for s in spec}
            torch.onnx.export(model, args, str(tmp_path), input_names=names, dynamo=False,
                              opset_version=opset, dynamic_axes=axes)
        import onnx

        m = onnx.load(str(tmp_path))  # external data, if any, folded into one file
        _save_whole(m, path)
    # last: a description of this version vouches for the model beside it (`_current`)
    (out_dir / f"{name}.json").write_text(json.dumps({"inputs": spec, "exporter": exporter,
                                                      "opset": opset,
                                                      "corpus_version": CORPUS_VERSION},
                                                     indent=1))


def _save_whole(model, path: Path) -> None:
    """Write the model under a temporary name and rename it: a killed export leaves no
    half-written model for the next run to keep."""
    import onnx

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)


def quantize(name: str, out_dir: Path) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    source, kind = QUANTIZED[name]
    src = out_dir / f"{source}.onnx"
    spec = json.loads((out_dir / f"{source}.json").read_text())
    path = out_dir / f"{name}.onnx"
    spec["quantized"] = kind
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if kind == "dynamic":
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8)
    else:
        class Reader(CalibrationDataReader):
            def __init__(self):
                self.batches = iter([example_inputs(spec["inputs"], EXPORT_SIZES, seed=s)
                                     for s in range(4)])

            def get_next(self):
                return next(self.batches, None)

        quantize_static(str(src), str(tmp), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True)
    os.replace(tmp, path)
    (out_dir / f"{name}.json").write_text(json.dumps(spec, indent=1))


def _current(out_dir: Path, name: str, suffix: str) -> bool:
    """Whether NAME's export is there, made by this CORPUS_VERSION (its description is
    written after it)."""
    try:
        spec = json.loads((out_dir / f"{name}.json").read_text())
    except (OSError, ValueError):
        return False
    return (out_dir / f"{name}{suffix}").exists() and spec.get("corpus_version") == CORPUS_VERSION


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_dir())
    ap.add_argument("--only", nargs="*", default=None, help="export only these models")
    ap.add_argument("--list", action="store_true", help="list the model names and exit")
    args = ap.parse_args(argv)
    names = [*MODELS, *QUANTIZED, *PROGRAMS]
    if args.list:
        print("\n".join(names))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.only or names:
        if name not in names:
            print(f"unknown model {name!r}; --list names them", file=sys.stderr)
            return 2
        suffix = ".pt2" if name in PROGRAMS else ".onnx"
        if _current(args.out, name, suffix):
            continue
        try:
            if name in PROGRAMS:
                export_program(name, args.out)
            elif name in MODELS:
                export(name, args.out)
            else:
                if not _current(args.out, QUANTIZED[name][0], ".onnx"):
                    export(QUANTIZED[name][0], args.out)
                quantize(name, args.out)
            print(f"exported {name}")
        except Exception as e:  # one model's failure must not stop the others
            failed.append(name)
            print(f"failed {name}: {type(e).__name__}: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
