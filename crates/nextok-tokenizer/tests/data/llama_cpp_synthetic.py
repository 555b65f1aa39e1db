# Tokenizes texts with llama.cpp (llama-cpp-python, vocab only) for each synthetic GGUF vocabulary.
import json, sys, llama_cpp
TEXTS = [
    "hello world", "Hello World!", "  leading and trailing  ", "the cat and the hat",
    "in 2024, 123456 items", "it's they'll WE'VE I'M", "line1\n\nline2\r\n\tx",
    "日本語のテキスト。", "😀 héllo wörld", "a  \n  b", "   ", "", "x<|eot_id|>y",
    "<s>hello", "he<tool>x", "hi€", "aaaa and the", "\u3000\u3000x", "٣٤ digits ³",
    "hello\n\n\n the  the   then",
]
out = {}
for name in sys.argv[2:]:
    llm = llama_cpp.Llama(model_path=f"{sys.argv[1]}/{name}.gguf", vocab_only=True, verbose=False)
    cases = []
    for text in TEXTS:
        for special in (False, True):
            ids = llm.tokenize(text.encode(), add_bos=False, special=special)
            detok = llm.detokenize(ids, special=True)
            cases.append({"text": text, "parse_special": special, "ids": ids, "detokenized_hex": detok.hex()})
    out[name] = cases
print(json.dumps(out, ensure_ascii=False, indent=1))
