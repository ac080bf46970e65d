/*
 * Decode attention read through block tables on a CPU (paper §4.1, §5.1): one query token per
 * sequence attends to its context, whose keys and values stay where the paged cache holds them.
 *
 * Compiled on first use by paged/kernels/cpu_kernel.py (the system C compiler, -O3 -march=native)
 * and called through ctypes, which releases the GIL for the call.
 *
 * Layouts (element strides, row-major; pa_args_t below carries the sizes and strides):
 *   query        [num_seqs, num_heads, head_size]   sequences at q_seq_stride, heads at q_head_stride
 *   key_cache    [num_blocks, block_size, num_kv_heads, head_size]   contiguous
 *   value_cache  the same
 *   block_tables int32 rows, sequence s's at row_offsets[s] (or s * table_stride); entries past
 *                ceil(len / block_size) are never read
 *   context_lens [num_seqs] int32, each >= 1 (tokens)
 *   out          [num_seqs, num_heads, head_size]   contiguous, the query's dtype
 * Element types: 0 fp32, 1 bf16, 2 fp16. Half precision is widened to fp32 on load (or, for bf16
 * keys with AVX512-BF16, multiplied pairwise by vdpbf16ps, which adds exact products in fp32);
 * scores, softmax and the output accumulate in fp32 and the output is rounded once (to nearest
 * even). Block ids and offsets are computed in 64 bits.
 *
 * The work of one sequence: its context is cut into tiles of at most 16 tokens that lie in one
 * block, tiles into chunks of at most CHUNK_TILES, fewer where the chunk's keys or values of every
 * KV head would exceed CHUNK_BYTES (a tile of OPT-13B's 40 heads of 128 fp32 channels is 320 KB:
 * one tile per chunk, so step 3 reads values that step 1's prefetches brought into L2). Per chunk:
 *   1. the scores of every query head for every tile (q . k times the scale), a tile's keys of
 *      every KV head together (a block of the shipped model holds them in 4 KB);
 *   2. the online softmax: each head's maximum over the chunk; if it grew, the head's
 *      accumulator and sum are scaled by exp(old - new); then p = exp(score - max) in place;
 *   3. acc += p v over the chunk's tokens, per KV head (its group's accumulators in registers).
 * Only slots that hold a token of the sequence are read (a tile stops at the context length), so
 * whatever the cache holds elsewhere (NaN in the tests) never reaches the output.
 *
 * Two implementations of 1-3:
 *   - AVX-512 (__AVX512F__), head size a compile-time constant (32, 64, 80, 96, 128, 256), any
 *     GQA group. A tile's scores come out as 16-lane vectors over its tokens without a horizontal
 *     sum per token. Query heads in fours ("quads"): lane (g, j) of a vector holds head g's
 *     channel 4b + j (fp32; channels 8b + 2j, 8b + 2j + 1 for vdpbf16ps), so one FMA with the
 *     key's channels 4b..4b+3 broadcast to the four 128-bit lanes (a plain load, vbroadcastf32x4)
 *     serves four heads; a token's 16 lanes are 4 heads x 4 partial sums, and 16 tokens reduce to
 *     4 score vectors in 12 add steps and 8 lane shuffles. Heads left over (groups 1, 2, 3, ...)
 *     go one by one: a token's q . k as 16 partial sums, 16 tokens summed by a 4-level
 *     transpose-and-add tree (15 steps). exp is a degree-6 polynomial with vscalefps. Since the
 *     block table says where the next blocks are, the keys of the block PREFETCH_TOKENS tokens
 *     ahead (across into the next sequence) are prefetched into L1, each block's values into L2
 *     when its keys are read (a share of the lines before each KV head's scores), and the first
 *     lines of keys and values STREAM_TOKENS ahead into L2 (stream_ahead).
 *   - portable C for every other head size and CPU (GCC / clang vector types, which the compiler
 *     maps to the CPU's SIMD registers): a tile's keys of one KV head are transposed to
 *     [head_size][16] (8 x 8 blocks in registers), so a head's 16 scores are 16-wide
 *     multiply-adds over its channels; acc += p v runs 8 channels of up to 4 heads at a time in
 *     registers; the same prefetching.
 *
 * paged_attention_cpu_threads splits the sequences into ranges of about equal token counts, one
 * POSIX thread each; a sequence is computed by one thread with the same code, so the output does
 * not depend on the thread count.
 *
 * What the chunk size, the prefetch distances and the two implementations measured: docs/benchmarks.md.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define PA_F32 0
#define PA_BF16 1
#define PA_F16 2
#define TILE 16
#define CHUNK_TILES 16
#define WIDTH (CHUNK_TILES * TILE) /* score slots per head and chunk */
#define CHUNK_BYTES (256 * 1024) /* a chunk's values of every KV head at most this (L2), >= 1 tile */
#define PREFETCH_TOKENS 16 /* the keys of the block this many tokens ahead are prefetched into L1 */
#define STREAM_TOKENS 64   /* ... and the first lines of keys and values this far ahead into L2 */
#define STREAM_LINES 3

/* Return codes (0: done). */
#define PA_OK 0
#define PA_BAD_DTYPE -1
#define PA_NO_MEMORY -2
#define PA_BAD_SHAPE -3

/* The arguments of a call (mirrored by paged/kernels/cpu_kernel.py; every field 8 bytes). */
typedef struct {
    int64_t dtype;                       /* PA_F32, PA_BF16 or PA_F16 */
    int64_t num_heads, num_kv_heads, head_size, block_size;
    int64_t q_seq_stride, q_head_stride; /* elements */
    const int32_t *block_tables;         /* sequence s's row at row_offsets[s], or s * table_stride */
    int64_t table_stride;
    const int64_t *row_offsets;          /* [num_seqs] or NULL */
    const int32_t *context_lens;         /* [num_seqs] */
    int64_t seq_begin, seq_end;          /* the sequences this call computes */
    double scale;
    int64_t force_portable;              /* 1: the portable loops whatever the build */
} pa_args_t;

/* One call's view of the arguments and its scratch. */
typedef struct {
    int dtype;
    const void *query;
    int64_t q_seq_stride, q_head_stride;
    const void *key_cache, *value_cache;
    const int32_t *block_tables;
    int64_t table_stride;
    const int64_t *row_offsets;
    const int32_t *context_lens;
    void *out;
    int64_t num_heads, num_kv_heads, group, head_size, block_size, seq_begin, seq_end;
    int64_t prefetch_blocks, stream_blocks; /* ceil(PREFETCH_TOKENS / block_size), ceil(STREAM_TOKENS / block_size) */
    int chunk_tiles; /* tiles per chunk: CHUNK_TILES, fewer where a tile's values exceed CHUNK_BYTES / CHUNK_TILES */
    float scale;
    float *scores; /* [num_heads, WIDTH] */
    float *acc;    /* [num_heads, head_size] */
    float *qf;     /* [num_heads, head_size]: the query as the dot products read it */
    float *m, *l;  /* [num_heads] running maximum and sum */
    float *ktile;  /* TILE * head_size floats: a tile of keys widened to fp32 (AVX-512 without a native dot: [TILE][head_size]; portable: [head_size][TILE]) */
} job_t;

static inline const int32_t *table_row(const job_t *j, int64_t seq) {
    return j->block_tables + (j->row_offsets ? j->row_offsets[seq] : seq * j->table_stride);
}

typedef struct {
    int64_t slot;  /* first token row of the tile in the cache: block * block_size + offset */
    int64_t block; /* logical block of the sequence */
    int n;         /* tokens, 1..TILE */
} tile_t;

/* ---------------------------------------------------------------- element conversions (portable) */

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1fu) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: normalize */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < 0x38800000u) {                                    /* subnormal or zero in fp16 */
        if (a < 0x33000000u) return (uint16_t)sign;           /* at most half the smallest subnormal */
        uint32_t man = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
        uint32_t half = man >> shift, rest = man & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rest > mid || (rest == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = (a - 0x38000000u) >> 13, rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* exp(x) for x <= 0 (a score minus its maximum): a degree-6 polynomial on r = x - n ln 2, times
 * 2^n built in the exponent bits. Relative error about 2e-7; 0 below -87 (where exp is under
 * FLT_MIN) and for -inf; NaN stays NaN. Branch-free, so loops over it vectorize. */
static inline float exp_neg(float x) {
    float xc = x < -87.0f ? -87.0f : x; /* a NaN stays (the comparison is false) */
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x < -87.0f ? 0.0f : p * scale;
}

/* ------------------------------------------------------------------------------ tiles and chunks */

/* The tiles of tokens [*pos, len) that fit one chunk; advances *pos. Returns the tile count. */
static int next_chunk(const int32_t *table, int64_t block_size, int64_t len, int64_t *pos, tile_t *tiles,
                      int max_tiles) {
    int count = 0;
    int64_t p = *pos;
    while (p < len && count < max_tiles) {
        int64_t block = p / block_size, offset = p % block_size;
        int64_t n = block_size - offset;
        if (n > TILE) n = TILE;
        if (n > len - p) n = len - p;
        tiles[count].slot = (int64_t)table[block] * block_size + offset;
        tiles[count].block = block;
        tiles[count].n = (int)n;
        count++;
        p += n;
    }
    *pos = p;
    return count;
}

/* ------------------------------------------------------------------------------ portable kernel */

/* The same steps in plain C loops that a compiler vectorizes (-O3): a tile's keys of one KV head
 * are widened to fp32 and transposed to [head_size][16], so a head's 16 scores are 16-wide
 * multiply-adds over the channels; exp, the online softmax and acc += p v are loops over 16
 * lanes or over the channels. Any head size and group. */
#if defined(__FLT16_MAX__)
typedef _Float16 half_t; /* the compiler's half type: hardware conversions where the CPU has them */
#define HALF_TO_F32(p, i) ((float)((const half_t *)(p))[i])
#define F32_TO_HALF(p, i, x) (((half_t *)(p))[i] = (half_t)(x))
#else
#define HALF_TO_F32(p, i) f16_to_f32(((const uint16_t *)(p))[i])
#define F32_TO_HALF(p, i, x) (((uint16_t *)(p))[i] = f32_to_f16(x))
#endif

#define PI static inline __attribute__((always_inline))

PI float load_el(const void *p, int64_t i, const int dtype) {
    if (dtype == PA_F32) return ((const float *)p)[i];
    if (dtype == PA_BF16) {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return HALF_TO_F32(p, i);
}

PI void store_el(void *p, int64_t i, float x, const int dtype) {
    if (dtype == PA_F32) ((float *)p)[i] = x;
    else if (dtype == PA_BF16) ((uint16_t *)p)[i] = f32_to_bf16(x);
    else F32_TO_HALF(p, i, x);
}

/* 8 fp32 lanes as a GCC / clang vector (the compiler maps it to the CPU's SIMD registers: one
 * AVX2 register, two NEON ones); a tile's 16 lanes (one per token) are two of them. The flags
 * this file is built with (-O3 -march=native -fPIC -shared) are GCC's and clang's. */
typedef float half_lanes_t __attribute__((vector_size(32)));
typedef uint16_t u16x8_t __attribute__((vector_size(16)));
typedef uint32_t u32x8_t __attribute__((vector_size(32)));
typedef struct {
    half_lanes_t lo, hi;
} lanes_t;

PI lanes_t lanes_zero(void) {
    lanes_t s = {{0}, {0}};
    return s;
}

PI lanes_t lanes_madd(lanes_t s, float q, const float *k) {
    half_lanes_t lo, hi;
    memcpy(&lo, k, sizeof lo);
    memcpy(&hi, k + 8, sizeof hi);
    s.lo += q * lo;
    s.hi += q * hi;
    return s;
}

PI void lanes_store(float *out, lanes_t s) {
    memcpy(out, &s.lo, sizeof s.lo);
    memcpy(out + 8, &s.hi, sizeof s.hi);
}

/* 8 elements at element index i of p, as fp32 lanes. */
PI half_lanes_t load8(const void *p, int64_t i, const int dtype) {
    half_lanes_t v;
    if (dtype == PA_F32) {
        memcpy(&v, (const float *)p + i, sizeof v);
    } else if (dtype == PA_BF16) {
        u16x8_t h;
        memcpy(&h, (const uint16_t *)p + i, sizeof h);
        u32x8_t u = __builtin_convertvector(h, u32x8_t) << 16;
        memcpy(&v, &u, sizeof v);
    } else {
        for (int c = 0; c < 8; c++) v[c] = load_el(p, i + c, dtype);
    }
    return v;
}

/* kt[d * TILE + t] = key channel d of token t (rows `row` elements apart from element `base`),
 * widened to fp32; tokens t >= n are 0. With GCC >= 12 or clang, 8 x 8 blocks are transposed in
 * vector registers (24 shuffles each); otherwise, and for channels past a multiple of 8, one
 * element at a time. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define HAVE_SHUFFLEVECTOR 1
#else
#define HAVE_SHUFFLEVECTOR 0
#endif

PI void transpose_tile(float *kt, const void *cache, int64_t base, int64_t row, int n, int64_t D, const int dtype) {
    int64_t d0 = 0;
#if HAVE_SHUFFLEVECTOR
    for (; d0 + 8 <= D; d0 += 8)
        for (int t0 = 0; t0 < TILE; t0 += 8) {
            half_lanes_t r[8], w[8], u[8];
            for (int k = 0; k < 8; k++) r[k] = t0 + k < n ? load8(cache, base + (t0 + k) * row + d0, dtype) : (half_lanes_t){0};
            for (int k = 0; k < 8; k += 2) {
                w[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);
                w[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
            }
            for (int k = 0; k < 8; k += 4) {
                u[k] = __builtin_shufflevector(w[k], w[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
                u[k + 1] = __builtin_shufflevector(w[k], w[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
                u[k + 2] = __builtin_shufflevector(w[k + 1], w[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
                u[k + 3] = __builtin_shufflevector(w[k + 1], w[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
            }
            for (int k = 0; k < 4; k++) {
                half_lanes_t lo = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
                half_lanes_t hi = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
                memcpy(kt + (d0 + k) * TILE + t0, &lo, sizeof lo);
                memcpy(kt + (d0 + k + 4) * TILE + t0, &hi, sizeof hi);
            }
        }
#endif
    for (int t = 0; t < TILE; t++)
        for (int64_t d = d0; d < D; d++) kt[d * TILE + t] = t < n ? load_el(cache, base + t * row + d, dtype) : 0.0f;
}

/* Prefetch bytes [lo, hi) of a block's keys or values (hint 0: into L1, 1: into L2), a line at a time. */
PI void prefetch_block(const void *cache, int64_t block, int64_t block_bytes, int64_t lo, int64_t hi, int hint) {
    const char *p = (const char *)cache + block * block_bytes;
    if (hint == 0)
        for (int64_t o = lo; o < hi; o += 64) __builtin_prefetch(p + o, 0, 3);
    else
        for (int64_t o = lo; o < hi; o += 64) __builtin_prefetch(p + o, 0, 2);
}

/* Bytes [lo, hi) of the keys j->prefetch_blocks logical blocks after `block`, crossing into the next sequence. */
PI void prefetch_ahead(const job_t *j, int64_t seq, int64_t block, int64_t num_blocks, int64_t block_bytes, int64_t lo,
                       int64_t hi) {
    int64_t ahead = block + j->prefetch_blocks;
    if (ahead < num_blocks) {
        prefetch_block(j->key_cache, table_row(j, seq)[ahead], block_bytes, lo, hi, 0);
    } else if (seq + 1 < j->seq_end) {
        int64_t next = ahead - num_blocks, next_blocks = (j->context_lens[seq + 1] + j->block_size - 1) / j->block_size;
        if (next < next_blocks) prefetch_block(j->key_cache, table_row(j, seq + 1)[next], block_bytes, lo, hi, 0);
    }
}

/* The first STREAM_LINES lines of the keys and values j->stream_blocks logical blocks after `block`
 * into L2: a few ascending misses in a page start the core's L2 streamer on the rest of it, which
 * keeps more lines in flight than prefetches into L1 can (5-12% faster at L3- and DRAM-sized grid
 * points than without). */
PI void stream_ahead(const job_t *j, const int32_t *table, int64_t block, int64_t num_blocks, int64_t block_bytes) {
    int64_t far = block + j->stream_blocks;
    if (far >= num_blocks) return;
    const char *k = (const char *)j->key_cache + (int64_t)table[far] * block_bytes;
    const char *v = (const char *)j->value_cache + (int64_t)table[far] * block_bytes;
    for (int64_t o = 0; o < STREAM_LINES * 64 && o < block_bytes; o += 64) {
        __builtin_prefetch(k + o, 0, 2);
        __builtin_prefetch(v + o, 0, 2);
    }
}

/* Step 2 for heads [h0, h0 + nh): each head's maximum over the chunk's tiles (lanes past a tile's
 * tokens hold -inf); if it grew, the head's accumulator and sum are scaled by exp(old - new);
 * then p = exp(score - max) in place. */
static void online_softmax_portable(const job_t *j, int64_t h0, int64_t nh, int count) {
    const int64_t D = j->head_size;
    for (int64_t hh = h0; hh < h0 + nh; hh++) {
        float *s = j->scores + hh * WIDTH;
        float lane_max[TILE], lane_sum[TILE] = {0}; /* per lane, so the loops vectorize without reassociating */
        for (int t = 0; t < TILE; t++) lane_max[t] = j->m[hh];
        for (int i = 0; i < count; i++)
            for (int t = 0; t < TILE; t++) lane_max[t] = s[i * TILE + t] > lane_max[t] ? s[i * TILE + t] : lane_max[t];
        float best = lane_max[0], sum = 0.0f;
        for (int t = 1; t < TILE; t++) best = lane_max[t] > best ? lane_max[t] : best;
        float alpha = j->m[hh] == -INFINITY ? 0.0f : exp_neg(j->m[hh] - best);
        j->m[hh] = best;
        for (int i = 0; i < count; i++)
            for (int t = 0; t < TILE; t++) {
                float p = exp_neg(s[i * TILE + t] - best);
                s[i * TILE + t] = p;
                lane_sum[t] += p;
            }
        for (int t = 0; t < TILE; t++) sum += lane_sum[t];
        j->l[hh] = j->l[hh] * alpha + sum;
        float *a = j->acc + hh * D;
        for (int64_t d = 0; d < D; d++) a[d] *= alpha;
    }
}

PI void sequence_portable_as(const int dtype, const job_t *j, int64_t seq) {
    const int64_t G = j->group, D = j->head_size, kv = j->num_kv_heads, row = kv * D;
    const int64_t block_bytes = j->block_size * row * (dtype == PA_F32 ? 4 : 2);
    const int32_t *table = table_row(j, seq);
    const int64_t len = j->context_lens[seq], num_blocks = (len + j->block_size - 1) / j->block_size;
    float *qf = j->qf, *acc = j->acc, *kt = j->ktile; /* kt: [D][TILE] */
    tile_t tiles[CHUNK_TILES];
    for (int64_t hh = 0; hh < j->num_heads; hh++) {
        const int64_t qoff = seq * j->q_seq_stride + hh * j->q_head_stride;
        for (int64_t d = 0; d < D; d++) {
            qf[hh * D + d] = load_el(j->query, qoff + d, dtype) * j->scale;
            acc[hh * D + d] = 0.0f;
        }
        j->m[hh] = -INFINITY;
        j->l[hh] = 0.0f;
    }
    if (seq == j->seq_begin) /* later sequences' first blocks were prefetched by the one before */
        for (int64_t b = 0; b < j->prefetch_blocks && b < num_blocks; b++)
            prefetch_block(j->key_cache, table[b], block_bytes, 0, block_bytes, 0);
    int64_t pos = 0;
    while (pos < len) {
        int count = next_chunk(table, j->block_size, len, &pos, tiles, j->chunk_tiles);
        for (int i = 0; i < count; i++) { /* 1. scores */
            const int n = tiles[i].n;
            const int first = tiles[i].slot % j->block_size == 0 || i == 0;
            for (int64_t h = 0; h < kv; h++) {
                if (first) {
                    int64_t lo = (block_bytes * h / kv) & ~(int64_t)63;
                    int64_t hi = h == kv - 1 ? block_bytes : (block_bytes * (h + 1) / kv) & ~(int64_t)63;
                    prefetch_ahead(j, seq, tiles[i].block, num_blocks, block_bytes, lo, hi);
                    if (h == 0) stream_ahead(j, table, tiles[i].block, num_blocks, block_bytes);
                    prefetch_block(j->value_cache, table[tiles[i].block], block_bytes, lo, hi, 1);
                }
                const int64_t base = tiles[i].slot * row + h * D;
                transpose_tile(kt, j->key_cache, base, row, n, D, dtype);
                for (int64_t g = 0; g < G; g++) {
                    const float *q = qf + (h * G + g) * D;
                    lanes_t s = lanes_zero();
                    for (int64_t d = 0; d < D; d++) s = lanes_madd(s, q[d], kt + d * TILE);
                    float *out = j->scores + (h * G + g) * WIDTH + i * TILE;
                    lanes_store(out, s);
                    for (int t = n; t < TILE; t++) out[t] = -INFINITY;
                }
            }
        }
        online_softmax_portable(j, 0, j->num_heads, count); /* 2. */
        for (int64_t h = 0; h < kv; h++) /* 3. acc += p v: per 8 channels, up to 4 heads of the group at once */
            for (int64_t d0 = 0; d0 < D; d0 += 8)
                for (int64_t g0 = 0; g0 < G; g0 += 4) {
                    const int ng = G - g0 < 4 ? (int)(G - g0) : 4;
                    const int64_t hh0 = h * G + g0;
                    if (D - d0 < 8) { /* the last channels of a head size that is not a multiple of 8 */
                        for (int k = 0; k < ng; k++)
                            for (int i = 0; i < count; i++)
                                for (int t = 0; t < tiles[i].n; t++)
                                    for (int64_t d = d0; d < D; d++)
                                        acc[(hh0 + k) * D + d] += j->scores[(hh0 + k) * WIDTH + i * TILE + t]
                                                                  * load_el(j->value_cache, (tiles[i].slot + t) * row + h * D + d, dtype);
                        continue;
                    }
                    half_lanes_t a[4] = {{0}, {0}, {0}, {0}};
                    for (int k = 0; k < ng; k++) memcpy(&a[k], acc + (hh0 + k) * D + d0, sizeof a[k]);
                    for (int i = 0; i < count; i++) {
                        const float *p = j->scores + hh0 * WIDTH + i * TILE;
                        int64_t base = tiles[i].slot * row + h * D + d0;
                        for (int t = 0; t < tiles[i].n; t++, base += row) {
                            const half_lanes_t v = load8(j->value_cache, base, dtype);
                            for (int k = 0; k < 4; k++)
                                if (k < ng) a[k] += p[k * WIDTH + t] * v;
                        }
                    }
                    for (int k = 0; k < ng; k++) memcpy(acc + (hh0 + k) * D + d0, &a[k], sizeof a[k]);
                }
    }
    for (int64_t hh = 0; hh < j->num_heads; hh++) {
        float inv = 1.0f / j->l[hh];
        for (int64_t d = 0; d < D; d++) store_el(j->out, (seq * j->num_heads + hh) * D + d, acc[hh * D + d] * inv, dtype);
    }
}

static void sequence_portable(const job_t *j, int64_t seq) {
    if (j->dtype == PA_F32) sequence_portable_as(PA_F32, j, seq);
    else if (j->dtype == PA_BF16) sequence_portable_as(PA_BF16, j, seq);
    else sequence_portable_as(PA_F16, j, seq);
}

/* ---------------------------------------------------------------------------------- AVX-512 kernel */
#if defined(__AVX512F__)

#define AI static inline __attribute__((always_inline))
#if defined(__AVX512BF16__)
#define HAVE_DP 1
#else
#define HAVE_DP 0
#endif

/* 16 elements at element index i of p, as fp32. */
AI __m512 load16(const void *p, int64_t i, const int dtype) {
    if (dtype == PA_F32) return _mm512_loadu_ps((const float *)p + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    if (dtype == PA_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

AI void store16(void *p, int64_t i, __m512 x, const int dtype) {
    if (dtype == PA_F32) {
        _mm512_storeu_ps((float *)p + i, x);
        return;
    }
    __m256i h;
    if (dtype == PA_F16) {
        h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else { /* round to nearest even; NaN kept, quiet */
        __m512i u = _mm512_castps_si512(x), one = _mm512_set1_epi32(1);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
        __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
        h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
    }
    _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), h);
}

/* exp(x) for x <= 0, 16 lanes (see exp_neg). */
AI __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-103.0f);
    __mmask16 zero = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(lo, x); /* a NaN in x stays (max returns its second operand) */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.3981999507e-3f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~zero, _mm512_scalef_ps(p, n));
}

AI __m512 mask_tail(__m512 s, int n) {
    return n < TILE ? _mm512_mask_mov_ps(s, (__mmask16)~((1u << n) - 1u), _mm512_set1_ps(-INFINITY)) : s;
}

/* Quads: acc[t] lanes (g, j) hold 4 partial sums of head g's score for token t; returns head g's
 * 16 scores (token t in lane t) in S[g]. 12 adds, 32 in-lane and 8 cross-lane shuffles. */
AI void reduce_quad(const __m512 *acc, __m512 *S) {
    __m512 w[8], r[4];
    for (int k = 0; k < 8; k++) { /* per 128-bit lane: [a_p0, a_p1, b_p0, b_p1], tokens a = 2k, b = 2k + 1 */
        __m512d a = _mm512_castps_pd(acc[2 * k]), b = _mm512_castps_pd(acc[2 * k + 1]);
        w[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int k = 0; k < 4; k++) /* per 128-bit lane g: head g's scores of tokens 4k .. 4k + 3 */
        r[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 t0 = _mm512_shuffle_f32x4(r[0], r[1], _MM_SHUFFLE(1, 0, 1, 0));
    __m512 t1 = _mm512_shuffle_f32x4(r[0], r[1], _MM_SHUFFLE(3, 2, 3, 2));
    __m512 t2 = _mm512_shuffle_f32x4(r[2], r[3], _MM_SHUFFLE(1, 0, 1, 0));
    __m512 t3 = _mm512_shuffle_f32x4(r[2], r[3], _MM_SHUFFLE(3, 2, 3, 2));
    S[0] = _mm512_shuffle_f32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
    S[1] = _mm512_shuffle_f32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
    S[2] = _mm512_shuffle_f32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
    S[3] = _mm512_shuffle_f32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

/* One head: v[s] holds 16 partial sums of the score of token TOKEN_OF(s) (a 4 x 4 transpose of
 * s, its own inverse); returns the 16 scores with token t in lane t. */
#define TOKEN_OF(s) ((((s) & 3) << 2) | ((s) >> 2))

AI __m512 reduce_single(const __m512 *v) {
    __m512 c[8], d[4], e[2];
    for (int k = 0; k < 8; k++) /* 256-bit halves: [v2k, v2k+1] */
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 4; k++) /* 128-bit quarters: [v4k, v4k+1, v4k+2, v4k+3] */
        d[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int k = 0; k < 2; k++) { /* per 128-bit lane j: pairs (v8k+j, v8k+4+j) */
        __m512d a = _mm512_castps_pd(d[2 * k]), b = _mm512_castps_pd(d[2 * k + 1]);
        e[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* per 128-bit lane j: [vj, v4+j, v8+j, v12+j] */
    return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Key element type as the dot products read it: fp32, or bf16 with vdpbf16ps. */
#define KT_F32 0
#define KT_DP 1

/* Broadcast channels [c, c + 4) (fp32) or [c, c + 8) (bf16 pairs) of a key row to the 4 lanes. */
AI __m512 key_quad(const void *k, int64_t c, const int kt) {
    if (kt == KT_F32) return _mm512_broadcast_f32x4(_mm_loadu_ps((const float *)k + c));
    return _mm512_castsi512_ps(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)((const uint16_t *)k + c))));
}

AI __m512 madd(__m512 acc, __m512 q, __m512 k, const int kt) {
#if HAVE_DP
    if (kt == KT_DP) return _mm512_dpbf16_ps(acc, (__m512bh)q, (__m512bh)k);
#endif
    (void)kt;
    return _mm512_fmadd_ps(q, k, acc);
}

/* Step 1 for one quad and tile: S[g] = the 16 scores of head g (scale applied, lanes >= n -inf).
 * Q: the quad's query vectors (D / 4 of them, fp32 scaled; D / 8 bf16-pair vectors for KT_DP);
 * k: the tile's first key row of this KV head, rows `row` elements apart. */
AI void quad_scores(const int D, const int kt, const float *Q, const void *k, int64_t row, int n, float scale, __m512 *S) {
    const int per = kt == KT_F32 ? 4 : 8; /* channels per vector lane group */
    const int elem = kt == KT_F32 ? 4 : 2;
    __m512 acc[16];
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    for (int c0 = 0; c0 < D; c0 += 8 * per) { /* 8 query vectors at a time */
        const int nb = (D - c0) / per < 8 ? (D - c0) / per : 8;
        __m512 q[8];
        for (int b = 0; b < nb; b++) q[b] = _mm512_loadu_ps(Q + 16 * (c0 / per + b));
        const char *kp = (const char *)k + (int64_t)c0 * elem;
        if (n == TILE) {
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) {
#pragma GCC unroll 8
                for (int b = 0; b < nb; b++) acc[t] = madd(acc[t], q[b], key_quad(kp, b * per, kt), kt);
                kp += row * elem;
            }
        } else {
            for (int t = 0; t < n; t++) {
#pragma GCC unroll 8
                for (int b = 0; b < nb; b++) acc[t] = madd(acc[t], q[b], key_quad(kp, b * per, kt), kt);
                kp += row * elem;
            }
        }
    }
    reduce_quad(acc, S);
    for (int g = 0; g < 4; g++) {
        if (kt == KT_DP) S[g] = _mm512_mul_ps(S[g], _mm512_set1_ps(scale));
        S[g] = mask_tail(S[g], n);
    }
}

/* Step 1 for one head and tile (q: D / 16 fp32 scaled vectors, or D / 32 bf16 vectors). */
AI __m512 single_scores(const int D, const int kt, const float *q, const void *k, int64_t row, int n, float scale) {
    const int per = kt == KT_F32 ? 16 : 32, elem = kt == KT_F32 ? 4 : 2;
    __m512 v[16];
    const char *kp = (const char *)k;
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        __m512 a = _mm512_setzero_ps();
        if (t < n) {
            for (int b = 0; b < D / per; b++) {
                __m512 kv = kt == KT_F32 ? _mm512_loadu_ps((const float *)kp + 16 * b)
                                         : _mm512_castsi512_ps(_mm512_loadu_si512((const uint16_t *)kp + 32 * b));
                a = madd(a, _mm512_loadu_ps(q + 16 * b), kv, kt);
            }
        }
        v[TOKEN_OF(t)] = a;
        kp += row * elem;
    }
    __m512 s = reduce_single(v);
    if (kt == KT_DP) s = _mm512_mul_ps(s, _mm512_set1_ps(scale));
    return mask_tail(s, n);
}

/* Step 3 for NH heads from head0 (NH <= 4; their p in the scores): acc += p v over the chunk. */
AI void pv_heads(const int dtype, const int D, const int NH, const job_t *j, int64_t head0, int64_t h,
                 const tile_t *tiles, int count) {
    const int64_t row = j->num_kv_heads * D;
    for (int c0 = 0; c0 < D; c0 += 64) {
        const int nv = (D - c0 < 64 ? D - c0 : 64) / 16;
        __m512 a[4][4];
        for (int g = 0; g < NH; g++)
            for (int v = 0; v < nv; v++) a[g][v] = _mm512_loadu_ps(j->acc + (head0 + g) * D + c0 + 16 * v);
        for (int i = 0; i < count; i++) {
            const float *p = j->scores + head0 * WIDTH + i * TILE;
            int64_t base = tiles[i].slot * row + h * D + c0;
            for (int t = 0; t < tiles[i].n; t++, base += row) {
                __m512 vr[4];
                for (int v = 0; v < nv; v++) vr[v] = load16(j->value_cache, base + 16 * v, dtype);
                for (int g = 0; g < NH; g++) {
                    __m512 pg = _mm512_set1_ps(p[g * WIDTH + t]);
                    for (int v = 0; v < nv; v++) a[g][v] = _mm512_fmadd_ps(pg, vr[v], a[g][v]);
                }
            }
        }
        for (int g = 0; g < NH; g++)
            for (int v = 0; v < nv; v++) _mm512_storeu_ps(j->acc + (head0 + g) * D + c0 + 16 * v, a[g][v]);
    }
}

/* Step 2 for heads [h0, h0 + nh) (vectorized online_softmax_portable). */
AI void online_softmax(const int D, const job_t *j, int64_t h0, int64_t nh, int count) {
    for (int64_t hh = h0; hh < h0 + nh; hh++) {
        float *s = j->scores + hh * WIDTH;
        __m512 mx = _mm512_set1_ps(j->m[hh]);
        for (int i = 0; i < count; i++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + i * TILE));
        float best = _mm512_reduce_max_ps(mx);
        float alpha = j->m[hh] == -INFINITY ? 0.0f : exp_neg(j->m[hh] - best);
        j->m[hh] = best;
        __m512 b = _mm512_set1_ps(best), sum = _mm512_setzero_ps();
        for (int i = 0; i < count; i++) {
            __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i * TILE), b));
            _mm512_storeu_ps(s + i * TILE, p);
            sum = _mm512_add_ps(sum, p);
        }
        j->l[hh] = j->l[hh] * alpha + _mm512_reduce_add_ps(sum);
        if (alpha != 1.0f) {
            __m512 al = _mm512_set1_ps(alpha);
            for (int v = 0; v < D / 16; v++)
                _mm512_storeu_ps(j->acc + hh * D + 16 * v, _mm512_mul_ps(al, _mm512_loadu_ps(j->acc + hh * D + 16 * v)));
        }
    }
}

/* One sequence with head size D and element type dtype known at compile time. */
AI void sequence_avx512(const int dtype, const int D, const job_t *j, int64_t seq) {
    const int kt = (dtype == PA_BF16 && HAVE_DP && D % 32 == 0) ? KT_DP : KT_F32;
    const int widen = kt == KT_F32 && dtype != PA_F32; /* keys widened to fp32 into j->ktile first */
    const int64_t kv = j->num_kv_heads, G = j->group, row = kv * D, quads = G / 4;
    const int64_t elem = dtype == PA_F32 ? 4 : 2, block_bytes = j->block_size * row * elem;
    const int32_t *table = table_row(j, seq);
    const int64_t len = j->context_lens[seq], num_blocks = (len + j->block_size - 1) / j->block_size;
    float *qf = j->qf;
    tile_t tiles[CHUNK_TILES];

    /* The query as the dot products read it: per quad D / 4 vectors with lane (g, j) = channel
     * 4b + j of head g (fp32, scaled) or D / 8 vectors of bf16 pairs 8b + 2j, 8b + 2j + 1 (128-bit
     * pieces of the 4 heads' rows, put side by side); per single head its channels (scaled fp32,
     * or bf16 as they are). */
    float *rows = j->ktile; /* 4 rows of D floats (or D / 2 bf16 pairs) */
    for (int64_t h = 0; h < kv; h++) {
        for (int64_t g = 0; g < G; g++) {
            const int64_t hh = h * G + g, qoff = seq * j->q_seq_stride + hh * j->q_head_stride;
            const int in_quad = g < quads * 4;
            float *row_out = in_quad ? rows + (g % 4) * D : qf + hh * D;
            if (kt == KT_DP)
                for (int v = 0; v < D / 32; v++)
                    _mm512_storeu_si512(row_out + 16 * v, _mm512_loadu_si512((const uint16_t *)j->query + qoff + 32 * v));
            else
                for (int v = 0; v < D / 16; v++)
                    _mm512_storeu_ps(row_out + 16 * v, _mm512_mul_ps(load16(j->query, qoff + 16 * v, dtype), _mm512_set1_ps(j->scale)));
            if (in_quad && g % 4 == 3) {
                float *dst = qf + (hh - 3) * D;
                for (int b = 0; b < (kt == KT_DP ? D / 8 : D / 4); b++) {
                    __m512 x = _mm512_castps128_ps512(_mm_loadu_ps(rows + 4 * b));
                    x = _mm512_insertf32x4(x, _mm_loadu_ps(rows + D + 4 * b), 1);
                    x = _mm512_insertf32x4(x, _mm_loadu_ps(rows + 2 * D + 4 * b), 2);
                    x = _mm512_insertf32x4(x, _mm_loadu_ps(rows + 3 * D + 4 * b), 3);
                    _mm512_storeu_ps(dst + 16 * b, x);
                }
            }
            for (int v = 0; v < D / 16; v++) _mm512_storeu_ps(j->acc + hh * D + 16 * v, _mm512_setzero_ps());
            j->m[hh] = -INFINITY;
            j->l[hh] = 0.0f;
        }
    }
    if (seq == j->seq_begin) /* later sequences' first blocks were prefetched by the one before */
        for (int64_t b = 0; b < j->prefetch_blocks && b < num_blocks; b++)
            prefetch_block(j->key_cache, table[b], block_bytes, 0, block_bytes, 0);

    int64_t pos = 0;
    while (pos < len) {
        int count = next_chunk(table, j->block_size, len, &pos, tiles, j->chunk_tiles);
        /* 1. scores, tile by tile (a block's keys of every KV head together) */
        for (int i = 0; i < count; i++) {
            const int n = tiles[i].n;
            const int first = tiles[i].slot % j->block_size == 0 || i == 0;
            for (int64_t h = 0; h < kv; h++) {
                if (first) { /* a share of the block's prefetches per KV head, not all at once */
                    int64_t lo = (block_bytes * h / kv) & ~(int64_t)63;
                    int64_t hi = h == kv - 1 ? block_bytes : (block_bytes * (h + 1) / kv) & ~(int64_t)63;
                    prefetch_ahead(j, seq, tiles[i].block, num_blocks, block_bytes, lo, hi);
                    if (h == 0) stream_ahead(j, table, tiles[i].block, num_blocks, block_bytes);
                    prefetch_block(j->value_cache, table[tiles[i].block], block_bytes, lo, hi, 1);
                }
                const float *qh = qf + h * G * D;
                float *sh = j->scores + h * G * WIDTH;
                const void *k = (const char *)j->key_cache + (tiles[i].slot * row + h * D) * elem;
                int64_t krow = row;
                if (widen) {
                    for (int t = 0; t < n; t++)
                        for (int v = 0; v < D / 16; v++)
                            _mm512_storeu_ps(j->ktile + t * D + 16 * v, load16(k, t * row + 16 * v, dtype));
                    k = j->ktile;
                    krow = D;
                }
                for (int64_t c = 0; c < quads; c++) {
                    __m512 S[4];
                    quad_scores(D, kt, qh + c * 4 * D, k, krow, n, j->scale, S);
                    for (int g = 0; g < 4; g++) _mm512_storeu_ps(sh + (c * 4 + g) * WIDTH + i * TILE, S[g]);
                }
                for (int64_t g = quads * 4; g < G; g++)
                    _mm512_storeu_ps(sh + g * WIDTH + i * TILE, single_scores(D, kt, qh + g * D, k, krow, n, j->scale));
            }
        }
        online_softmax(D, j, 0, j->num_heads, count); /* 2. */
        for (int64_t h = 0; h < kv; h++) /* 3. acc += p v, per KV head (the accumulators in registers) */
            for (int64_t g = 0; g < G; g += 4) {
                int64_t nh = G - g < 4 ? G - g : 4;
                if (nh == 4) pv_heads(dtype, D, 4, j, h * G + g, h, tiles, count);
                else if (nh == 3) pv_heads(dtype, D, 3, j, h * G + g, h, tiles, count);
                else if (nh == 2) pv_heads(dtype, D, 2, j, h * G + g, h, tiles, count);
                else pv_heads(dtype, D, 1, j, h * G + g, h, tiles, count);
            }
    }
    for (int64_t hh = 0; hh < j->num_heads; hh++) {
        __m512 inv = _mm512_set1_ps(1.0f / j->l[hh]);
        for (int v = 0; v < D / 16; v++)
            store16(j->out, (seq * j->num_heads + hh) * D + 16 * v, _mm512_mul_ps(inv, _mm512_loadu_ps(j->acc + hh * D + 16 * v)), dtype);
    }
}

typedef void (*sequence_fn)(const job_t *, int64_t);

#define INSTANCE(DT, DTYPE, D) \
    static void seq_##DT##_##D(const job_t *j, int64_t seq) { sequence_avx512(DTYPE, D, j, seq); }
#define INSTANCES(DT, DTYPE) \
    INSTANCE(DT, DTYPE, 32) INSTANCE(DT, DTYPE, 64) INSTANCE(DT, DTYPE, 80) INSTANCE(DT, DTYPE, 96) INSTANCE(DT, DTYPE, 128) INSTANCE(DT, DTYPE, 256)
INSTANCES(f32, PA_F32)
INSTANCES(bf16, PA_BF16)
INSTANCES(f16, PA_F16)
#define ROW(DT) {seq_##DT##_32, seq_##DT##_64, seq_##DT##_80, seq_##DT##_96, seq_##DT##_128, seq_##DT##_256}
static const sequence_fn SPECIALIZED[3][6] = {ROW(f32), ROW(bf16), ROW(f16)};
static const int64_t SPECIALIZED_SIZES[6] = {32, 64, 80, 96, 128, 256};

static sequence_fn specialized(int dtype, int64_t head_size) {
    for (int i = 0; i < 6; i++)
        if (SPECIALIZED_SIZES[i] == head_size) return SPECIALIZED[dtype][i];
    return 0;
}
#else
typedef void (*sequence_fn)(const job_t *, int64_t);
static sequence_fn specialized(int dtype, int64_t head_size) {
    (void)dtype, (void)head_size;
    return 0;
}
#endif

/* ------------------------------------------------------------------------------------ entry points */

/* Which code computes the shape in this build: 2 an AVX-512 instance, 1 the portable loops built for
 * AVX2 and FMA (x86-64-v3), 0 the portable loops for another CPU. */
int paged_attention_cpu_path(int64_t dtype, int64_t head_size) {
    if (dtype >= 0 && dtype <= 2 && specialized((int)dtype, head_size) != 0) return 2;
#if defined(__AVX2__) && defined(__FMA__)
    return 1;
#else
    return 0;
#endif
}

/* Decode attention of sequences [a->seq_begin, a->seq_end) (layouts at the top of the file).
 * Returns PA_OK, or PA_BAD_DTYPE / PA_BAD_SHAPE / PA_NO_MEMORY (nothing written then). */
int paged_attention_cpu(const pa_args_t *a, const void *query, const void *key_cache, const void *value_cache,
                        void *out) {
    if (a->dtype < 0 || a->dtype > 2) return PA_BAD_DTYPE;
    if (a->num_kv_heads < 1 || a->num_heads % a->num_kv_heads || a->head_size < 1 || a->block_size < 1)
        return PA_BAD_SHAPE;
    const int64_t H = a->num_heads, D = a->head_size;
    size_t floats = (size_t)(H * (WIDTH + 2 * D + 2) + TILE * D);
    float *scratch = (float *)aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
    if (!scratch) return PA_NO_MEMORY;
    job_t j = {(int)a->dtype, query, a->q_seq_stride, a->q_head_stride, key_cache, value_cache, a->block_tables,
               a->table_stride, a->row_offsets, a->context_lens, out, H, a->num_kv_heads, H / a->num_kv_heads, D,
               a->block_size, a->seq_begin, a->seq_end, (PREFETCH_TOKENS + a->block_size - 1) / a->block_size,
               (STREAM_TOKENS + a->block_size - 1) / a->block_size, CHUNK_TILES, (float)a->scale, scratch, 0, 0, 0, 0, 0};
    const int64_t tile_bytes = TILE * a->num_kv_heads * D * (a->dtype == PA_F32 ? 4 : 2);
    if (tile_bytes * CHUNK_TILES > CHUNK_BYTES) j.chunk_tiles = CHUNK_BYTES / tile_bytes > 1 ? (int)(CHUNK_BYTES / tile_bytes) : 1;
    j.acc = j.scores + H * WIDTH;
    j.qf = j.acc + H * D;
    j.m = j.qf + H * D;
    j.l = j.m + H;
    j.ktile = j.l + H;
    sequence_fn fn = a->force_portable ? 0 : specialized(j.dtype, D);
    for (int64_t s = a->seq_begin; s < a->seq_end; s++) {
        if (fn) fn(&j, s);
        else sequence_portable(&j, s);
    }
    free(scratch);
    return PA_OK;
}

typedef struct {
    pa_args_t args;
    const void *query, *key_cache, *value_cache;
    void *out;
    int rc;
} part_t;

static void *run_part(void *p) {
    part_t *t = (part_t *)p;
    t->rc = paged_attention_cpu(&t->args, t->query, t->key_cache, t->value_cache, t->out);
    return 0;
}

#define MAX_THREADS 64

/* paged_attention_cpu on num_threads threads (this one and num_threads - 1 started for the call):
 * the sequences are cut into contiguous ranges of about equal token counts. A thread that cannot
 * be started leaves its range to this one. Returns the first error of any range, else PA_OK. */
int paged_attention_cpu_threads(const pa_args_t *a, const void *query, const void *key_cache,
                                const void *value_cache, void *out, int64_t num_threads) {
    if (num_threads > MAX_THREADS) num_threads = MAX_THREADS;
    if (num_threads > a->seq_end - a->seq_begin) num_threads = a->seq_end - a->seq_begin;
    if (num_threads <= 1) return paged_attention_cpu(a, query, key_cache, value_cache, out);
    part_t parts[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int64_t total = 0, done = 0, s = a->seq_begin;
    for (int64_t i = a->seq_begin; i < a->seq_end; i++) total += a->context_lens[i];
    for (int64_t k = 0; k < num_threads; k++) {
        parts[k] = (part_t){*a, query, key_cache, value_cache, out, PA_OK};
        parts[k].args.seq_begin = s;
        int64_t goal = total * (k + 1) / num_threads;
        while (s < a->seq_end && (done < goal || s == parts[k].args.seq_begin) && a->seq_end - s > num_threads - 1 - k)
            done += a->context_lens[s++];
        if (k == num_threads - 1) s = a->seq_end;
        parts[k].args.seq_end = s;
    }
    for (int64_t k = 1; k < num_threads; k++) started[k] = pthread_create(&threads[k], 0, run_part, &parts[k]) == 0;
    run_part(&parts[0]);
    int rc = parts[0].rc;
    for (int64_t k = 1; k < num_threads; k++) {
        if (started[k]) pthread_join(threads[k], 0);
        else run_part(&parts[k]);
        if (rc == PA_OK) rc = parts[k].rc;
    }
    return rc;
}
