"""A tiny LLaVA built from configurations in code (random weights, a WordLevel tokenizer made with ``tokenizers``),
saved like a user's model folder: no VLM weights ship in any package we can reach."""
from __future__ import annotations

from pathlib import Path

WORDS = ["<pad>", "<unk>", "<s>", "</s>", "<image>", "USER:", "ASSISTANT:", "describe", "the", "image", "a", "person",
         "car", "red", "blue", "what", "is", "this", "?", "."] + [f"w{i}" for i in range(40)]
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}USER: {% for c in m['content'] %}"
                 "{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")


TINY_VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
               "image_size": 224, "patch_size": 32}
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 2}


def build_tiny_llava(folder: Path, seed: int = 0) -> Path:
    """CLIP vision (64 wide, 2 layers, 224 px, patch 32) + Llama (64 wide, 2 layers); ~1.5 MB; returns ``folder``."""
    return build_llava(folder, TINY_VISION, TINY_TEXT, WORDS, seed=seed)


def build_llava(folder: Path, vision_kw: dict, text_kw: dict, words: list[str], *, seed: int = 0,
                dtype: str = "auto", feature_layer: int = -1) -> Path:
    """A LLaVA of ``CLIPVisionConfig(**vision_kw)`` + ``LlamaConfig(**text_kw)`` with seeded random weights and a
    WordLevel tokenizer over ``words`` (``WORDS`` first), saved with its processor to ``folder``; returns it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>", extra_special_tokens={"image_token": "<image>"})
    vision = CLIPVisionConfig(**vision_kw)
    text = LlamaConfig(**text_kw, vocab_size=len(words), pad_token_id=0, bos_token_id=2, eos_token_id=3)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text, image_token_index=4,
                                                      vision_feature_layer=feature_layer)).eval()
    if dtype != "auto":
        model = model.to(getattr(torch, dtype))
    model.generation_config.suppress_tokens = list(range(7))  # no special token is generated: answers are words
    size = vision_kw["image_size"]
    processor = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": size},
                                                                  crop_size={"height": size, "width": size}),
                               tokenizer=tok, patch_size=vision_kw["patch_size"], num_additional_image_tokens=1,
                               vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def reference_answers(folder: Path, images: list, prompt: str, max_new_tokens: int) -> list[str]:
    """transformers' own greedy ``generate``, one request at a time, on the reloaded folder; an item of ``images``
    is one image or a list of images (a clip)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(folder, use_kernels=False).eval()
    processor = AutoProcessor.from_pretrained(folder)
    out = []
    for item in images:
        clip = item if isinstance(item, list) else [item]
        content = [{"type": "image"} for _ in clip] + [{"type": "text", "text": prompt}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = processor(images=clip, text=[text], return_tensors="pt")
        with torch.inference_mode():
            ids = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        out.append(processor.batch_decode(ids[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0])
    return out
