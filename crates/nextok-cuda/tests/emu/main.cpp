// Runs one kernel of src/kernels.cu on the CPU emulation, with the grid the Rust launch code
// uses (src/backend.rs and src/ops.rs), reading its buffers from files and writing its
// output to a file: `emu KERNEL ARGS...`, see main() below.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "emu.h"
#define NEXTOK_CPU_EMULATION 1
#include "../../src/kernels.cu"

template <typename T>
static std::vector<T> read(const char* path) {
    FILE* f = std::fopen(path, "rb");
    if (!f) { std::perror(path); std::exit(2); }
    std::fseek(f, 0, SEEK_END);
    const long n = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    std::vector<T> v(n / sizeof(T));
    if (n > 0 && std::fread(v.data(), 1, n, f) != (size_t)n) { std::perror(path); std::exit(2); }
    std::fclose(f);
    return v;
}

template <typename T>
static void write(const char* path, const std::vector<T>& v) {
    FILE* f = std::fopen(path, "wb");
    if (!f || std::fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) { std::perror(path); std::exit(2); }
    std::fclose(f);
}

static int arg(char** a, int i) { return std::atoi(a[i]); }

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    const std::string k = argv[1];
    if (k == "matmul" && argc == 9) {
        // matmul LAYOUT ROWS COLS TOKENS W X OUT (LAYOUT: q4_0 q4_1 q8_0 f32 f16 bf16)
        const std::string layout = argv[2];
        const int rows = arg(argv, 3), cols = arg(argv, 4), tokens = arg(argv, 5);
        auto w = read<unsigned char>(argv[6]);
        auto x = read<float>(argv[7]);
        std::vector<float> out((size_t)rows * tokens, -1.0f);
        const bool blocks = layout[0] == 'q';
        const unsigned per_block = blocks ? ROWS_PER_BLOCK : 2 * ROWS_PER_BLOCK;
        const dim3 grid{(rows + per_block - 1) / per_block, (unsigned)((tokens + TILE - 1) / TILE), 1};
        const dim3 block{128, 1, 1};
        auto run = [&](auto f) { emu_launch(grid, block, [&] { f(w.data(), x.data(), out.data(), rows, cols, tokens, 0); }); };
        if (layout == "q4_0") run(matmul_q4_0);
        else if (layout == "q4_1") run(matmul_q4_1);
        else if (layout == "q8_0") run(matmul_q8_0);
        else if (layout == "f32") run(matmul_f32);
        else if (layout == "f16") run(matmul_f16);
        else if (layout == "bf16") run(matmul_bf16);
        else return 2;
        write(argv[8], out);
    } else if (k == "embed" && argc == 7) {
        // embed LAYOUT COLS W TOKENS OUT (TOKENS: i32 ids; LAYOUT as for matmul)
        const std::string layout = argv[2];
        const int cols = arg(argv, 3);
        auto w = read<unsigned char>(argv[4]);
        auto tokens = read<int>(argv[5]);
        const int n = (int)tokens.size();
        std::vector<float> out((size_t)n * cols, -1.0f);
        const unsigned total = (unsigned)(n * cols);
        auto run = [&](auto f) {
            emu_launch(dim3{std::min((total + 255) / 256, 4096u), 1, 1}, dim3{256, 1, 1},
                       [&] { f(w.data(), tokens.data(), out.data(), cols, n); });
        };
        if (layout == "q4_0") run(embed_q4_0);
        else if (layout == "q4_1") run(embed_q4_1);
        else if (layout == "q8_0") run(embed_q8_0);
        else if (layout == "f32") run(embed_f32);
        else if (layout == "f16") run(embed_f16);
        else if (layout == "bf16") run(embed_bf16);
        else return 2;
        write(argv[6], out);
    } else if (k == "attention" && argc == 13) {
        // attention ROWS HEADS KV_HEADS HD FIRST CAUSAL KEYS Q K V OUT
        const int rows = arg(argv, 2), heads = arg(argv, 3), kv_heads = arg(argv, 4), hd = arg(argv, 5);
        const int first = arg(argv, 6), causal = arg(argv, 7), keys = arg(argv, 8);
        auto q = read<float>(argv[9]);
        auto kk = read<float>(argv[10]);
        auto v = read<float>(argv[11]);
        std::vector<float> out((size_t)rows * heads * hd, -1.0f);
        std::vector<float> scores((size_t)rows * heads * keys);
        const float scale = 1.0f / std::sqrt((float)hd);
        emu_launch(dim3{(unsigned)(rows * heads), 1, 1}, dim3{ATTENTION_THREADS, 1, 1}, [&] {
            attention(q.data(), kk.data(), v.data(), out.data(), scores.data(), 0, heads, kv_heads, hd,
                      first, causal, keys, scale);
        });
        write(argv[12], out);
    } else if (k == "attention_paged" && argc == 16) {
        // attention_paged ROWS HEADS KV_HEADS HD FIRST CAUSAL KEYS LAYER LAYERS BLOCK_POSITIONS
        //                 Q POOL TABLE OUT
        // POOL: every block of a pool, one after another (LAYERS x 2 x BLOCK_POSITIONS x
        // KV_HEADS x HD f32 each, in the storage's layout); TABLE: the sequence's block numbers
        // (u32), turned here into the block addresses the backend passes.
        const int rows = arg(argv, 2), heads = arg(argv, 3), kv_heads = arg(argv, 4), hd = arg(argv, 5);
        const int first = arg(argv, 6), causal = arg(argv, 7), keys = arg(argv, 8);
        const int layer = arg(argv, 9), layers = arg(argv, 10), bp = arg(argv, 11);
        auto q = read<float>(argv[12]);
        auto pool = read<float>(argv[13]);
        auto ids = read<unsigned>(argv[14]);
        const size_t per_block = (size_t)layers * 2 * bp * kv_heads * hd;
        std::vector<unsigned long long> table;
        for (unsigned id : ids) {
            if ((size_t)(id + 1) * per_block > pool.size()) { std::fprintf(stderr, "block %u outside the pool\n", id); return 2; }
            table.push_back((unsigned long long)(pool.data() + (size_t)id * per_block));
        }
        std::vector<float> out((size_t)rows * heads * hd, -1.0f);
        std::vector<float> scores((size_t)rows * heads * keys);
        const float scale = 1.0f / std::sqrt((float)hd);
        emu_launch(dim3{(unsigned)(rows * heads), 1, 1}, dim3{ATTENTION_THREADS, 1, 1}, [&] {
            attention_paged(q.data(), table.data(), out.data(), scores.data(), 0, heads, kv_heads, hd,
                            first, causal, keys, scale, layer, bp);
        });
        write(argv[15], out);
    } else if (k == "write_kv_paged" && argc == 11) {
        // write_kv_paged LAYER LAYERS BLOCK_POSITIONS KV_TYPE POOL KEYS VALUES PLACES OUT
        // POOL: every block of a pool, as for attention_paged, written in place and returned in
        // OUT; KEYS, VALUES: the rows (ROW_LEN = KEYS / rows f32 each); PLACES: per row its
        // block number and slot (u32 pairs), turned here into the address and slot pairs the
        // backend passes.
        const int layer = arg(argv, 2), layers = arg(argv, 3), bp = arg(argv, 4), kv_type = arg(argv, 5);
        auto pool = read<float>(argv[6]);
        auto keys = read<float>(argv[7]);
        auto values = read<float>(argv[8]);
        auto ids = read<unsigned>(argv[9]);
        const int rows = (int)(ids.size() / 2);
        if (rows == 0 || keys.size() % rows != 0 || values.size() != keys.size()) { std::fprintf(stderr, "bad rows\n"); return 2; }
        const int row_len = (int)(keys.size() / rows);
        const size_t per_block = (size_t)layers * 2 * bp * row_len;
        std::vector<unsigned long long> places;
        for (int r = 0; r < rows; ++r) {
            const unsigned id = ids[2 * r];
            if ((size_t)(id + 1) * per_block > pool.size()) { std::fprintf(stderr, "block %u outside the pool\n", id); return 2; }
            places.push_back((unsigned long long)(pool.data() + (size_t)id * per_block));
            places.push_back(ids[2 * r + 1]);
        }
        const unsigned n = (unsigned)(rows * row_len);
        emu_launch(dim3{std::min((n + 255) / 256, 4096u), 1, 1}, dim3{256, 1, 1}, [&] {
            write_kv_paged(keys.data(), values.data(), places.data(), rows, row_len, layer, bp, kv_type);
        });
        write(argv[10], pool);
    } else if (k == "rms_norm_rows" && argc == 8) {
        // rms_norm_rows ROWS_FILE D EPS X W OUT, ROWS_FILE: i32 row numbers
        auto rows = read<int>(argv[2]);
        const int d = arg(argv, 3);
        const float eps = std::strtof(argv[4], nullptr);
        auto x = read<float>(argv[5]);
        auto w = read<float>(argv[6]);
        std::vector<float> out(rows.size() * (size_t)d);
        emu_launch(dim3{(unsigned)rows.size(), 1, 1}, dim3{ROW_THREADS, 1, 1},
                   [&] { rms_norm_rows(x.data(), rows.data(), w.data(), out.data(), d, eps); });
        write(argv[7], out);
    } else if (k == "rms_norm" && argc == 8) {
        // rms_norm ROWS D EPS X W OUT
        const int rows = arg(argv, 2), d = arg(argv, 3);
        const float eps = std::strtof(argv[4], nullptr);
        auto x = read<float>(argv[5]);
        auto w = read<float>(argv[6]);
        std::vector<float> out((size_t)rows * d);
        emu_launch(dim3{(unsigned)rows, 1, 1}, dim3{ROW_THREADS, 1, 1},
                   [&] { rms_norm(x.data(), w.data(), out.data(), d, eps); });
        write(argv[7], out);
    } else if (k == "rope" && argc == 9) {
        // rope ROWS HEADS HD NEOX X COS_SIN OUT (half = COS_SIN / ROWS / 2)
        const int rows = arg(argv, 2), heads = arg(argv, 3), hd = arg(argv, 4), neox = arg(argv, 5);
        auto x = read<float>(argv[6]);
        auto cs = read<float>(argv[7]);
        const int half = (int)(cs.size() / rows / 2);
        const unsigned n = (unsigned)(rows * heads * half);
        emu_launch(dim3{std::min((n + 255) / 256, 4096u), 1, 1}, dim3{256, 1, 1},
                   [&] { rope(x.data(), cs.data(), rows, heads, hd, half, neox); });
        write(argv[8], x);
    } else if (k == "add_bias" && argc == 5) {
        // add_bias X B OUT (rows = X / B)
        auto x = read<float>(argv[2]);
        auto b = read<float>(argv[3]);
        const int width = (int)b.size(), rows = (int)(x.size() / b.size());
        const unsigned n = (unsigned)x.size();
        emu_launch(dim3{std::min((n + 255) / 256, 4096u), 1, 1}, dim3{256, 1, 1},
                   [&] { add_bias(x.data(), b.data(), rows, width); });
        write(argv[4], x);
    } else if (k == "add" && argc == 5) {
        // add X Y OUT
        auto x = read<float>(argv[2]);
        auto y = read<float>(argv[3]);
        const int n = (int)x.size();
        emu_launch(dim3{std::min((unsigned)(n + 255) / 256, 4096u), 1, 1}, dim3{256, 1, 1},
                   [&] { add(x.data(), y.data(), n); });
        write(argv[4], x);
    } else if (k == "silu_mul" && argc == 5) {
        // silu_mul G U OUT
        auto g = read<float>(argv[2]);
        auto u = read<float>(argv[3]);
        const int n = (int)g.size();
        emu_launch(dim3{std::min((unsigned)(n + 255) / 256, 4096u), 1, 1}, dim3{256, 1, 1},
                   [&] { silu_mul(g.data(), u.data(), n); });
        write(argv[4], g);
    } else {
        std::fprintf(stderr, "unknown command or wrong argument count\n");
        return 2;
    }
    return 0;
}
