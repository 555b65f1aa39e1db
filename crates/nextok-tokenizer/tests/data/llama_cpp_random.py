import json, random, sys, llama_cpp
random.seed(7)
pool = ["the", " the", "  ", "\n", "\r\n", "\t", " ", "123", "4", "٣", "²", "I'M", "'s", "we've", "😀", "👍🏽", "日本", "語", "。", "é", "ü", "ß", "Ω", "—", "$", "1,234.5", "<|im_start|>", "<|im_end|>", "<s>", "hello", "world", "\u3000", "\u00a0", "\u200b", "a", "b", "x", "!", "?", "(", ")", "{", "}", "/", "\\", "\"", "'", "-", "_", "abcabcabc", "ÄÖÜ", "Привет", "مرحبا", "\x7f", "\x01", "e\u0301", "ﬁ", "Ⅻ", "𝔘𝔫𝔦"]
texts = []
for _ in range(1500):
    n = random.randint(0, 12)
    texts.append("".join(random.choice(pool) for _ in range(n)))
for _ in range(300):
    n = random.randint(0, 20)
    texts.append("".join(chr(random.choice([random.randint(32, 126), random.randint(0x80, 0x2FFF), random.randint(0x3000, 0x9FFF), random.randint(0x1F300, 0x1FAFF), random.randint(0, 31)])) for _ in range(n)))
out = {}
for name, path in [(a.split('=')[0], a.split('=')[1]) for a in sys.argv[1:]]:
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out[name] = [{"text": t, "parse_special": s, "ids": llm.tokenize(t.encode(), add_bos=False, special=s)} for t in texts for s in (False, True)]
print(json.dumps(out, ensure_ascii=False))
