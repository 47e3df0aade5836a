/*
 * pr_khost.h — the host side of the FPGA kernel, shared by the hls-sim and
 * xrt backends (internal to fpga_engine/).
 *
 * Everything a host does around pr_kernel() lives here once: checking a spec
 * against the hardware limits and placing each column's vocabulary (column c
 * in lane c % PR_K_VOCAB_LANES: that lane's on-chip bank or its HBM table), packing pr_block rows
 * into the kernel's input words, splitting big blocks into kernel calls, double buffering (pack and
 * transfer call i+1 while call i runs), unpacking outputs into pr_out, and the vocabulary
 * read/load/clear protocol. A backend only supplies the transport: where the
 * buffers live and how a call reaches the kernel (a C call for hls-sim,
 * xrtKernelRun for xrt).
 *
 * The host keeps a mirror of every column's assigned values in index order,
 * fed by the kernel's new-index log, so vocab_size and the journal's
 * vocab_read_from never read the device tables; vocab_read (snapshots) reads
 * the tables back through the kernel's READ mode and is the source of truth.
 */
#ifndef PR_KHOST_H
#define PR_KHOST_H

#include <stddef.h>
#include <stdint.h>

#include "pr_backend.h"
#include "pr_kernel.h"

/* Device buffers. IN/OUT/NEWV come in two slots (double buffering). */
enum {
    PR_KBUF_IN0 = 0,
    PR_KBUF_IN1,
    PR_KBUF_OUT0,
    PR_KBUF_OUT1,
    PR_KBUF_NEWV0,
    PR_KBUF_NEWV1,
    PR_KBUF_CFG,
    PR_KBUF_XFER,
    PR_KBUF_TAB0, /* lane l's HBM vocabulary tables at PR_KBUF_TAB0 + l: device-only on a card */
    PR_KBUF__N = PR_KBUF_TAB0 + PR_K_VOCAB_LANES
};

typedef struct pr__khost pr__khost;

/* The transport. All return 0 or a PR_E* code. */
typedef struct pr_kxport_ops {
    /* Make bytes [off, off+len) of buffer `buf` current on the device / host. */
    int (*to_dev)(pr__khost *h, int buf, size_t off, size_t len);
    int (*from_dev)(pr__khost *h, int buf, size_t off, size_t len);
    /* Start one kernel call on slot (0/1) buffers; may return before it ends. */
    int (*start)(pr__khost *h, int slot, uint32_t mode, uint32_t rows, uint32_t col, uint32_t first,
                 uint32_t count);
    /* Wait for the call started on `slot`. */
    int (*wait)(pr__khost *h, int slot);
} pr_kxport_ops;

struct pr__khost {
    const pr_kxport_ops *xp;
    void *xp_ctx; /* the backend's transport state */
    pr_pipeline_spec spec;
    uint8_t width; /* output index width, 4 or 8 */
    int has_vocab;
    int64_t first_index; /* 0 under dlrm, 2 under default */
    int two_pass;        /* two-pass count mode and some column counts */
    int count_done;
    /* Placement, per sparse column. */
    uint8_t mem[PR_MAX_SPARSE];     /* PR_KMEM_* */
    uint64_t base[PR_MAX_SPARSE];   /* entry offset in its lane's on-chip bank or HBM table */
    uint64_t domain[PR_MAX_SPARSE]; /* modulus: table entries */
    uint64_t cap[PR_MAX_SPARSE];    /* capacity, clamped to domain + first_index */
    uint64_t onchip_used[PR_K_VOCAB_LANES], hbm_used[PR_K_VOCAB_LANES]; /* entries, per lane */
    /* Buffers: host views and sizes in bytes (set by the backend, sized by
     * pr__khost_plan). */
    void *buf[PR_KBUF__N];
    size_t size[PR_KBUF__N];
    /* Device state mirror. */
    uint64_t n_assigned[PR_MAX_SPARSE];
    uint64_t *mirror[PR_MAX_SPARSE]; /* values by index - first_index */
    size_t mirror_cap[PR_MAX_SPARSE];
};

/* Check `spec` against the device limits, place the tables and compute the
 * buffer sizes (h->size). Fails with PR_ENOTSUP and a reason naming the
 * column and the limit. Does not allocate device buffers. */
int pr__khost_plan(pr__khost *h, const pr_pipeline_spec *spec, char *errstr, size_t errstr_size);

/* After the backend set h->buf (zeroed host memory is fine): write and send
 * the config; with `clear_tables`, run CLEAR on every vocabulary column
 * (device memory that is not known to be zero). */
int pr__khost_start(pr__khost *h, int clear_tables, char *errstr, size_t errstr_size);
void pr__khost_fini(pr__khost *h);

int pr__khost_process(pr__khost *h, const pr_block *in, pr_out *out, pr_engine_stats *st,
                      char *errstr, size_t errstr_size);
int pr__khost_count(pr__khost *h, const pr_block *in);
int pr__khost_count_done(pr__khost *h);
uint64_t pr__khost_vocab_size(const pr__khost *h, uint32_t col);
int pr__khost_vocab_read(const pr__khost *h, uint32_t col, pr_vocab_cb cb, void *opaque);
int pr__khost_vocab_read_from(const pr__khost *h, uint32_t col, int64_t from_index, pr_vocab_cb cb,
                              void *opaque);
int pr__khost_vocab_load(pr__khost *h, uint32_t col, const pr_vocab_entry *e, size_t n);

/* The same calls as backend ops, for a struct pr_backend whose FIRST member
 * is its pr__khost (hls-sim and xrt): everything but new_/free_ is host
 * logic, so both backends fill their ops table with PR__KHOST_OPS. */
int pr__khost_op_process(pr_backend *be, const pr_block *in, pr_out *out, pr_engine_stats *st,
                         char *errstr, size_t errstr_size);
int pr__khost_op_count(pr_backend *be, const pr_block *in);
int pr__khost_op_count_done(pr_backend *be);
uint64_t pr__khost_op_vocab_size(const pr_backend *be, uint32_t col);
int pr__khost_op_vocab_read(const pr_backend *be, uint32_t col, pr_vocab_cb cb, void *opaque);
int pr__khost_op_vocab_read_from(const pr_backend *be, uint32_t col, int64_t from_index,
                                 pr_vocab_cb cb, void *opaque);
int pr__khost_op_vocab_load(pr_backend *be, uint32_t col, const pr_vocab_entry *e, size_t n);
#define PR__KHOST_OPS                                                                              \
    .process = pr__khost_op_process, .count = pr__khost_op_count,                                  \
    .count_done = pr__khost_op_count_done, .vocab_size = pr__khost_op_vocab_size,                  \
    .vocab_read = pr__khost_op_vocab_read, .vocab_load = pr__khost_op_vocab_load,                  \
    .vocab_read_from = pr__khost_op_vocab_read_from

/* Packing (exposed for tests and the bench): kernel input words for rows
 * [row0, row0+rows) of `b`; `in` must hold pr_k_in_words(pad(rows), ...). */
void pr__kpack_block(const pr__khost *h, const pr_block *b, uint32_t row0, uint32_t rows,
                     pr_kw *in);

#endif
