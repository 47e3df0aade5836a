/*
 * hls_sim_backend.c — the "hls-sim" backend: the HLS kernel (pr_kernel.c)
 * compiled as plain C and called block by block exactly as the host calls the
 * card. All host work (limits, packing, double buffering, vocabulary
 * protocol) is pr_khost.c, shared with the xrt backend; this file is only the
 * transport: buffers are host memory, a "transfer" is nothing, and a kernel
 * start is a C call that returns when the kernel is done.
 *
 * What it proves: the kernel's C code, its buffer layouts and the host
 * protocol give the cpu backend's results bit for bit (tests/hls/). What it
 * does not: timing (see bench/bench_hls_model.c) or synthesis.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "pr_khost.h"

struct pr_backend {
    pr_khost h;
    pr_ksim_dev *dev; /* the simulated card's on-chip memories */
};

static int pr__sim_to_dev(pr_khost *h, int buf, size_t off, size_t len)
{
    (void)h, (void)buf, (void)off, (void)len;
    return 0;
}

static int pr__sim_start(pr_khost *h, int slot, uint32_t mode, uint32_t rows, uint32_t col,
                         uint32_t first, uint32_t count)
{
    pr_backend *be = h->xp_ctx;
#define PR__SIM_TAB(l) , h->buf[PR_KBUF_TAB0 + l]
    pr_kernel(h->buf[PR_KBUF_IN0 + slot], h->buf[PR_KBUF_OUT0 + slot], h->buf[PR_KBUF_CFG],
              h->buf[PR_KBUF_NEWV0 + slot], h->buf[PR_KBUF_XFER], mode, rows, col, first,
              count PR_K_LANES(PR__SIM_TAB), be->dev);
#undef PR__SIM_TAB
    return 0;
}

static int pr__sim_wait(pr_khost *h, int slot)
{
    (void)h, (void)slot;
    return 0;
}

static const pr_kxport_ops pr__sim_xport = {
    .to_dev = pr__sim_to_dev,
    .from_dev = pr__sim_to_dev,
    .start = pr__sim_start,
    .wait = pr__sim_wait,
};

static void pr__sim_destroy(pr_backend *be)
{
    if (!be)
        return;
    pr_khost_fini(&be->h);
    for (int i = 0; i < PR_KBUF__N; i++)
        pr__free_aligned(be->h.buf[i]);
    pr__free_aligned(be->dev);
    free(be);
}

static int pr__sim_create(const pr_pipeline_spec *spec, const pr_engine_opts *opts,
                          pr_backend **out, char *errstr, size_t errstr_size)
{
    (void)opts;
    pr_backend *be = calloc(1, sizeof(*be));
    if (!be)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "hls-sim: out of memory");
    int rc = pr_khost_plan(&be->h, spec, errstr, errstr_size);
    if (rc) {
        free(be);
        return rc;
    }
    be->h.xp = &pr__sim_xport;
    be->h.xp_ctx = be;
    /* Zeroed memory from fresh pages: an empty vocabulary, no CLEAR needed,
     * and untouched table parts cost nothing. */
    be->dev = pr__zalloc_aligned(sizeof(*be->dev));
    for (int i = 0; i < PR_KBUF__N; i++)
        if (!(be->h.buf[i] = pr__zalloc_aligned(be->h.size[i])))
            rc = PR_ENOMEM;
    if (!be->dev || rc) {
        pr__sim_destroy(be);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                         "hls-sim: out of memory for device buffers");
    }
    if ((rc = pr_khost_start(&be->h, 0, errstr, errstr_size))) {
        pr__sim_destroy(be);
        return rc;
    }
    *out = be;
    return 0;
}

static int pr__sim_process(pr_backend *be, const pr_block *in, pr_out *out, pr_engine_stats *st,
                           char *errstr, size_t errstr_size)
{
    return pr_khost_process(&be->h, in, out, st, errstr, errstr_size);
}

static int pr__sim_count(pr_backend *be, const pr_block *in)
{
    return pr_khost_count(&be->h, in);
}

/* Two-pass: the counts are already in the tables; the process pass assigns
 * indices at first sight. Nothing to do on the device. */
static int pr__sim_count_done(pr_backend *be)
{
    return pr_khost_count_done(&be->h);
}

static uint64_t pr__sim_vocab_size(const pr_backend *be, uint32_t col)
{
    return pr_khost_vocab_size(&be->h, col);
}

static int pr__sim_vocab_read(const pr_backend *be, uint32_t col, pr_vocab_cb cb, void *opaque)
{
    return pr_khost_vocab_read(&be->h, col, cb, opaque);
}

static int pr__sim_vocab_read_from(const pr_backend *be, uint32_t col, int64_t from_index,
                                   pr_vocab_cb cb, void *opaque)
{
    return pr_khost_vocab_read_from(&be->h, col, from_index, cb, opaque);
}

static int pr__sim_vocab_load(pr_backend *be, uint32_t col, const pr_vocab_entry *e, size_t n)
{
    return pr_khost_vocab_load(&be->h, col, e, n);
}

const pr_backend_ops pr_backend_hls_sim = {
    .name = "hls-sim",
    .create = pr__sim_create,
    .destroy = pr__sim_destroy,
    .process = pr__sim_process,
    .count = pr__sim_count,
    .count_done = pr__sim_count_done,
    .vocab_size = pr__sim_vocab_size,
    .vocab_read = pr__sim_vocab_read,
    .vocab_load = pr__sim_vocab_load,
    .vocab_read_from = pr__sim_vocab_read_from,
};
