#!/usr/bin/env python3
"""llama.cpp's own converter (convert_hf_to_gguf.py, conversion/qwen.py Qwen3_5TextModel) on a Hugging Face
Qwen3.5 directory that carries no tokenizer (anelab's test fixtures): the vocabulary step writes llama.cpp's
"no vocabulary" form (tokenizer.ggml.model "none") instead of reading tokenizer.json; everything else is the
converter's. Run it where transformers is installed (the device machine has 5.x), LLAMA_CPP_SRC holding
llama.cpp's convert_hf_to_gguf.py, conversion/ and gguf-py/ (`git archive HEAD convert_hf_to_gguf.py conversion
gguf-py` of a llama.cpp checkout):

    python3 scripts/qwen35_llamacpp_convert.py LLAMA_CPP_SRC HF_DIR OUT.gguf [--outtype f32|bf16|f16]

then here `anelab infer logits -m OUT.gguf ...` against the HF directory itself. On tests/fixtures/hf/qwen35_bf16
(2026-11-29, llama.cpp 2026-08 mainline, transformers 5.17): the qwen35.* keys equal anelab's export's (anelab adds
qwen35.vocab_size for its "none" vocabulary), the tensor names, shapes and types equal anelab's export's, and the
CPU fp32 logits of both files (f32 and bf16 outtype) are within 1.6e-6 of the logit range of the HF fixture's.
"""
import sys


def main() -> None:
    src, hf_dir, out = sys.argv[1:4]
    rest = sys.argv[4:]
    sys.path[:0] = [src, src + "/gguf-py"]
    import conversion.base as base  # noqa: E402 (the converter's package, from src)

    def no_vocab(self):
        self.gguf_writer.add_tokenizer_model("none")

    base.TextModel.set_vocab = no_vocab
    import convert_hf_to_gguf  # noqa: E402

    sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outfile", out, "--no-mtp", *rest]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
