"""A character-level Hugging Face tokenizer (BPE with one merge, "\\n" + "\\n" -> "\\n\\n") for the tiny multimodal Gemma
3 of tests/fixtures/gemma3_mm_model, with its 128 ids: printable ASCII, the image tokens of its config.json (120
<start_of_image>, 121 <end_of_image>, 122 <image_soft_token>, 108 "\\n\\n") and a Gemma-style chat template
(<start_of_turn> 123, <end_of_turn> 124), so that `maxtext chat --image` can run on that model in a test. Its ids
mean nothing to the random model; the test checks the chat against `maxtext generate` on the same rendered text.

Writes tests/fixtures/gemma3_mm_model/chat_tokenizer/{tokenizer.json, tokenizer_config.json}.
Run: /usr/bin/python3 tests/reference/gemma3_mm_chat_tokenizer.py
"""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "gemma3_mm_model", "chat_tokenizer")
NAMED = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 99: "\n", 108: "\n\n", 120: "<start_of_image>",
         121: "<end_of_image>", 122: "<image_soft_token>", 123: "<start_of_turn>", 124: "<end_of_turn>"}
SPECIAL = [0, 1, 2, 3, 120, 121, 122, 123, 124]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
            "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def main():
    vocab = {}
    for i in range(128):
        if i in NAMED:
            vocab[NAMED[i]] = i
        elif 4 <= i < 99:
            vocab[chr(32 + i - 4)] = i  # printable ASCII, space to ~
        else:
            vocab[f"<unused{i}>"] = i
    assert len(vocab) == 128
    added = [{"id": i, "content": NAMED[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in SPECIAL]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": None,
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}},
           "decoder": None,
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": ["\n \n"]}}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tok, f, indent=1)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True, "chat_template": TEMPLATE,
                   "tokenizer_class": "GemmaTokenizer"}, f, indent=1)


if __name__ == "__main__":
    main()
