#!/usr/bin/env python3
"""Extracts the facts of llama.cpp's grammar integration test into
conformance/gbnf/llama-cpp-grammar-integration.json (issue #17).

llama.cpp's `tests/test-grammar-integration.cpp` checks, for each of its grammars (GBNF written
by hand, or made from a JSON Schema by llama.cpp's own converter), which strings the grammar
accepts and which it refuses; strings hold token references as a 0xff byte and a big-endian id.
This script copies the test, adds one line to each case that records it (the grammar exactly as
llama.cpp parses it, the strings, and whether llama.cpp's grammar builds at all), compiles it
against a llama.cpp build's static libraries, runs it (its own asserts still run, so every
recorded verdict is one llama.cpp holds), and writes the records as JSON.

Usage: tools/llama-grammar-facts.py LLAMA_CPP_SOURCE LLAMA_CPP_BUILD [OUT]
(the llama.cpp source vendored by llama-cpp-python 0.3.36, and a build of it with `common`).

A string is a list of pieces: a JSON string is UTF-8 text, a number is one token id.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

RECORD = r'''
#include <fstream>
static std::ofstream g_facts("FACTS_PATH");
static std::string facts_hex(const std::string & s) {
    static const char * d = "0123456789abcdef";
    std::string o;
    for (unsigned char c : s) { o += d[c >> 4]; o += d[c & 15]; }
    return o;
}
static void facts_case(const std::string & desc, const std::string & grammar, const char * root,
                       bool builds, const std::vector<std::string> & pass,
                       const std::vector<std::string> & fail) {
    g_facts << "{\"description\":\"" << facts_hex(desc) << "\",\"grammar\":\"" << facts_hex(grammar)
            << "\",\"root\":\"" << facts_hex(root) << "\",\"builds\":" << (builds ? "true" : "false")
            << ",\"passing\":[";
    for (size_t i = 0; i < pass.size(); i++) g_facts << (i ? "," : "") << "\"" << facts_hex(pass[i]) << "\"";
    g_facts << "],\"failing\":[";
    for (size_t i = 0; i < fail.size(); i++) g_facts << (i ? "," : "") << "\"" << facts_hex(fail[i]) << "\"";
    g_facts << "]}\n";
    g_facts.flush();
}
'''


def patch(src, facts_path):
    s = src
    # After the includes: the recorder.
    s = s.replace("using json = common_json;", "using json = common_json;\n" + RECORD.replace("FACTS_PATH", facts_path), 1)
    # Every passing/failing case, recorded as it is tested.
    s = s.replace(
        '    fprintf(stderr, "⚫ Testing %s\\n%s\\n", test_desc.c_str(), grammar_str.c_str());',
        '    facts_case(test_desc, grammar_str, "root", true, passing_strings, failing_strings);\n'
        '    fprintf(stderr, "⚫ Testing %s\\n%s\\n", test_desc.c_str(), grammar_str.c_str());',
        1,
    )
    # Grammars llama.cpp refuses to build.
    s = s.replace(
        '    fprintf(stderr, "⚫ Testing failure for grammar: %s\\n", grammar_str.c_str());',
        '    facts_case("build failure", grammar_str, "root", false, {}, {});\n'
        '    fprintf(stderr, "⚫ Testing failure for grammar: %s\\n", grammar_str.c_str());',
        1,
    )
    s = s.replace(
        "    llama_grammar_parser parsed_grammar;\n    parsed_grammar.parse(grammar_str.c_str());\n\n    // Ensure we parsed correctly\n    assert(!parsed_grammar.rules.empty());",
        '    facts_case("missing root rule", grammar_str, "root", false, {}, {});\n'
        "    llama_grammar_parser parsed_grammar;\n    parsed_grammar.parse(grammar_str.c_str());\n\n    // Ensure we parsed correctly\n    assert(!parsed_grammar.rules.empty());",
        1,
    )
    s = s.replace(
        '    fprintf(stderr, "    Expected error:  ");',
        '    facts_case("missing reference", grammar_str, "root", false, {}, {});\n'
        '    fprintf(stderr, "    Expected error:  ");',
        1,
    )
    s = s.replace(
        '    llama_grammar * failure_result = build_grammar_with_root(grammar_str, "nonexistent");',
        '    facts_case("missing root symbol", grammar_str, "nonexistent", false, {}, {});\n'
        '    llama_grammar * failure_result = build_grammar_with_root(grammar_str, "nonexistent");',
        1,
    )
    s = s.replace(
        '    llama_grammar * success_result = build_grammar_with_root(custom_root_grammar_str, "foobar");',
        '    facts_case("custom root missing", custom_root_grammar_str, "root", false, {}, {});\n'
        '    facts_case("custom root", custom_root_grammar_str, "foobar", true, {}, {});\n'
        '    llama_grammar * success_result = build_grammar_with_root(custom_root_grammar_str, "foobar");',
        1,
    )
    return s


def pieces(hexstr):
    """A test string as text pieces and token ids (llama.cpp's 0xff marker and 4-byte id)."""
    b = bytes.fromhex(hexstr)
    out, text, i = [], bytearray(), 0
    while i < len(b):
        if b[i] == 0xFF and i + 5 <= len(b):
            if text:
                out.append(text.decode("utf-8"))
                text = bytearray()
            out.append(int.from_bytes(b[i + 1 : i + 5], "big"))
            i += 5
        else:
            text.append(b[i])
            i += 1
    if text:
        out.append(text.decode("utf-8"))
    return out


def main():
    src_root, build = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
        os.path.dirname(here), "conformance", "gbnf", "llama-cpp-grammar-integration.json"
    )
    test = os.path.join(src_root, "tests", "test-grammar-integration.cpp")
    with tempfile.TemporaryDirectory() as tmp:
        facts = os.path.join(tmp, "facts.jsonl")
        cpp = os.path.join(src_root, "tests", "facts-grammar-integration.cpp")
        with open(test, encoding="utf-8") as f:
            patched = patch(f.read(), facts)
        assert patched.count("facts_case(") >= 8, "the test's shape changed: update the patch"
        with open(cpp, "w", encoding="utf-8") as f:
            f.write(patched)
        exe = os.path.join(tmp, "facts")
        inc = ["include", "src", "common", "ggml/include", "vendor"]
        libs = ["common/libllama-common.a", "common/libllama-common-base.a", "src/libllama.a",
                "ggml/src/libggml.a", "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a"]
        cmd = ["g++", "-std=c++17", "-O1", cpp, "-o", exe]
        cmd += [f"-I{os.path.join(src_root, d)}" for d in inc]
        cmd += [os.path.join(build, l) for l in libs if os.path.exists(os.path.join(build, l))]
        cmd += ["-lpthread", "-fopenmp", "-ldl"]
        try:
            subprocess.run(cmd, check=True)
        finally:
            os.remove(cpp)
        subprocess.run([exe], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cases = []
        with open(facts, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                cases.append({
                    "description": bytes.fromhex(r["description"]).decode("utf-8"),
                    "grammar": bytes.fromhex(r["grammar"]).decode("utf-8"),
                    "root": bytes.fromhex(r["root"]).decode("utf-8"),
                    "builds": r["builds"],
                    "passing": [pieces(x) for x in r["passing"]],
                    "failing": [pieces(x) for x in r["failing"]],
                })
    doc = {
        "source": "llama.cpp tests/test-grammar-integration.cpp, as vendored by llama-cpp-python 0.3.36 "
                  "(MIT licence); every verdict recorded while llama.cpp's own asserts ran",
        "format": "a string is a list of pieces: a JSON string is UTF-8 text, a number is one token id "
                  "(llama.cpp's test feeds text one code point per token, each with id 0)",
        "cases": cases,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(c["passing"]) + len(c["failing"]) for c in cases)
    print(f"{len(cases)} grammars, {n} strings -> {out}")


if __name__ == "__main__":
    main()
