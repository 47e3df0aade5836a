/*
 * gen.c — the synthetic Criteo-shaped data generator (contract: pr_gen.h).
 *
 * Randomness is counter-based: a row's state is a hash of (seed, row), and
 * each column's draw is a hash of (row state, column). No sequential RNG
 * state exists, so rows can be generated independently and in parallel.
 *
 * Skewed draws use inverse-CDF sampling of a continuous power law
 * (density ~ x^-alpha on [1, card + 1), rank = floor(x) - 1). pow() per
 * value would cost ~26 x 20 ns a row, so each column's inverse CDF is
 * tabulated at PR__QN + 1 quantiles once and interpolated linearly; that keeps
 * generation well above 2M rows/s on one core.
 *
 * Exact Zipf (pr_gen_set_zipf, `piperec gen --zipf S`): P(rank r) is
 * proportional to (r + 1)^-S over [0, card). The head (the PR__ZIPF_HEAD most
 * frequent ranks, most of the mass) is drawn from a tabulated CDF through a
 * guide table (O(1) expected); the tail by rejection-inversion (Hoermann and
 * Derflinger 1996), exact for any card without tables, a few transcendental
 * calls per draw and rarely a retry. The head/tail split needs the tail's
 * total mass, which Euler-Maclaurin gives to ~1e-10 relative for ranks past
 * the head. Retries draw fresh bits from a hash of (row bits, attempt), so a
 * row stays a pure function of (seed, row).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pr_gen.h"
#include "pr_config.h"
#include "pr_varint.h"

#define PR__QN        1024 /* quantile table resolution */
#define PR__ZIPF_HEAD 2048 /* ranks drawn from a table under --zipf */

const uint32_t pr_gen_cardinality[PR_GEN_N_SPARSE] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572,
};

/* Missing rates (about those of Criteo Kaggle). */
static const float pr__sparse_missing[PR_GEN_N_SPARSE] = {
    0, 0, 0.034f, 0.034f, 0, 0.12f, 0,     0,      0,     0, 0,      0.034f, 0,
    0, 0, 0.034f, 0,      0, 0.44f, 0.44f, 0.034f, 0.76f, 0, 0.034f, 0.44f,  0.44f,
};

typedef struct pr__dense_model {
    uint32_t max;   /* values in [0, max] before negatives */
    float missing;  /* probability of an empty field */
    float negative; /* probability of -1/-2/-3 */
} pr__dense_model;

static const pr__dense_model pr__dense[PR_GEN_N_DENSE] = {
    {200, 0.45f, 0},     {5000, 0, 0.08f},  {3000, 0.21f, 0},  {100, 0.22f, 0},
    {500000, 0.026f, 0}, {20000, 0.22f, 0}, {2000, 0.043f, 0}, {1000, 0.0005f, 0},
    {5000, 0.043f, 0},   {10, 0.45f, 0},    {100, 0.043f, 0},  {300, 0.77f, 0},
    {1000, 0.22f, 0},
};

#define PR__SPARSE_ALPHA   1.1
#define PR__DENSE_ALPHA    1.3
#define PR__LABEL_POSITIVE 0.03

/* One column's exact Zipf sampler (k = rank + 1 in [1, card]). */
typedef struct pr__zipf_col {
    uint32_t card;
    uint32_t head;     /* k in [1, head] from the table */
    double p_head;     /* P(k <= head) */
    double *cdf;       /* [head] P(k <= i + 1), cdf[head - 1] = p_head */
    uint32_t *guide;   /* [head] first i with cdf[i] > j * p_head / head */
    double t_lo, t_hi; /* tail: u range of rejection-inversion over [head + 1, card] */
} pr__zipf_col;

struct pr_gen {
    uint64_t seed;
    double zipf_s;                         /* 0 = the default power law */
    pr__zipf_col *zipf;                    /* [PR_GEN_N_SPARSE] when zipf_s > 0 */
    uint32_t sparse_miss[PR_GEN_N_SPARSE]; /* thresholds on 32 random bits */
    uint32_t dense_miss[PR_GEN_N_DENSE];
    uint32_t dense_neg[PR_GEN_N_DENSE];
    uint32_t label_pos;
    uint32_t signal; /* planted-signal model, 0 = none */
    uint32_t sq[PR_GEN_N_SPARSE][PR__QN + 1];
    uint32_t dq[PR_GEN_N_DENSE][PR__QN + 1];
};

static inline uint64_t pr__mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fixed bijection on 32 bits per column (xorshift-multiply rounds are each
 * invertible), so distinct ranks give distinct values. */
static inline uint32_t pr__scramble(uint32_t x, uint32_t col)
{
    x += (col + 1) * 0x9e3779b9u;
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

static uint32_t pr__threshold(double p)
{
    double t = p * 4294967296.0;
    return t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
}

/* Quantile table of the power law on [1, card + 1), exponent alpha != 1,
 * as ranks (floor(x) - 1, which fit 32 bits: card < 2^32). */
static void pr__quantiles(uint32_t *q, double card, double alpha)
{
    double a = 1.0 - alpha;
    double top = pow(card + 1.0, a);
    for (int i = 0; i <= PR__QN; i++) {
        double u = (double)i / PR__QN;
        double x = pow(1.0 + u * (top - 1.0), 1.0 / a);
        double r = x - 1.0;
        q[i] = r <= 0 ? 0 : r >= card ? (uint32_t)(card - 1) : (uint32_t)r;
    }
}

pr_gen *pr_gen_new(uint64_t seed)
{
    pr_gen *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->seed = pr__mix64(seed ^ 0x5049504552454321ull);
    for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
        g->sparse_miss[c] = pr__threshold(pr__sparse_missing[c]);
        pr__quantiles(g->sq[c], pr_gen_cardinality[c], PR__SPARSE_ALPHA);
    }
    for (int j = 0; j < PR_GEN_N_DENSE; j++) {
        g->dense_miss[j] = pr__threshold(pr__dense[j].missing);
        g->dense_neg[j] = pr__threshold(pr__dense[j].negative);
        pr__quantiles(g->dq[j], pr__dense[j].max + 1.0, PR__DENSE_ALPHA);
    }
    g->label_pos = pr__threshold(PR__LABEL_POSITIVE);
    return g;
}

static void pr__zipf_free(pr_gen *g)
{
    if (!g->zipf)
        return;
    for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
        free(g->zipf[c].cdf);
        free(g->zipf[c].guide);
    }
    free(g->zipf);
    g->zipf = NULL;
}

void pr_gen_free(pr_gen *g)
{
    if (!g)
        return;
    pr__zipf_free(g);
    free(g);
}

/* ---------------------------------------------------------------- exact Zipf */

/* log1p(x) / x and expm1(x) / x, continuous at 0. */
static double pr__zh1(double x)
{
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
static double pr__zh2(double x)
{
    return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}
/* h(x) = x^-s, its antiderivative H(x) = (x^(1-s) - 1) / (1 - s) (log x at
 * s = 1), and the inverse of H. */
static double pr__zh(double s, double x)
{
    return exp(-s * log(x));
}
static double pr__zH(double s, double x)
{
    double lx = log(x);
    return pr__zh2((1.0 - s) * lx) * lx;
}
static double pr__zHinv(double s, double y)
{
    double t = y * (1.0 - s);
    if (t < -1.0)
        t = -1.0;
    return exp(pr__zh1(t) * y);
}

int pr_gen_set_zipf(pr_gen *g, double s)
{
    if (!(s >= 0) || s > PR_GEN_ZIPF_MAX)
        return PR_EINVAL;
    pr__zipf_free(g);
    g->zipf_s = 0;
    if (s == 0)
        return 0;
    g->zipf = calloc(PR_GEN_N_SPARSE, sizeof(*g->zipf));
    if (!g->zipf)
        return PR_ENOMEM;
    for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
        pr__zipf_col *z = &g->zipf[c];
        uint32_t card = pr_gen_cardinality[c];
        z->card = card;
        z->head = card < PR__ZIPF_HEAD ? card : PR__ZIPF_HEAD;
        z->cdf = malloc(z->head * sizeof(*z->cdf));
        z->guide = malloc(z->head * sizeof(*z->guide));
        if (!z->cdf || !z->guide) {
            pr__zipf_free(g);
            return PR_ENOMEM;
        }
        double sum = 0;
        for (uint32_t i = 0; i < z->head; i++)
            z->cdf[i] = sum += pr__zh(s, i + 1.0);
        double tail = 0;
        if (card > z->head) {
            /* Euler-Maclaurin: sum_{k=a}^{b} h(k) = int_a^b h + (h(a) + h(b)) / 2
             * + (h'(b) - h'(a)) / 12 + smaller terms, with h'(x) = -s x^(-s-1). */
            double a = z->head + 1.0, b = card;
            tail = pr__zH(s, b) - pr__zH(s, a) + 0.5 * (pr__zh(s, a) + pr__zh(s, b)) +
                   s * (pr__zh(s, a) / a - pr__zh(s, b) / b) / 12.0;
            z->t_lo = pr__zH(s, a + 0.5) - pr__zh(s, a);
            z->t_hi = pr__zH(s, b + 0.5);
        }
        double total = sum + tail;
        for (uint32_t i = 0; i < z->head; i++)
            z->cdf[i] /= total;
        z->p_head = card > z->head ? z->cdf[z->head - 1] : 1.0;
        z->cdf[z->head - 1] = z->p_head; /* no rounding gap at the top */
        uint32_t i = 0;
        for (uint32_t j = 0; j < z->head; j++) {
            double lo = z->p_head * j / z->head;
            while (i + 1 < z->head && z->cdf[i] <= lo)
                i++;
            z->guide[j] = i;
        }
    }
    g->zipf_s = s;
    return 0;
}

double pr_gen_zipf(const pr_gen *g)
{
    return g->zipf_s;
}

static inline double pr__unit53(uint64_t x)
{
    return (double)(x >> 11) * 0x1p-53;
}

/* A rank in [0, card) with P(r) ~ (r + 1)^-s, from the 64 bits x. */
static uint32_t pr__zipf_draw(const pr__zipf_col *z, double s, uint64_t x)
{
    double u = pr__unit53(pr__mix64(x));
    if (u < z->p_head) {
        uint32_t i = z->guide[(uint32_t)(u / z->p_head * z->head)];
        while (z->cdf[i] <= u && i + 1 < z->head)
            i++;
        return i;
    }
    /* Tail, k in [head + 1, card]: y uniform on [t_lo, t_hi]; H^-1(y) rounds
     * to k, accepted when y >= H(k + 1/2) - h(k): an interval of length h(k)
     * inside k's rounding interval (h is convex), so P(k) ~ h(k) exactly. */
    for (uint64_t attempt = 1;; attempt++) {
        double v = pr__unit53(pr__mix64(x + attempt * 0x9e3779b97f4a7c15ull));
        double y = z->t_lo + v * (z->t_hi - z->t_lo);
        uint64_t k = (uint64_t)(pr__zHinv(s, y) + 0.5);
        if (k <= z->head)
            k = z->head + 1;
        else if (k > z->card)
            k = z->card;
        if (y >= pr__zH(s, k + 0.5) - pr__zh(s, (double)k))
            return (uint32_t)(k - 1);
    }
}

int pr_gen_set_signal(pr_gen *g, uint32_t model)
{
    if (model > PR_GEN_SIGNAL_MAX)
        return PR_EINVAL;
    g->signal = model;
    return 0;
}

/* Draw from a quantile table with 32 uniform bits: the top 10 bits pick the
 * segment, the low 22 interpolate inside it (integers only: fast). */
static inline uint32_t pr__draw(const uint32_t *q, uint32_t bits)
{
    uint32_t i = bits >> 22, f = bits & 0x3fffff;
    return q[i] + (uint32_t)(((uint64_t)(q[i + 1] - q[i]) * f) >> 22);
}

/* 64 bits per (row, column): one 64x64->128 multiply folded (cheaper than a
 * full mix per column; the row hash already went through pr__mix64). */
static inline uint64_t pr__col_bits(uint64_t h, uint64_t col)
{
    __uint128_t m = (__uint128_t)(h ^ (col * 0x9e3779b97f4a7c15ull)) * 0xd6e8feb86659fd93ull;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
}

/* Planted signal, model 1 (pr_gen.h). Sparse columns with few values carry
 * most of it, so a model sees each value often enough to learn its weight
 * within a short run; C1 (1460 values, Zipf) adds a long tail. A value's
 * weight is a hash of (column, value) mapped to [-1, 1), times the column's
 * amplitude; a missing value (0) gets a weight like any other value. Dense
 * terms use log1p of the clamped value (what Neg2Zero + Logarithm give a
 * trainer), centred roughly. The bias puts about 20% of rows positive. */
static const struct {
    int col;
    double amp;
} pr__signal_sparse[] = {{0, 1.2}, {5, 1.4}, {8, 0.8}, {13, 1.2}, {16, 1.0}, {19, 0.8}};
static const struct {
    int col;
    double w, centre;
} pr__signal_dense[] = {{0, 0.6, 1.0}, {2, -0.5, 1.9}, {6, 0.4, 2.2}};
#define PR__SIGNAL_BIAS (-1.45)

static int32_t pr__signal_label(uint64_t h, const pr_gen_row *row)
{
    double logit = PR__SIGNAL_BIAS;
    for (size_t k = 0; k < sizeof(pr__signal_sparse) / sizeof(pr__signal_sparse[0]); k++) {
        int c = pr__signal_sparse[k].col;
        uint64_t v = pr__mix64(((uint64_t)(c + 1) << 32 | row->sparse[c]) ^ 0x5349474e414c3031ull);
        logit += pr__signal_sparse[k].amp * ((double)(v >> 11) * 0x1p-52 - 1.0);
    }
    for (size_t k = 0; k < sizeof(pr__signal_dense) / sizeof(pr__signal_dense[0]); k++) {
        int64_t x = row->dense[pr__signal_dense[k].col];
        double z = log1p(x > 0 ? (double)x : 0.0) - pr__signal_dense[k].centre;
        logit += pr__signal_dense[k].w * z;
    }
    double p = 1.0 / (1.0 + exp(-logit));
    /* The noise: the row's own bits, a stream no other column draws from. */
    double u = (double)(pr__col_bits(h, 0x51) >> 11) * 0x1p-53;
    return u < p;
}

void pr_gen_row_at(const pr_gen *g, uint64_t row, pr_gen_row *out)
{
    uint64_t h = pr__mix64(g->seed ^ pr__mix64(row));
    out->label = (uint32_t)h < g->label_pos;
    out->dense_missing = 0;
    out->sparse_missing = 0;
    for (int j = 0; j < PR_GEN_N_DENSE; j++) {
        uint64_t x = pr__col_bits(h, (uint64_t)j + 1);
        uint32_t lo = (uint32_t)x, hi = (uint32_t)(x >> 32);
        if (lo < g->dense_miss[j]) {
            out->dense[j] = 0;
            out->dense_missing |= 1u << j;
        } else if (lo - g->dense_miss[j] < g->dense_neg[j]) {
            out->dense[j] = hi < 0xc0000000u ? -1 : hi < 0xf0000000u ? -2 : -3;
        } else {
            out->dense[j] = pr__draw(g->dq[j], hi);
        }
    }
    for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
        uint64_t x = pr__col_bits(h, (uint64_t)c + 101);
        uint32_t lo = (uint32_t)x, hi = (uint32_t)(x >> 32);
        if (lo < g->sparse_miss[c]) {
            out->sparse[c] = 0;
            out->sparse_missing |= 1u << c;
        } else {
            uint32_t rank =
                g->zipf ? pr__zipf_draw(&g->zipf[c], g->zipf_s, x) : pr__draw(g->sq[c], hi);
            out->sparse[c] = pr__scramble(rank, (uint32_t)c);
        }
    }
    if (g->signal)
        out->label = pr__signal_label(h, out);
}

/* ---------------------------------------------------------------- TSV */

/* Two characters per byte: hex pairs "00".."ff" and decimal pairs "00".."99". */
static const char pr__hex2[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
                               "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
                               "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
                               "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
                               "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
                               "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
                               "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
                               "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
static const char pr__dec2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static inline char *pr__put_hex8(char *p, uint32_t v)
{
    memcpy(p + 0, pr__hex2 + 2 * (v >> 24), 2);
    memcpy(p + 2, pr__hex2 + 2 * (v >> 16 & 0xff), 2);
    memcpy(p + 4, pr__hex2 + 2 * (v >> 8 & 0xff), 2);
    memcpy(p + 6, pr__hex2 + 2 * (v & 0xff), 2);
    return p + 8;
}

static inline char *pr__put_int(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        v = -v;
    }
    uint64_t u = (uint64_t)v;
    if (u < 10) {
        *p++ = (char)('0' + u);
        return p;
    }
    if (u < 100) {
        memcpy(p, pr__dec2 + 2 * u, 2);
        return p + 2;
    }
    char tmp[24];
    int n = 24;
    while (u >= 100) {
        n -= 2;
        memcpy(tmp + n, pr__dec2 + 2 * (u % 100), 2);
        u /= 100;
    }
    if (u >= 10) {
        n -= 2;
        memcpy(tmp + n, pr__dec2 + 2 * u, 2);
    } else {
        tmp[--n] = (char)('0' + u);
    }
    memcpy(p, tmp + n, (size_t)(24 - n));
    return p + (24 - n);
}

size_t pr_gen_tsv(const pr_gen *g, uint64_t row0, uint64_t n, char *buf, size_t cap,
                  uint64_t *rows_out)
{
    char *p = buf;
    uint64_t i = 0;
    pr_gen_row row;
    for (; i < n && (size_t)(p - buf) + PR_GEN_TSV_LINE_MAX <= cap; i++) {
        pr_gen_row_at(g, row0 + i, &row);
        p = pr__put_int(p, row.label);
        for (int j = 0; j < PR_GEN_N_DENSE; j++) {
            *p++ = '\t';
            if (!(row.dense_missing >> j & 1))
                p = pr__put_int(p, row.dense[j]);
        }
        for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
            *p++ = '\t';
            if (!(row.sparse_missing >> c & 1))
                p = pr__put_hex8(p, row.sparse[c]);
        }
        *p++ = '\n';
    }
    if (rows_out)
        *rows_out = i;
    return (size_t)(p - buf);
}

/* ---------------------------------------------------------------- blocks */

int pr_gen_fill_block(const pr_gen *g, uint64_t row0, uint32_t n, pr_block *b, bool u64)
{
    if (b->n_dense != PR_GEN_N_DENSE || b->n_sparse != PR_GEN_N_SPARSE)
        return PR_EINVAL;
    if (n > b->cap - b->rows)
        return PR_EFULL;
    size_t words = pr_bitmap_words(b->cap);
    if (u64)
        for (int c = 0; c < PR_GEN_N_SPARSE; c++)
            b->sparse_enc[c] = PR_SPARSE_U64;
    pr_gen_row row;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = b->rows + i;
        pr_gen_row_at(g, row0 + i, &row);
        b->labels[r] = row.label;
        for (int j = 0; j < PR_GEN_N_DENSE; j++) {
            b->dense[(size_t)j * b->cap + r] = (double)row.dense[j];
            if (row.dense_missing >> j & 1)
                pr_bit_set(b->dense_missing + j * words, r);
        }
        for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
            bool miss = row.sparse_missing >> c & 1;
            if (miss)
                pr_bit_set(b->sparse_missing + c * words, r);
            if (u64) {
                b->sparse_u64[(size_t)c * b->cap + r] = row.sparse[c];
            } else {
                char *slot = pr_block_hex(b, (uint32_t)c, r);
                memset(slot, '0', 8);
                pr__put_hex8(slot + 8, row.sparse[c]);
            }
        }
        if (b->offset)
            b->offset[r] = (int64_t)(row0 + i);
        if (b->partition)
            b->partition[r] = 0;
        if (b->event_time_ms)
            b->event_time_ms[r] = 0;
    }
    b->rows += n;
    return 0;
}

/* ---------------------------------------------------------------- protobuf */

/* Hand-written protobuf encoding of EventBatch (schemas/piperec.proto): the
 * layout is tiny and fixed, and protobuf-c's per-message allocations would
 * make the generator several times slower. */

/* Worst case of one Event: label 11, dense 2 + 104, dense_missing 2 + 13,
 * sparse_id 2 + 26 * 5, sparse_missing 2 + 26; round up. */
#define PR__PB_EVENT_MAX 320

size_t pr_gen_pb_max(uint32_t n)
{
    return (size_t)n * (PR__PB_EVENT_MAX + 3) + 16;
}

static uint8_t *pr__pb_event(uint8_t *p, const pr_gen_row *row)
{
    if (row->label) {
        *p++ = 0x08;
        p = pr_varint_put(p, (uint64_t)(int64_t)row->label);
    }
    *p++ = 0x1a; /* 3: dense, packed double */
    *p++ = PR_GEN_N_DENSE * 8;
    for (int j = 0; j < PR_GEN_N_DENSE; j++) {
        double d = (double)row->dense[j];
        memcpy(p, &d, 8);
        p += 8;
    }
    if (row->dense_missing) {
        *p++ = 0x22; /* 4: dense_missing, packed uint32 */
        uint8_t *len = p++;
        for (int j = 0; j < PR_GEN_N_DENSE; j++)
            if (row->dense_missing >> j & 1)
                *p++ = (uint8_t)j;
        *len = (uint8_t)(p - len - 1);
    }
    *p++ = 0x32; /* 6: sparse_id, packed uint64 */
    uint8_t *len = p++;
    for (int c = 0; c < PR_GEN_N_SPARSE; c++)
        p = pr_varint_put(p, row->sparse[c]);
    *len = (uint8_t)(p - len - 1); /* <= 130: fits one byte only below 128 */
    if (p - len - 1 >= 0x80) {
        /* Two-byte length: shift the payload by one. */
        size_t plen = (size_t)(p - len - 1);
        memmove(len + 2, len + 1, plen);
        len[0] = (uint8_t)(plen | 0x80);
        len[1] = (uint8_t)(plen >> 7);
        p++;
    }
    if (row->sparse_missing) {
        *p++ = 0x3a; /* 7: sparse_missing, packed uint32 */
        uint8_t *l2 = p++;
        for (int c = 0; c < PR_GEN_N_SPARSE; c++)
            if (row->sparse_missing >> c & 1)
                *p++ = (uint8_t)c;
        *l2 = (uint8_t)(p - l2 - 1);
    }
    return p;
}

size_t pr_gen_pb_batch(const pr_gen *g, uint64_t row0, uint32_t n, uint8_t *buf, size_t cap)
{
    if (cap < pr_gen_pb_max(n))
        return 0;
    /* Encode the events after a gap for the (at most 10-byte) outer length,
     * then move them down once the length is known. */
    uint8_t *body = buf + 10, *p = body;
    uint8_t ev[PR__PB_EVENT_MAX];
    pr_gen_row row;
    for (uint32_t i = 0; i < n; i++) {
        pr_gen_row_at(g, row0 + i, &row);
        size_t elen = (size_t)(pr__pb_event(ev, &row) - ev);
        *p++ = 0x0a; /* EventBatch.events */
        p = pr_varint_put(p, elen);
        memcpy(p, ev, elen);
        p += elen;
    }
    size_t blen = (size_t)(p - body);
    size_t hl = pr_varint_size(blen);
    pr_varint_put(buf, blen);
    memmove(buf + hl, body, blen);
    return hl + blen;
}

/* ---------------------------------------------------------------- messages */

size_t pr_gen_message(const pr_gen *g, int format, uint64_t row0, uint32_t n, uint8_t *buf,
                      size_t cap)
{
    if (format == PR_FORMAT_CRITEO_TSV) {
        uint64_t got = 0;
        size_t len = pr_gen_tsv(g, row0, n, (char *)buf, cap, &got);
        return got == n ? len : 0;
    }
    if (format == PR_FORMAT_JSON)
        return n == 1 ? pr_gen_json_event(g->seed, row0, (char *)buf, cap) : 0;
    /* pr_gen_pb_batch writes varint length + EventBatch: strip the prefix. */
    size_t len = pr_gen_pb_batch(g, row0, n, buf, cap);
    uint64_t blen;
    size_t hl = pr_varint_get(buf, buf + len, &blen);
    if (!hl || hl + blen != len)
        return 0;
    if (format == PR_FORMAT_PROTOBUF_EVENT_BATCH) {
        memmove(buf, buf + hl, blen);
        return blen;
    }
    /* protobuf_event: unwrap the single event (tag 0x0a, length, Event bytes). */
    uint64_t elen;
    size_t el = pr_varint_get(buf + hl + 1, buf + len, &elen);
    if (n != 1 || buf[hl] != 0x0a || !el)
        return 0;
    memmove(buf, buf + hl + 1 + el, elen);
    return elen;
}
