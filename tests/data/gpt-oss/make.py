"""Writes the tiny random gpt-oss fixture that tests/gpt_oss_logits.rs checks corral against.

A small GptOssConfig (4 layers alternating sliding window 8 and full attention, 4 experts of
which 2 are chosen, grouped-query attention, YaRN RoPE, attention sinks) gets random
weights. The experts are packed as MXFP4 by gguf-py's reference packer (llama.cpp's own
rounding), checked by a round trip, and repacked into the Hugging Face checkpoint layout,
checked by transformers' own dequantizer. transformers' GptOssForCausalLM, in f32 with eager
attention, runs on the unpacked values and gives the expected logits at every position.

Written into this folder:
- hf/config.json, hf/model.safetensors: the Hugging Face layout (dense weights bf16, experts
  `*_blocks` / `*_scales` / `*_bias`, as openai/gpt-oss-20b);
- model.gguf: llama.cpp's layout (arch gpt-oss; experts MXFP4 with gate and up apart,
  2-D weights bf16, the router, norms, sinks and biases f32, as its converter writes);
- expected.safetensors: the token ids of two prompts and transformers' logits for each at
  every position.

Run by scripts/make-gpt-oss-fixture, in the pinned venv of scripts/test-vllm.
"""

import json
import os
import sys

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter, quants
from safetensors.numpy import save_file
from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261127

CONFIG = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=64,
    head_dim=16,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=4,
    num_local_experts=4,
    num_experts_per_tok=2,
    sliding_window=8,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_parameters=dict(
        rope_type="yarn",
        rope_theta=150000.0,
        factor=32.0,
        beta_fast=32.0,
        beta_slow=1.0,
        truncate=False,
        original_max_position_embeddings=4096,
    ),
    swiglu_limit=7.0,
    attention_bias=True,
    tie_word_embeddings=False,
    eos_token_id=2,
    pad_token_id=0,
)


def bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16, as float32."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).float().numpy()


def mxfp4_ggml(w: np.ndarray) -> np.ndarray:
    """w (..., in) packed by gguf-py's reference MXFP4 packer: 17-byte blocks per 32 values."""
    return quants.quantize(w.astype(np.float32), GGMLQuantizationType.MXFP4)


def ggml_to_hf(packed: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """ggml's block_mxfp4 (scale byte, then 16 bytes: value j in the low nibble of byte j,
    value j + 16 in its high nibble) into the Hugging Face layout (`blocks`: value 2j in the
    low nibble of byte j, 2j + 1 in its high nibble; `scales` apart)."""
    *prefix, n = shape
    raw = packed.reshape(-1, 17)
    scales = raw[:, 0].copy()
    qs = raw[:, 1:]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=1)  # values 0..31 in order
    blocks = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)
    return blocks.reshape(*prefix, n // 32, 16), scales.reshape(*prefix, n // 32)


def main() -> None:
    rng = np.random.default_rng(SEED)
    cfg = GptOssConfig(**CONFIG)
    assert cfg.layer_types == ["sliding_attention", "full_attention"] * 2, cfg.layer_types
    hs, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    nh, nkv, ne, nl = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_local_experts, cfg.num_hidden_layers

    def normal(*shape, std):
        return bf16(rng.normal(0.0, std, size=shape))

    dense = {}  # Hugging Face names -> bf16-valued float32 arrays
    experts = {}  # layer -> (gate_up (E, 2I, H), down (E, H, I)) as MXFP4 values
    packed = {}  # layer -> ggml bytes of gate_up and down
    dense["model.embed_tokens.weight"] = normal(cfg.vocab_size, hs, std=1.0)
    dense["lm_head.weight"] = normal(cfg.vocab_size, hs, std=hs**-0.5)
    dense["model.norm.weight"] = bf16(1.0 + rng.normal(0.0, 0.1, size=hs))
    for i in range(nl):
        p = f"model.layers.{i}."
        dense[p + "input_layernorm.weight"] = bf16(1.0 + rng.normal(0.0, 0.1, size=hs))
        dense[p + "post_attention_layernorm.weight"] = bf16(1.0 + rng.normal(0.0, 0.1, size=hs))
        for name, out, inp in [("q", nh * hd, hs), ("k", nkv * hd, hs), ("v", nkv * hd, hs), ("o", hs, nh * hd)]:
            dense[p + f"self_attn.{name}_proj.weight"] = normal(out, inp, std=inp**-0.5)
            dense[p + f"self_attn.{name}_proj.bias"] = normal(out, std=0.1)
        dense[p + "self_attn.sinks"] = normal(nh, std=1.0)
        dense[p + "mlp.router.weight"] = normal(ne, hs, std=2 * hs**-0.5)
        dense[p + "mlp.router.bias"] = normal(ne, std=0.1)
        dense[p + "mlp.experts.gate_up_proj_bias"] = normal(ne, 2 * inter, std=0.1)
        dense[p + "mlp.experts.down_proj_bias"] = normal(ne, hs, std=0.1)
        # gate_up large enough that the clamp at swiglu_limit is reached.
        gate_up = rng.normal(0.0, 0.5, size=(ne, 2 * inter, hs)).astype(np.float32)
        down = rng.normal(0.0, inter**-0.5, size=(ne, hs, inter)).astype(np.float32)
        pg, pd = mxfp4_ggml(gate_up), mxfp4_ggml(down)
        vg = quants.dequantize(pg, GGMLQuantizationType.MXFP4)
        vd = quants.dequantize(pd, GGMLQuantizationType.MXFP4)
        # Round trip: packing the unpacked values gives the same bytes, and each value is
        # the nearest of its block's 16 levels (the packer's own check of the error).
        assert np.array_equal(mxfp4_ggml(vg), pg) and np.array_equal(mxfp4_ggml(vd), pd)
        assert np.abs(vg - gate_up).max() < 0.5 * np.abs(gate_up).max()
        experts[i] = (vg.reshape(gate_up.shape), vd.reshape(down.shape))
        packed[i] = (pg, pd)

    # The Hugging Face layout, checked by transformers' dequantizer.
    tensors = {k: v for k, v in dense.items()}
    hf_experts = {}
    for i in range(nl):
        p = f"model.layers.{i}.mlp.experts."
        (vg, vd), (pg, pd) = experts[i], packed[i]
        for name, values, raw in [("gate_up_proj", vg, pg), ("down_proj", vd, pd)]:
            blocks, scales = ggml_to_hf(raw, values.shape)
            unpacked = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32)
            # transformers' parameter is (E, in, out).
            assert np.array_equal(unpacked.numpy(), values.transpose(0, 2, 1)), name
            hf_experts[p + name + "_blocks"] = blocks
            hf_experts[p + name + "_scales"] = scales
    os.makedirs(os.path.join(HERE, "hf"), exist_ok=True)
    as_bf16 = {
        k: torch.from_numpy(v).to(torch.bfloat16).view(torch.uint16).numpy() for k, v in tensors.items()
    }
    # safetensors.numpy has no bfloat16; write through torch.
    from safetensors.torch import save_file as save_torch

    save_torch(
        {**{k: torch.from_numpy(v).view(torch.bfloat16) for k, v in as_bf16.items()},
         **{k: torch.from_numpy(v) for k, v in hf_experts.items()}},
        os.path.join(HERE, "hf", "model.safetensors"),
        metadata={"format": "pt"},
    )
    config = cfg.to_dict()
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
    }
    config.pop("transformers_version", None)
    with open(os.path.join(HERE, "hf", "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")

    # The reference: transformers in f32, eager attention, on the unpacked values.
    torch.manual_seed(SEED)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    model = GptOssForCausalLM(cfg).eval().float()
    state = {k: torch.from_numpy(v) for k, v in dense.items()}
    for i in range(nl):
        vg, vd = experts[i]
        state[f"model.layers.{i}.mlp.experts.gate_up_proj"] = torch.from_numpy(vg.transpose(0, 2, 1).copy())
        state[f"model.layers.{i}.mlp.experts.down_proj"] = torch.from_numpy(vd.transpose(0, 2, 1).copy())
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not [m for m in missing if "rotary" not in m], (missing, unexpected)

    prompts = {
        "a": rng.integers(3, cfg.vocab_size, size=24),
        "b": rng.integers(3, cfg.vocab_size, size=17),
    }
    expected = {}
    with torch.no_grad():
        for name, ids in prompts.items():
            out = model(torch.from_numpy(ids).unsqueeze(0), use_cache=False).logits[0]
            expected[f"tokens_{name}"] = ids.astype(np.uint32)
            expected[f"logits_{name}"] = out.numpy().astype(np.float32)
            # The clamp and more than one expert per layer are exercised.
            print(f"prompt {name}: {len(ids)} tokens, logits std {out.std():.3f}", file=sys.stderr)
    save_file(expected, os.path.join(HERE, "expected.safetensors"))

    # The checkpoint written above is what transformers reads: loaded back through its MXFP4
    # loader (experts unpacked to bf16, exact for MXFP4 values), run in f32 with eager experts.
    loaded = GptOssForCausalLM.from_pretrained(
        os.path.join(HERE, "hf"),
        dtype=torch.float32,
        quantization_config=Mxfp4Config(dequantize=True),
        attn_implementation="eager",
        experts_implementation="eager",
    ).eval()
    for p in loaded.parameters():
        p.data = p.data.float()
    with torch.no_grad():
        for name, ids in prompts.items():
            out = loaded(torch.from_numpy(ids).unsqueeze(0)).logits[0].numpy()
            err = np.abs(out - expected[f"logits_{name}"]).max()
            assert err < 1e-5, (name, err)

    # llama.cpp's layout.
    w = GGUFWriter(os.path.join(HERE, "model.gguf"), "gpt-oss")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(hs)
    w.add_block_count(nl)
    w.add_feed_forward_length(inter)
    w.add_expert_feed_forward_length(inter)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_expert_count(ne)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_sliding_window(cfg.sliding_window)
    w.add_rope_scaling_type(__import__("gguf").RopeScalingType.YARN)
    w.add_rope_scaling_factor(cfg.rope_parameters["factor"])
    w.add_rope_scaling_orig_ctx_len(cfg.rope_parameters["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(cfg.rope_parameters["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(cfg.rope_parameters["beta_slow"])

    def bf16_tensor(name, values):
        """A matrix in bf16, as llama.cpp's converter writes 2-D weights other than the router."""
        raw = torch.from_numpy(np.ascontiguousarray(values)).to(torch.bfloat16).view(torch.uint16).numpy()
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType.BF16)

    bf16_tensor("token_embd.weight", dense["model.embed_tokens.weight"])
    bf16_tensor("output.weight", dense["lm_head.weight"])
    w.add_tensor("output_norm.weight", dense["model.norm.weight"])
    for i in range(nl):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", dense[p + "input_layernorm.weight"])
        w.add_tensor(b + "post_attention_norm.weight", dense[p + "post_attention_layernorm.weight"])
        for hf, gg in [("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")]:
            bf16_tensor(b + gg + ".weight", dense[p + f"self_attn.{hf}_proj.weight"])
            w.add_tensor(b + gg + ".bias", dense[p + f"self_attn.{hf}_proj.bias"])
        w.add_tensor(b + "attn_sinks.weight", dense[p + "self_attn.sinks"])
        w.add_tensor(b + "ffn_gate_inp.weight", dense[p + "mlp.router.weight"])
        w.add_tensor(b + "ffn_gate_inp.bias", dense[p + "mlp.router.bias"])
        vg, vd = experts[i]
        gu_bias = dense[p + "mlp.experts.gate_up_proj_bias"]
        for name, values in [("ffn_gate_exps", vg[:, 0::2, :]), ("ffn_up_exps", vg[:, 1::2, :]), ("ffn_down_exps", vd)]:
            raw = mxfp4_ggml(np.ascontiguousarray(values))
            assert np.array_equal(quants.dequantize(raw, GGMLQuantizationType.MXFP4), values)
            w.add_tensor(b + name + ".weight", raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType.MXFP4)
        w.add_tensor(b + "ffn_gate_exps.bias", np.ascontiguousarray(gu_bias[:, 0::2]))
        w.add_tensor(b + "ffn_up_exps.bias", np.ascontiguousarray(gu_bias[:, 1::2]))
        w.add_tensor(b + "ffn_down_exps.bias", dense[p + "mlp.experts.down_proj_bias"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
