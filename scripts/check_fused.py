"""The "done when" models of the com.microsoft operators: a small BERT-style encoder and a
GPT-2-style decoder fused by onnxruntime's transformer optimizer, and the fused GPT-2 model
dynamically quantised, each run in multigather and onnxruntime.

usage: python scripts/check_fused.py DIR   (needs onnx, onnxruntime, numpy and sympy, which
       the optimizer's shape inference imports; MULTIGATHER = the binary)

Writes into DIR (generated, not committed):
- bert.onnx (scripts/make_transformer.py at batch 2 x 16 tokens, hidden 64, 4 heads, 2 layers)
  and bert_fused.onnx, `optimize_model(model_type='bert')`: must contain com.microsoft
  Attention, SkipLayerNormalization and BiasGelu;
- gpt2.onnx (scripts/make_gpt2.py) and gpt2_fused.onnx, `optimize_model(model_type='gpt2')`:
  must contain Attention (unidirectional), EmbedLayerNormalization, SkipLayerNormalization and
  FastGelu;
- gpt2_fused_int8.onnx: `quantize_dynamic` of gpt2_fused.onnx, its MatMuls as
  DynamicQuantizeLinear + MatMulInteger (int8 weights).
Each fused and quantised model must match onnxruntime within rtol 1e-3 (`multigather run`) and
pass `multigather verify` (scripts/check_models.py's check). The optimizer runs with
opt_level 0: its onnxruntime pass would import torch.
"""
import collections
import os
import sys
import tempfile

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.optimizer import optimize_model

import check_models
import make_gpt2
import make_transformer

BERT = dict(batch=2, seq=16, vocab=100, hidden=64, heads=4, ffn=128, layers=2)
WANT = {
    "bert_fused.onnx": {"Attention", "SkipLayerNormalization", "BiasGelu"},
    "gpt2_fused.onnx": {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization",
                        "FastGelu"},
    "gpt2_fused_int8.onnx": {"Attention", "EmbedLayerNormalization", "MatMulInteger",
                             "DynamicQuantizeLinear"},
}


def fuse(src, dst, model_type, heads, hidden):
    model = optimize_model(src, model_type=model_type, num_heads=heads, hidden_size=hidden,
                           opt_level=0)
    model.save_model_to_file(dst)


def generate(out):
    os.makedirs(out, exist_ok=True)
    path = lambda name: os.path.join(out, name)
    onnx.save(make_transformer.build(**BERT), path("bert.onnx"))
    fuse(path("bert.onnx"), path("bert_fused.onnx"), "bert", BERT["heads"], BERT["hidden"])
    onnx.save(make_gpt2.build(), path("gpt2.onnx"))
    fuse(path("gpt2.onnx"), path("gpt2_fused.onnx"), "gpt2", make_gpt2.HEADS, make_gpt2.HIDDEN)
    quantize_dynamic(path("gpt2_fused.onnx"), path("gpt2_fused_int8.onnx"),
                     op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    generate(out)
    failed = 0
    for name, want in WANT.items():
        path = os.path.join(out, name)
        ops = collections.Counter(n.op_type for n in onnx.load(path).graph.node)
        missing = want - set(ops)
        if missing:
            problem = f"the fused model lacks {sorted(missing)}"
        else:
            with tempfile.TemporaryDirectory() as work:
                try:
                    problem, _ = check_models.check(path, work, 1, rtol=1e-3, atol=1e-4)
                except Exception as e:  # subprocess, onnx and onnxruntime errors alike
                    problem = (getattr(e, "stderr", None) or str(e)).strip()[:300]
        failed += bool(problem)
        fused = ", ".join(f"{op} x{ops[op]}" for op in sorted(want & set(ops)))
        print(f"{'FAIL' if problem else 'ok  '} {name} ({fused}){': ' + problem if problem else ''}")
    print(f"fused models: {len(WANT) - failed} of {len(WANT)} match onnxruntime and verify")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
