"""Makes a Hugging Face model folder that vLLM and transformers load, from the project's
SmolLM2-135M GGUF: transformers dequantizes it (bfloat16), the weights are saved with
safetensors (less the output head, which is tied to the embeddings), and the config loses
its GGUF quantization entry.

    python python/tests/make_hf_model.py [GGUF] [OUT]

Defaults: assets/models/SmolLM2-135M-Instruct.Q4_1.gguf, target/vllm-model. Does nothing
when OUT already holds a model made from the same GGUF.
"""

import hashlib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    gguf = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "target/vllm-model")
    if not gguf.exists():
        sys.exit(f"{gguf} is missing: run scripts/fetch-assets model")
    digest = sha256(gguf)
    stamp = out / "made-from.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("sha256") == digest:
        print(f"{out}: already made from {gguf.name}")
        return

    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name).to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["tie_word_embeddings"] = True
    config["torch_dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))
    stamp.write_text(json.dumps({"gguf": gguf.name, "sha256": digest}))
    print(f"{out}: made from {gguf.name}")


if __name__ == "__main__":
    main()
