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
    /* first: the shared ops (PR__KHOST_OPS) treat a pr_backend as its pr__khost */
    pr__khost h;
    pr_ksim_dev *dev; /* the simulated card's on-chip memories */
};

static int pr__sim_to_dev(pr__khost *h, int buf, size_t off, size_t len)
{
    (void)h, (void)buf, (void)off, (void)len;
    return 0;
}

static int pr__sim_start(pr__khost *h, int slot, uint32_t mode, uint32_t rows, uint32_t col,
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

static int pr__sim_wait(pr__khost *h, int slot)
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

static void pr__sim_free(pr_backend *be)
{
    if (!be)
        return;
    pr__khost_fini(&be->h);
    for (int i = 0; i < PR_KBUF__N; i++)
        pr__free_aligned(be->h.buf[i]);
    pr__free_aligned(be->dev);
    free(be);
}

static int pr__sim_new(const pr_pipeline_spec *spec, const pr_engine_opts *opts, pr_backend **out,
                       char *errstr, size_t errstr_size)
{
    (void)opts;
    pr_backend *be = calloc(1, sizeof(*be));
    if (!be)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "hls-sim: out of memory");
    int rc = pr__khost_plan(&be->h, spec, errstr, errstr_size);
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
        pr__sim_free(be);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                         "hls-sim: out of memory for device buffers");
    }
    if ((rc = pr__khost_start(&be->h, 0, errstr, errstr_size))) {
        pr__sim_free(be);
        return rc;
    }
    *out = be;
    return 0;
}

const pr_backend_ops pr__backend_hls_sim = {
    .name = "hls-sim",
    .new_ = pr__sim_new,
    .free_ = pr__sim_free,
    PR__KHOST_OPS,
};
