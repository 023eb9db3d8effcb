#!/usr/bin/env python3
"""Writes a GPT-2-style decoder of L layers as a `.fg` graph (weights as parameters), for
compile-time measurements on deep models (BENCHMARKS "Session 24"):

    python3 scripts/gpt2-layers-fg.py 12 > /tmp/g12.fg && ferrite compile /tmp/g12.fg

Options: --d (model width, 768), --heads (12), --seq (128), --vocab (1000). Each layer is a
pre-norm block: layer norm, fused q/k/v projection, causal softmax attention, output
projection, residual, layer norm, a 4x GELU MLP, residual; then the final layer norm and the
tied language-model head.
"""
import argparse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("layers", type=int)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000)
    a = ap.parse_args()
    L, D, H, T, V = a.layers, a.d, a.heads, a.seq, a.vocab
    HD = D // H
    params = [f"ids: i64[1, {T}]", f"wte: f32[{V}, {D}]", f"wpe: f32[{max(T, 1024)}, {D}]"]
    body = [
        "  tok = index_select(wte, ids, axis=0)",
        f"  positions = index_select(wpe, arange(end={T}), axis=0)",
        "  x0 = add(tok, positions)",
    ]
    for l in range(L):
        p = f"l{l}_"
        params += [
            f"{p}ln1_w: f32[{D}]", f"{p}ln1_b: f32[{D}]",
            f"{p}w_attn: f32[{D}, {3 * D}]", f"{p}b_attn: f32[{3 * D}]",
            f"{p}w_proj: f32[{D}, {D}]", f"{p}b_proj: f32[{D}]",
            f"{p}ln2_w: f32[{D}]", f"{p}ln2_b: f32[{D}]",
            f"{p}w_fc: f32[{D}, {4 * D}]", f"{p}b_fc: f32[{4 * D}]",
            f"{p}w_out: f32[{4 * D}, {D}]", f"{p}b_out: f32[{D}]",
        ]
        body += [
            f"  h{l} = layer_norm(x{l}, {p}ln1_w, {p}ln1_b)",
            f"  qkv{l} = add(matmul(h{l}, {p}w_attn), {p}b_attn)",
        ]
        for i, n in enumerate("qkv"):
            body.append(
                f"  {n}{l} = permute(reshape(slice(qkv{l}, axis=-1, start={i * D}, end={(i + 1) * D}), "
                f"shape=[1, {T}, {H}, {HD}]), dims=[0, 2, 1, 3])"
            )
        body += [
            f"  pos{l} = arange(end={T})",
            f"  causal{l} = le(reshape(pos{l}, shape=[1, {T}]), reshape(pos{l}, shape=[{T}, 1]))",
            f"  scores{l} = div(matmul(q{l}, transpose(k{l}, dim0=-2, dim1=-1)), {HD ** 0.5})",
            f"  weights{l} = softmax(where(causal{l}, scores{l}, -inf), axis=-1)",
            f"  context{l} = reshape(permute(matmul(weights{l}, v{l}), dims=[0, 2, 1, 3]), shape=[1, {T}, {D}])",
            f"  a{l} = add(x{l}, add(matmul(context{l}, {p}w_proj), {p}b_proj))",
            f"  m{l} = layer_norm(a{l}, {p}ln2_w, {p}ln2_b)",
            f"  x{l + 1} = add(a{l}, add(matmul(gelu(add(matmul(m{l}, {p}w_fc), {p}b_fc)), {p}w_out), {p}b_out))",
        ]
    params += [f"lnf_w: f32[{D}]", f"lnf_b: f32[{D}]"]
    body += [
        f"  logits = matmul(layer_norm(x{L}, lnf_w, lnf_b), transpose(wte, dim0=0, dim1=1))",
        "  return logits",
    ]
    print(f"graph gpt2_{L}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}")


if __name__ == "__main__":
    main()
