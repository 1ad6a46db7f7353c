#!/usr/bin/env python3
"""Where TFLite's int8 arithmetic departs from octet's: an independent numpy model of a .tflite
written by `octet convert` of a model without max pools (ResNet-18: CONV_2D, PAD, ADD,
DEPTHWISE_CONV_2D for the avg pool, FULLY_CONNECTED), with two requantizations:
octet's (runtime/src/requant.rs: (acc*M0 + 2^(n-1)) >> n, one rounding) and TFLite's default
MultiplyByQuantizedMultiplier (gemmlowp: SaturatingRoundingDoublingHighMul then
RoundingDivideByPOT, two roundings, half away from zero); and XNNPACK's (TFLite's default
delegate on x86) for per-channel convs, fp32: round-half-even(float32(acc) * float32(s_in*s_w/s_out));
the add as octet computes it.

    python3 bench/tflite_rounding.py MODEL.tflite N ref|auto              # per op kind
    python3 bench/tflite_rounding.py MODEL.tflite N ref octet|double|fp32 OCTET_LOGITS.bin  # chained

Per op (3 arguments): each op's output in TFLite (ref: reference kernels, auto: the default
ones), given TFLite's own input to it, against both models, over the first N Fashion-MNIST test
images (/usr/share/datasets/fashion-mnist). Chained (5 arguments): the whole model in one
variant, its logits against TFLite Micro, TFLite's reference kernels and octet's.
"""
import sys, math, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import tflite_check as tc
from ai_edge_litert.interpreter import Interpreter, OpResolverType
model = open(sys.argv[1], 'rb').read(); N = int(sys.argv[2]); kind = sys.argv[3]
res = OpResolverType.BUILTIN_REF if kind == 'ref' else OpResolverType.AUTO
it = Interpreter(model_content=model, experimental_op_resolver_type=res, experimental_preserve_all_tensors=True)
it.allocate_tensors()
det = {d['index']: d for d in it.get_tensor_details()}
ops = it._get_ops_details()
images = tc.load_fashion_mnist_test('/usr/share/datasets/fashion-mnist', N)
inter = {}
for i in range(N):
    it.set_tensor(it.get_input_details()[0]['index'], images[i].reshape(1, 32, 32, 1)); it.invoke()
    ids = {t for op in ops for t in op['inputs'].tolist() + op['outputs'].tolist()
           if not det[t]['name'].endswith(('weights', 'bias', 'paddings'))}
    for t in ids:
        inter.setdefault(t, []).append(it.get_tensor(t)[0].copy())
T = {k: np.stack(v).astype(np.int64) for k, v in inter.items()}
def qm(m):
    f, e = math.frexp(m); q = math.floor(f * 2**31 + 0.5)
    if q == 2**31: q //= 2; e += 1
    return q, e
def srdhm(a, b):
    ab = a * b; x = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    return np.where(x >= 0, x >> 31, -((-x) >> 31))
def rdbpot(x, e):
    if e == 0: return x
    mask = (1 << e) - 1; rem = x & mask; thr = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > thr)
def requant(acc, m0, sh, mode, fp32_scale=None):
    if mode == 'fp32':  # XNNPACK's per-channel kernels: float32 scale, round half to even
        return np.rint(acc.astype(np.float32) * fp32_scale).astype(np.int64)
    if mode == 'single':
        n = 31 - sh; return (acc * m0 + (1 << (n - 1))) >> n
    return rdbpot(srdhm(acc * (1 << max(sh, 0)), m0), max(-sh, 0))
f64 = lambda v: float(np.float32(v))
stats = {}
CHAIN = len(sys.argv) > 5
MODE = sys.argv[4] if CHAIN else None
V = {}
for op in ops:
    if CHAIN and op['op_name'] == 'QUANTIZE':
        V[op['outputs'][0]] = images.astype(np.int64)[..., None] - 128
    if CHAIN and op['op_name'] == 'PAD':
        xin = V[op['inputs'][0]]; zz = det[op['inputs'][0]]['quantization'][1]; pp = (det[op['outputs'][0]]['shape'][1] - xin.shape[1]) // 2
        V[op['outputs'][0]] = np.pad(xin, ((0, 0), (pp, pp), (pp, pp), (0, 0)), constant_values=zz)
    name = op['op_name']; ins = op['inputs']; out = op['outputs'][0]
    if name in ('QUANTIZE', 'PAD'): continue
    y = T[out]; s_out, z_out = det[out]['quantization']
    lo = -128  # clamp: fused RELU shows as outputs never below z_out
    relu = y.min() >= max(z_out, -128) and z_out > -128
    lo = max(z_out, -128) if relu else -128
    x = V.get(ins[0], T[ins[0]]) if CHAIN else T[ins[0]]; s_in, z_in = det[ins[0]]['quantization']
    preds = {}
    if name in ('CONV_2D', 'DEPTHWISE_CONV_2D', 'FULLY_CONNECTED'):
        w = it.get_tensor(ins[1]).astype(np.int64); b = it.get_tensor(ins[2]).astype(np.int64)
        sw = det[ins[1]]['quantization_parameters']['scales']
        xs = x - z_in
        if name == 'FULLY_CONNECTED':
            acc = xs.reshape(N, -1) @ w.T + b
        else:
            if name == 'DEPTHWISE_CONV_2D':
                _, kh, kw, co = w.shape
            else:
                co, kh, kw, ci = w.shape
            H = xs.shape[1]; Ho = y.shape[1]
            if Ho == H and kh > 1:  # SAME, stride 1
                p = (kh - 1) // 2; xs = np.pad(xs, ((0, 0), (p, p), (p, p), (0, 0))); s = 1
            else:
                s = 1 if Ho == 1 else (H - kh) // (Ho - 1)
            win = np.lib.stride_tricks.sliding_window_view(xs, (kh, kw), axis=(1, 2))[:, ::s, ::s][:, :Ho, :Ho]
            if name == 'DEPTHWISE_CONV_2D':
                acc = np.einsum('nhwcij,ijc->nhwc', win, w[0]) + b
            else:
                acc = win.transpose(0, 1, 2, 4, 5, 3).reshape(N, Ho, Ho, -1) @ w.reshape(co, -1).T + b
        for mode in ('single', 'double', 'fp32'):
            o = np.empty_like(acc)
            for c in range(acc.shape[-1]):
                m0, sh = qm(f64(s_in) * float(sw[c]) / f64(s_out))
                scale = np.float32(np.float32(s_in) * np.float32(sw[c]) / np.float32(s_out))
                o[..., c] = requant(acc[..., c], m0, sh, mode, scale)
            preds['octet' if mode == 'single' else mode] = np.clip(o + z_out, lo, 127)
    elif name == 'ADD':
        x1 = V.get(ins[1], T[ins[1]]) if CHAIN else T[ins[1]]; s1, z1 = det[ins[1]]['quantization']
        r0, r1 = f64(s_in) / f64(s_out), f64(s1) / f64(s_out)
        n = 31 - math.frexp(max(r0, r1))[1]
        while True:
            m0, m1 = math.floor(r0 * 2**n + 0.5), math.floor(r1 * 2**n + 0.5)
            if max(m0, m1) >= 2**31: n -= 1; continue
            break
        t = (x - z_in) * m0 + (x1 - z1) * m1
        preds['octet'] = np.clip(((t + (1 << (n - 1))) >> n) + z_out, lo, 127)
    else:
        continue
    if CHAIN:
        V[out] = preds.get(MODE, preds['octet'])
    for k, p in preds.items():
        d = int((p != y).sum())
        st = stats.setdefault((name, k), [0, 0, 0]); st[0] += d; st[1] += y.size; st[2] = max(st[2], int(np.abs(p - y).max()))
for (name, k), (d, tot, mx) in sorted(stats.items()):
    print(f"{kind} {name:18s} vs {k:6s}: {d} of {tot} values differ, max {mx}")

if CHAIN:
    last = ops[-1]['outputs'][0]
    pred = V[last].reshape(N, -1)
    for k in ('tflm', 'tflite-ref', 'tflite'):
        theirs, _ = tc.run_interpreter(k, model, images, 2)
        print(f"chain {MODE}: {k} vs chained simulation: {int((theirs != pred).sum())} of {pred.size} logits differ")
    ours = np.fromfile(sys.argv[5], dtype=np.int8).reshape(-1, pred.shape[1])[:N]
    print(f"chain {MODE}: octet vs chained simulation: {int((ours != pred).sum())} of {pred.size}")
