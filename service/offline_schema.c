/*
 * offline_schema.c — `piperec process` for a declared feature schema (issue
 * 20): JSON lines -> the ingest JSON decoder (pr_decode_json_line, the one
 * streaming uses, so offline and streaming decode every record alike) ->
 * jagged pr_block -> engine (vocabularies) -> pr_feature_finish -> the
 * offline layout (pr_npy_jagged: labels.npy, dense.npy,
 * sparse/<name>.values/.lengths.npy, the writer the files sink and `piperec
 * consume --output` use too), plus vocab/<name>.tsv, rejects.tsv and, when
 * a vocabulary evicts, recycled.npy (int64 [K, 4]: feature index among
 * sparse features, output row, index, notice number).
 *
 * The input is read in rounds of up to `threads` x block_rows non-blank
 * lines (a regular file of JSON lines is mapped: the calling thread cuts a
 * round into byte ranges at newlines and the workers cut those into lines,
 * decoded where they lie; stdin and length-delimited records are read and
 * copied by the calling thread). A round is split into units (up to
 * PR__UNITS_PER_WORKER per worker, contiguous, input order = unit order),
 * each with its own blocks and rejects; the `opts->threads` workers (the
 * calling thread and threads - 1 more, each with its own pr_json_decoder)
 * take units as tasks, so a worker held by a long task leaves the rest to
 * the others. Issue 21: only what the semantics order stays in input
 * order, and rounds overlap. One step (one phase on every worker, a barrier
 * at its end) finishes the pending round r and starts round r+1; its tasks,
 * taken kind after kind:
 *   - round r's first appearances per engine column in input order
 *     (pr_engine_process_seq_col; the longest chains first, different
 *     columns on different workers), beside round r+1's decoding and round
 *     r+2's cutting into lines;
 *   - the worker that ends the last chain runs each of round r's blocks'
 *     end in input order (its error) and gives it its place in the output
 *     (prefix sums), then opens the step's gate;
 *   - behind the gate: round r's pr_feature_finish (operators after vocab,
 *     side tables) and jagged writes at their place
 *     (pr_npy_jagged_pwrite_side), and round r+1's engine first half per
 *     unit as soon as it is decoded (pr_engine_process_par: the lookup of
 *     every key that already has an index, direct or hash table; safe since
 *     no insert runs once the gate is open: an exclusive split);
 *   - after the step, one thread appends round r's rejects.
 * The halves never overlap each other (the gate), and round r+1's lookups
 * run after round r's inserts, so a first appearance split across rounds
 * gets its index once, in order. Two slots of units hold the two rounds in
 * flight. Rounds the first half leaves whole (eviction, streaming
 * min_count, the counting pass, and every block with one worker, which the
 * halves would only cost) run the old way at the start of the next step:
 * engine, finish and write block after block in input order. The decoder
 * appends or rejects each record on its own (nothing it does depends on the
 * rows around it) and the engine's results do not depend on where blocks
 * end or how it was split, so every output depends only on the input
 * order: never on the thread count, the block size or the units.
 *
 * Stage times (pr_offline_result, printed by `piperec process` as for the
 * Criteo layout), in thread-seconds of wall clock: decode (each worker's
 * slice), engine (engine + pr_feature_finish, or the counting pass), write
 * (the .npy layout, recycled.npy, rejects.tsv), idle (per step, the
 * workers' time in neither: waiting at the gate or for a unit's decoding,
 * at the step's end, or for the serial parts), vocab export; and the time holding the input order
 * (serial_engine_s: per step the time from the end of its last decoding
 * or cutting task to the gate's opening, or the whole serial engine;
 * serial_write_s), the serial fraction; chain_s: per round the
 * longest column chain, most of it beside decoding (a bound of its own on
 * many cores: the wall time is at least chain_s).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "offline_delim.h"
#include "pr_clock.h"
#include "pr_ingest.h"
#include "pr_mbuf.h"
#include "pr_npy.h"
#include "pr_service.h"
#include "pr_vocab.h"

struct pr__srun;

/* A unit of a round: a contiguous run of its lines, cut, decoded, looked
 * up and finished by whichever worker takes it (units are the phases'
 * tasks, so that a worker busy with a long column chain leaves the
 * decoding to the others); input order is unit order, then block order.
 * The fields in groups, each written by one task at a time: the lines
 * (cut, or set by the reader), then what decoding made of them. */
typedef struct pr__sunit {
    struct pr__srun *run;
    const char *text; /* the lines' bytes: the mapped input or the round's copy */
    /* Its lines: [0, n_src) of s_off, s_len, s_no + line_base. */
    const size_t *s_off, *s_len;
    const int64_t *s_no;
    size_t n_src;
    int64_t line_base;
    /* Mapped input: its byte range, and the lines cut there (non-blank ones
     * in m_*, all of them counted in m_lines). */
    const char *c0, *c1;
    size_t *m_off, *m_len;
    int64_t *m_no;
    size_t m_n, m_cap;
    int64_t m_lines;
    int cut_rc;
    /* Decoded: its blocks in order (blk[0, used)), the engine's output of
     * each, the split state between the halves, and per block [n_feat + 1]
     * its values per feature, then (once placed in input order,
     * pr__srun_place) its first value per feature and ([n_feat]) first row. */
    pr_block **blk;
    pr_out **out;
    pr_engine_split **sp;
    uint64_t **place;
    uint32_t n_blk, used;
    pr_mbuf rej; /* its rejects.tsv lines, in line order */
    uint64_t rejected, rejected_by[PR_DEC__COUNT], filtered, sampled_out;
    int decoded; /* this step's decoding of it is done (atomic; PAR waits for it) */
    int rc;
    char err[256];
} pr__sunit;

/* One worker thread: its decoder and its thread-seconds since the last
 * collection (pr__srun_collect). */
typedef struct pr__swork {
    struct pr__srun *run;
    pr_json_decoder *dec;
    int64_t decode_ns, engine_ns, write_ns;
    int64_t fill_end; /* when its last DECODE or CUT task of the step ended */
    uint32_t eagain_waits;
    int rc;
    char err[256];
} pr__swork;

/* A round of input read by the calling thread (stdin, Avro, Protobuf): the
 * non-blank lines, their bytes back to back; or the places of the lines
 * in the mapped input (the first-line check). */
typedef struct pr__sround {
    char *buf;
    size_t len, cap;
    const char *map; /* the mapped input, when the lines lie there (then off is from map) */
    size_t *off;     /* [n]: line i is buf[off[i], off[i] + llen[i]) */
    size_t *llen;
    int64_t *lineno;
    size_t n, max; /* lines held, lines per round */
} pr__sround;

/* The tasks of a step: every worker takes them kind after kind (in this
 * order), each kind's items by an atomic counter. The kinds from
 * PR__T_FINISH on wait for the gate: the pending round's column chains and
 * blocks' ends done (no insert runs once it is open, and the blocks have
 * their places); a PAR unit also waits for its own decoding. */
enum { PR__T_COL, PR__T_DECODE, PR__T_CUT, PR__T_FINISH, PR__T_PAR, PR__T__COUNT };
typedef struct pr__stask {
    uint32_t n, next;
    int slot; /* the round slot its units are in */
} pr__stask;

typedef struct pr__srun {
    const pr_feature_schema *schema;
    const pr_offline_opts *opts;
    pr_offline_result *res;
    int64_t lead; /* non-blank lines before the first JSON object; -1 after it (pr__srun_line) */
    pr_engine *eng;
    pr__swork *work; /* [n_work] */
    int n_work;
    uint32_t block_rows, unit_rows; /* lines per round / n_work; blocks' capacity */
    pr__sround round;               /* the lines the calling thread read (decoded in their step) */
    /* Two round slots of n_unit units each (rounds overlap: round r's
     * columns and writes while round r + 1 decodes). */
    pr__sunit *unit[2];
    uint32_t n_unit;
    int slot;         /* the slot the next round fills */
    bool pending;     /* a decoded round waits in slot 1 - slot for its rest */
    bool pending_par; /* ... and its first half ran (every block split or whole) */
    pr__stask task[PR__T__COUNT];
    /* The step's gate (PR__T_FINISH on): opened by the worker that ends the
     * last column chain, after the blocks' ends (pr__srun_gate). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool gate_open;
    uint32_t cols_done; /* atomic */
    int p_slot, p_rc;   /* the pending round's slot, its ends' error */
    char *p_errstr;     /* ... where the ends write it (the step's errstr) */
    size_t p_errstr_size;
    int64_t t_gate;            /* when the gate opened */
    uint32_t n_cols;           /* engine sparse columns */
    int64_t *col_ns;           /* [n_cols] this step's chain of each column */
    uint32_t *col_order;       /* [n_cols] the order a step takes the columns in */
    pr_vocab_export_job *vjob; /* the export's tasks, for its workers */
    /* Several workers: each writes its blocks at their place (prefix sums
     * of rows and of each feature's values, in input order); one appends. */
    bool positional;
    uint64_t rows_assigned, *val_assigned; /* [n_feat] */
    uint32_t fail_u, fail_i; /* split round: the block whose end failed; fail_u = n_unit: none */
    pr_npy_jagged *jag;
    pr_npy_writer *w_recycled;
    FILE *rejects;
    bool counting;
    const char **names; /* sparse feature names, side order */
    uint16_t n_labels, n_dense, n_feat;
    int64_t decode_ns, engine_ns, write_ns, idle_ns, vocab_ns; /* stage timers */
    int64_t vocab_cpu_ns, vocab_longest_ns, close_ns;          /* after the pass */
    int64_t serial_eng_ns, serial_wr_ns; /* ... of which holding the input order */
    int64_t chain_ns; /* per round its longest column chain (beside decoding, but the tail) */
} pr__srun;

static int pr__srun_recycled(pr__srun *run, const pr_out *o, char *errstr, size_t errstr_size)
{
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        const pr_recycled *r = &o->recycled[i];
        int64_t row[4] = {r->col, (int64_t)(run->res->rows + r->row), r->index, (int64_t)r->number};
        int rc = pr_npy_append_rows(run->w_recycled, row, 1, errstr, errstr_size);
        if (rc)
            return rc;
    }
    return 0;
}

/* Give block i of unit u its place in the output (in input order): its
 * value counts per feature become its first value per feature, and
 * place[n_feat] its first row. */
static void pr__srun_place(pr__srun *run, pr__sunit *u, uint32_t i)
{
    uint64_t *pl = u->place[i];
    for (uint16_t f = 0; f < run->n_feat; f++) {
        uint64_t n = pl[f];
        pl[f] = run->val_assigned[f];
        run->val_assigned[f] += n;
    }
    pl[run->n_feat] = run->rows_assigned;
    run->rows_assigned += u->blk[i]->rows;
}

/* Write block i of unit u at its place (any thread, once placed). */
static int pr__sunit_pwrite(pr__sunit *u, uint32_t i, char *errstr, size_t errstr_size)
{
    const pr__srun *run = u->run;
    const uint64_t *pl = u->place[i];
    return pr_npy_jagged_pwrite_side(run->jag, u->out[i]->side, pl[run->n_feat], pl,
                                     u->blk[i]->rows, errstr, errstr_size);
}

/* Write block i of unit u, finished (in input order): appended, or at its
 * place with several workers. */
static int pr__srun_write(pr__srun *run, pr__sunit *u, uint32_t i, char *errstr, size_t errstr_size)
{
    const pr_block *b = u->blk[i];
    pr_out *o = u->out[i];
    int64_t t1 = pr_mono_ns();
    int rc;
    if (run->positional) {
        pr__srun_place(run, u, i);
        rc = pr__sunit_pwrite(u, i, errstr, errstr_size);
    } else {
        rc = pr_npy_jagged_append_side(run->jag, o->side, 0, b->rows, errstr, errstr_size);
    }
    if (rc)
        return rc;
    if (o->n_recycled) {
        if ((rc = pr__srun_recycled(run, o, errstr, errstr_size)))
            return rc;
        pr_engine_vocab_notices_delivered(run->eng, pr_engine_vocab_recycled_total(run->eng) + 1);
    }
    int64_t dt = pr_mono_ns() - t1;
    run->write_ns += dt;
    run->serial_wr_ns += dt;
    run->res->rows += b->rows;
    return 0;
}

/* The whole engine (its second half, which runs all of pr_engine_process
 * on a whole block), finish and write (or count) block i of unit u, in
 * input order: the path of rounds whose blocks do not all split. */
static int pr__srun_flush(pr__srun *run, pr__sunit *u, uint32_t i, char *errstr, size_t errstr_size)
{
    pr_block *b = u->blk[i];
    pr_out *o = u->out[i];
    int rc = 0;
    if (b->rows == 0)
        return 0;
    int64_t t0 = pr_mono_ns();
    if (run->counting) {
        rc = pr_engine_count(run->eng, b);
        run->engine_ns += pr_mono_ns() - t0;
        run->serial_eng_ns += pr_mono_ns() - t0;
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "offline: counting pass: %s",
                             pr_strerror(rc));
        return 0;
    }
    if ((rc = pr_engine_process_seq(run->eng, b, o, u->sp[i], errstr, errstr_size)) ||
        (rc = pr_feature_finish(run->schema, b, o, errstr, errstr_size)))
        return rc;
    int64_t dt = pr_mono_ns() - t0;
    run->engine_ns += dt;
    run->serial_eng_ns += dt;
    return pr__srun_write(run, u, i, errstr, errstr_size);
}

/* ---------------------------------------------------------------- the tasks */

/* Records are binary (Avro or Protobuf): rejects.tsv shows them as hex. */
static bool pr__binary(const pr__srun *run)
{
    return run->opts->source && (run->opts->source->format == PR_MSG_PROTOBUF ||
                                 run->opts->source->format == PR_MSG_AVRO);
}

/* The decoder's reject: a rejects.tsv line (line, reason, detail, record). */
static void pr__sunit_reject(void *opaque, int reason, const char *detail, const char *rec,
                             size_t len, int64_t recno)
{
    pr__sunit *u = opaque;
    if (u->run->counting)
        return;
    if (pr_decode_dropped(reason)) { /* not a reject: counted only */
        if (reason == PR_DEC_FILTERED)
            u->filtered++;
        else
            u->sampled_out++;
        return;
    }
    pr_mbuf_printf(&u->rej, "%" PRId64 "\t%s\t%s\t", recno, pr_decode_reason_name(reason), detail);
    if (pr__binary(u->run)) /* a binary record: as hex, so the line stays one line */
        for (size_t i = 0; i < len; i++)
            pr_mbuf_printf(&u->rej, "%02x", (unsigned char)rec[i]);
    else
        pr_mbuf_append(&u->rej, rec, len);
    pr_mbuf_append(&u->rej, "\n", 1);
    u->rejected++;
    if (reason > 0 && reason < PR_DEC__COUNT)
        u->rejected_by[reason]++;
}

/* The unit's next empty block, with its output and split state
 * (allocated on first need, reused after). */
static pr_block *pr__sunit_block(pr__sunit *u)
{
    if (u->used == u->n_blk) {
        const pr__srun *run = u->run;
        size_t n = (size_t)u->n_blk + 1;
        pr_block **nb = realloc(u->blk, n * sizeof(*nb));
        if (nb)
            u->blk = nb;
        pr_out **no = nb ? realloc(u->out, n * sizeof(*no)) : NULL;
        if (no)
            u->out = no;
        pr_engine_split **ns = no ? realloc(u->sp, n * sizeof(*ns)) : NULL;
        if (ns)
            u->sp = ns;
        uint64_t **np = ns ? realloc(u->place, n * sizeof(*np)) : NULL;
        if (!np)
            return NULL;
        u->place = np;
        pr_block *b = pr_feature_block_new(run->schema, run->unit_rows, true);
        pr_out *o =
            pr_feature_out_new(run->schema, run->unit_rows, pr_engine_sparse_width(run->eng));
        pr_engine_split *sp = pr_engine_split_new(run->eng);
        uint64_t *pl = calloc((size_t)run->n_feat + 1, sizeof(*pl));
        if (!b || !o || !sp || !pl) {
            pr_block_free(b);
            pr_out_free(o);
            pr_engine_split_free(sp);
            free(pl);
            return NULL;
        }
        u->place[u->n_blk] = pl;
        /* the phases never overlap a first half with a second */
        pr_engine_split_set_exclusive(sp, true);
        u->blk[u->n_blk] = b;
        u->out[u->n_blk] = o;
        u->sp[u->n_blk++] = sp;
    }
    return u->blk[u->used];
}

/* A reader's PR_EAGAIN (schema registry down): wait 100 ms and retry, for
 * at most a minute in all; false when that is used up. */
static bool pr__swork_wait(pr__swork *w)
{
    return pr__offline_eagain_wait(&w->eagain_waits);
}

/* Decode unit u's lines into its blocks, with worker w's decoder. */
static int pr__sunit_decode(pr__swork *w, pr__sunit *u)
{
    pr_decode_ctx ctx = {.json = w->dec, .on_reject = pr__sunit_reject, .opaque = u};
    for (uint32_t k = 0; k < u->n_blk; k++)
        pr_block_reset(u->blk[k]);
    u->used = 0;
    pr_block *b = NULL;
    for (size_t i = 0; i < u->n_src; i++) {
        int64_t lineno = u->s_no[i] + u->line_base;
        int rc;
        do {
            if (!b && !(b = pr__sunit_block(u)))
                return pr_seterr(u->err, sizeof(u->err), PR_ENOMEM, "offline: out of memory");
            if (u->s_len[i] == 0) { /* a zero-length record (Avro, Protobuf): as the consumer */
                pr__sunit_reject(u, PR_DEC_EMPTY, "empty message", "", 0, lineno);
                rc = 0;
                break;
            }
            rc = pr_decode_json_line(&ctx, b, u->text + u->s_off[i], u->s_len[i], lineno);
            if (rc == PR_EAGAIN && pr__swork_wait(w)) /* a schema registry not reachable yet */
                continue;
            if (rc == PR_EFULL && b->rows == 0) /* cannot happen: scap >= every max_len */
                return pr_seterr(u->err, sizeof(u->err), PR_EINVAL,
                                 "offline: line %" PRId64 " does not fit an empty block", lineno);
            if (rc == PR_EFULL) {
                u->used++;
                b = NULL;
            }
        } while (rc == PR_EFULL);
        if (rc < 0)
            return pr_seterr(u->err, sizeof(u->err), rc, "offline: line %" PRId64 ": %s", lineno,
                             pr_strerror(rc));
    }
    if (b && b->rows)
        u->used++;
    return u->rej.err ? pr_seterr(u->err, sizeof(u->err), PR_ENOMEM, "offline: out of memory") : 0;
}

/* The engine's first half on unit u's blocks, and their values per
 * feature (for their place in the output). */
static void pr__sunit_par(pr__sunit *u)
{
    const pr__srun *run = u->run;
    for (uint32_t i = 0; i < u->used; i++) {
        const pr_fside *side = u->blk[i]->side;
        for (uint16_t f = 0; run->positional && f < run->n_feat; f++) {
            const int32_t *len = side->lengths + (size_t)f * side->cap;
            uint64_t n = 0;
            for (uint32_t r = 0; r < u->blk[i]->rows; r++)
                n += (uint32_t)len[r];
            u->place[i][f] = n;
        }
        pr_engine_process_par(run->eng, u->blk[i], u->out[i], u->sp[i]);
    }
}

/* Column c's second half over the pending round's blocks in input order
 * (unit after unit): first appearances keep each column's input order, and
 * the columns' tables are independent. */
static void pr__srun_col(pr__srun *run, int slot, uint32_t c)
{
    pr__sunit *us = run->unit[slot];
    for (uint32_t k = 0; k < run->n_unit; k++)
        for (uint32_t i = 0; i < us[k].used; i++)
            pr_engine_process_seq_col(run->eng, us[k].blk[i], us[k].out[i], us[k].sp[i], c);
}

/* The operators after vocab and the side tables of unit u's blocks
 * (nothing shared: any order), each written at its place when placed
 * (those before a failed block, run->fail_u / fail_i). */
static void pr__sunit_finish(pr__swork *w, pr__sunit *u, uint32_t k)
{
    const pr__srun *run = u->run;
    for (uint32_t i = 0; !u->rc && i < u->used; i++) {
        int64_t t0 = pr_mono_ns();
        u->rc = pr_feature_finish(run->schema, u->blk[i], u->out[i], u->err, sizeof(u->err));
        int64_t t1 = pr_mono_ns();
        w->engine_ns += t1 - t0;
        if (!u->rc && run->positional &&
            (k < run->fail_u || (k == run->fail_u && i < run->fail_i))) {
            u->rc = pr__sunit_pwrite(u, i, u->err, sizeof(u->err));
            w->write_ns += pr_mono_ns() - t1;
        }
    }
}

/* Cut unit u's byte range of the mapped input into lines (numbered from
 * 1 within the range; blank ones counted, not kept). */
static bool pr__blank(const char *s, size_t n);
static void pr__sunit_cut(pr__sunit *u)
{
    const char *map = u->text;
    u->m_n = 0;
    u->m_lines = 0;
    u->cut_rc = 0;
    for (const char *p = u->c0; p < u->c1;) {
        const char *nl = memchr(p, '\n', (size_t)(u->c1 - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(u->c1 - p);
        u->m_lines++;
        if (!pr__blank(p, len)) {
            if (u->m_n == u->m_cap) {
                size_t cap = u->m_cap ? u->m_cap * 2 : 4096;
                size_t *no = realloc(u->m_off, cap * sizeof(*no));
                if (no)
                    u->m_off = no;
                size_t *nl2 = no ? realloc(u->m_len, cap * sizeof(*nl2)) : NULL;
                if (nl2)
                    u->m_len = nl2;
                int64_t *nn = nl2 ? realloc(u->m_no, cap * sizeof(*nn)) : NULL;
                if (!nn) {
                    u->cut_rc = PR_ENOMEM;
                    return;
                }
                u->m_no = nn;
                u->m_cap = cap;
            }
            u->m_off[u->m_n] = (size_t)(p - map);
            u->m_len[u->m_n] = len;
            u->m_no[u->m_n++] = u->m_lines;
        }
        p = nl ? nl + 1 : u->c1;
    }
    u->s_off = u->m_off;
    u->s_len = u->m_len;
    u->s_no = u->m_no;
    u->n_src = u->m_n;
}

static void pr__srun_gate(pr__srun *run, pr__swork *w);

/* Wait (on run->mu) until *flag is set (flag given) or *open is true. */
static void pr__srun_wait(pr__srun *run, const int *flag, const bool *open)
{
    pthread_mutex_lock(&run->mu);
    while (flag ? !__atomic_load_n(flag, __ATOMIC_ACQUIRE) : !*open)
        pthread_cond_wait(&run->cv, &run->mu);
    pthread_mutex_unlock(&run->mu);
}

/* Task `i` of kind `t` on worker w. */
static void pr__swork_task(pr__swork *w, int t, uint32_t i)
{
    pr__srun *run = w->run;
    pr__sunit *u = &run->unit[run->task[t].slot][i];
    int64_t t0 = pr_mono_ns();
    switch (t) {
    case PR__T_COL: {
        uint32_t c = run->col_order[i];
        pr__srun_col(run, run->task[t].slot, c);
        run->col_ns[c] = pr_mono_ns() - t0;
        w->engine_ns += run->col_ns[c];
        if (__atomic_add_fetch(&run->cols_done, 1, __ATOMIC_ACQ_REL) == run->task[t].n)
            pr__srun_gate(run, w);
        return;
    }
    case PR__T_DECODE:
        u->rc = pr__sunit_decode(w, u);
        w->decode_ns += pr_mono_ns() - t0;
        pthread_mutex_lock(&run->mu);
        __atomic_store_n(&u->decoded, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&run->cv);
        pthread_mutex_unlock(&run->mu);
        break;
    case PR__T_CUT:
        pr__sunit_cut(u);
        w->decode_ns += pr_mono_ns() - t0;
        break;
    case PR__T_FINISH:
        pr__sunit_finish(w, u, i);
        return;
    case PR__T_PAR:
        pr__srun_wait(run, &u->decoded, NULL);
        t0 = pr_mono_ns();
        if (!u->rc && !run->p_rc)
            pr__sunit_par(u);
        w->engine_ns += pr_mono_ns() - t0;
        return;
    }
    w->fill_end = pr_mono_ns();
}

/* A step on every worker: the tasks, kind after kind, until none is left;
 * the gated kinds once the gate is open. Every task a worker waits for was
 * taken by a running worker before (kinds are taken in order), so the waits
 * end. */
static void *pr__swork_main(void *arg)
{
    pr__swork *w = arg;
    pr__srun *run = w->run;
    w->fill_end = 0;
    for (int t = 0; t < PR__T__COUNT; t++) {
        pr__stask *tk = &run->task[t];
        uint32_t i;
        if (t == PR__T_FINISH && (run->task[PR__T_FINISH].n || run->task[PR__T_PAR].n))
            pr__srun_wait(run, NULL, &run->gate_open);
        while ((i = __atomic_fetch_add(&tk->next, 1, __ATOMIC_RELAXED)) < tk->n)
            pr__swork_task(w, t, i);
    }
    return NULL;
}

/* Run `fn` on every worker at once (the calling thread takes worker 0, and
 * any whose thread did not start) and wait for all: the barrier at the
 * end of a step. */
static void pr__srun_phase(pr__srun *run, void *(*fn)(void *))
{
    pthread_t tid[64];
    bool started[64] = {false};
    for (int k = 1; k < run->n_work; k++)
        started[k] = pthread_create(&tid[k], NULL, fn, &run->work[k]) == 0;
    for (int k = 0; k < run->n_work; k++)
        if (k == 0 || !started[k])
            fn(&run->work[k]);
    for (int k = 1; k < run->n_work; k++)
        if (started[k])
            pthread_join(tid[k], NULL);
}

/* Set a phase's tasks (n = 0: none of that kind). */
static void pr__srun_task(pr__srun *run, int t, uint32_t n, int slot)
{
    run->task[t] = (pr__stask){.n = n, .next = 0, .slot = slot};
}

/* The workers' thread-seconds into the run's stage timers. */
static void pr__srun_collect(pr__srun *run)
{
    for (int k = 0; k < run->n_work; k++) {
        pr__swork *w = &run->work[k];
        run->decode_ns += w->decode_ns;
        run->engine_ns += w->engine_ns;
        run->write_ns += w->write_ns;
        w->decode_ns = w->engine_ns = w->write_ns = 0;
    }
}

/* Unit u's rejects, in line order, to rejects.tsv (in input order); its
 * filtered and sampled-out counts to the result. */
static void pr__srun_rejects(pr__srun *run, pr__sunit *u)
{
    if (!run->counting) {
        run->res->filtered += u->filtered;
        run->res->sampled_out += u->sampled_out;
    }
    u->filtered = u->sampled_out = 0;
    if (!run->counting && u->rej.len) {
        int64_t t0 = pr_mono_ns();
        fwrite(u->rej.buf, 1, u->rej.len, run->rejects);
        int64_t dt = pr_mono_ns() - t0;
        run->write_ns += dt;
        run->serial_wr_ns += dt;
        run->res->rejected += u->rejected;
        for (int r = 0; r < PR_DEC__COUNT; r++)
            run->res->rejected_by[r] += u->rejected_by[r];
    }
    u->rejected = 0;
    memset(u->rejected_by, 0, sizeof(u->rejected_by));
    pr_mbuf_reset(&u->rej);
}

/* ---------------------------------------------------------------- the rounds' steps */

/* Every block of the round in `slot` went through the first half and
 * split (not the counting pass, nor blocks it left whole). */
static bool pr__srun_all_split(const pr__srun *run, int slot)
{
    if (run->counting || run->n_work == 1)
        return false;
    const pr__sunit *us = run->unit[slot];
    for (uint32_t k = 0; k < run->n_unit; k++)
        for (uint32_t i = 0; i < us[k].used; i++)
            if (pr_engine_split_whole(us[k].sp[i]))
                return false;
    return true;
}

/* The round in `slot`, in input order block after block: the counting
 * pass, or blocks the first half left whole (eviction, streaming
 * min_count, one worker). */
static int pr__srun_serial(pr__srun *run, int slot, char *errstr, size_t errstr_size)
{
    int rc = 0;
    pr__sunit *us = run->unit[slot];
    for (uint32_t k = 0; !rc && k < run->n_unit; k++) {
        pr__srun_rejects(run, &us[k]);
        for (uint32_t i = 0; !rc && i < us[k].used; i++)
            rc = pr__srun_flush(run, &us[k], i, errstr, errstr_size);
    }
    return rc;
}

/* Each block's end in input order (its error; only the first is
 * reported), placing the blocks before a failure in the output; fail_u
 * and fail_i name the failed block (fail_u = n_unit: none). */
static int pr__srun_ends(pr__srun *run, int slot, char *errstr, size_t errstr_size)
{
    int rc = 0;
    pr__sunit *us = run->unit[slot];
    run->fail_u = run->n_unit;
    run->fail_i = 0;
    for (uint32_t k = 0; k < run->n_unit; k++) {
        pr__sunit *u = &us[k];
        for (uint32_t i = 0; i < u->used; i++) {
            char later[256];
            int erc =
                pr_engine_process_seq_end(run->eng, u->blk[i], u->out[i], u->sp[i],
                                          rc ? later : errstr, rc ? sizeof(later) : errstr_size);
            if (erc && !rc) {
                rc = erc;
                run->fail_u = k;
                run->fail_i = i;
            }
            if (!rc && run->positional)
                pr__srun_place(run, u, i);
        }
    }
    return rc;
}

/* The split round in `slot` after its finish: rejects in input order and
 * its rows (written at their place by the finish), or appended here, up
 * to a failing block (as the serial path stops there). */
static int pr__srun_writes(pr__srun *run, int slot, int rc, char *errstr, size_t errstr_size)
{
    int64_t t0 = pr_mono_ns();
    pr__sunit *us = run->unit[slot];
    for (uint32_t k = 0; k < run->n_unit && k <= run->fail_u; k++) {
        pr__sunit *u = &us[k];
        if (u->rc && !rc)
            return pr_seterr(errstr, errstr_size, u->rc, "%s", u->err);
        pr__srun_rejects(run, u);
        for (uint32_t i = 0; i < (k == run->fail_u ? run->fail_i : u->used); i++) {
            if (run->positional) { /* written by pr__sunit_finish */
                run->res->rows += u->blk[i]->rows;
                continue;
            }
            int wrc = pr__srun_write(run, u, i, errstr, errstr_size);
            if (wrc)
                return wrc;
        }
    }
    if (run->positional) {
        int64_t dw = pr_mono_ns() - t0;
        run->write_ns += dw;
        run->serial_wr_ns += dw;
    }
    return rc;
}

/* Column tasks longest first (the last round's chains): the longest chain
 * starts at once, and the shorter ones fill in beside it. */
static void pr__srun_col_order(pr__srun *run)
{
    for (uint32_t i = 1; i < run->n_cols; i++)
        for (uint32_t j = i;
             j > 0 && run->col_ns[run->col_order[j]] > run->col_ns[run->col_order[j - 1]]; j--) {
            uint32_t t = run->col_order[j];
            run->col_order[j] = run->col_order[j - 1];
            run->col_order[j - 1] = t;
        }
}

/* On the worker that ended the pending round's last column chain: the
 * blocks' ends in input order (their places, the first error), then the
 * gate opens (the finish and the next round's first half may start). */
static void pr__srun_gate(pr__srun *run, pr__swork *w)
{
    int64_t t0 = pr_mono_ns();
    run->p_rc = pr__srun_ends(run, run->p_slot, run->p_errstr, run->p_errstr_size);
    int64_t t1 = pr_mono_ns();
    w->engine_ns += t1 - t0;
    pthread_mutex_lock(&run->mu);
    run->t_gate = t1;
    run->gate_open = true;
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
}

/* The tasks of one step on every worker (one phase, a barrier at its end):
 * the pending round's column chains (p_split), its ends (the gate), finish
 * and writes at their place; the new round's decoding (have_r) and first
 * half (par); the next round's cutting (cut). What holds the input order
 * is the time from the end of the last decoding or cutting task to the
 * gate's opening (all of the chains and ends when there is none). */
static int pr__srun_tasks(pr__srun *run, bool p_split, bool have_r, bool par, bool cut,
                          char *errstr, size_t errstr_size)
{
    int ps = 1 - run->slot;
    memset(run->task, 0, sizeof(run->task));
    run->cols_done = 0;
    run->p_rc = 0;
    run->p_slot = ps;
    run->p_errstr = errstr;
    run->p_errstr_size = errstr_size;
    run->gate_open = !p_split;
    if (p_split) {
        pr__srun_col_order(run);
        pr__srun_task(run, PR__T_COL, run->n_cols, ps);
        pr__srun_task(run, PR__T_FINISH, run->n_unit, ps);
    }
    if (have_r) {
        pr__srun_task(run, PR__T_DECODE, run->n_unit, run->slot);
        for (uint32_t k = 0; k < run->n_unit; k++)
            run->unit[run->slot][k].decoded = 0;
    }
    if (par)
        pr__srun_task(run, PR__T_PAR, run->n_unit, run->slot);
    if (cut)
        pr__srun_task(run, PR__T_CUT, run->n_unit, ps);
    int64_t t0 = pr_mono_ns();
    if (p_split && run->n_cols == 0) /* no chain to end it */
        pr__srun_gate(run, &run->work[0]);
    if (p_split || have_r || cut)
        pr__srun_phase(run, pr__swork_main);
    pr__srun_collect(run);
    if (!p_split)
        return 0;
    int64_t other_end = t0, chain = 0;
    for (uint32_t c = 0; c < run->n_cols; c++)
        chain = run->col_ns[c] > chain ? run->col_ns[c] : chain;
    for (int k = 0; k < run->n_work; k++)
        other_end = run->work[k].fill_end > other_end ? run->work[k].fill_end : other_end;
    run->serial_eng_ns += run->t_gate > other_end ? run->t_gate - other_end : 0;
    run->chain_ns += chain;
    return pr__srun_writes(run, ps, run->p_rc, errstr, errstr_size);
}

/* One step of the pipeline of rounds: the pending round's rest (its
 * columns, ends, finish and writes; or all of it serially when it did not
 * split) overlapped with the new round's decoding and first half (have_r:
 * its lines are in the units of run->slot) and the next round's cutting
 * (cut: its byte ranges are in the units of the other slot, which the
 * pending round no longer reads by then). Then the new round is pending.
 * The first error in input order wins: the pending round's, then the new
 * round's decoding. */
static int pr__srun_step(pr__srun *run, bool have_r, bool cut, char *errstr, size_t errstr_size)
{
    int64_t t_step = pr_mono_ns();
    int64_t busy0 = run->decode_ns + run->engine_ns + run->write_ns;
    int ps = 1 - run->slot, rc = 0;
    bool p_split = run->pending && pr__srun_all_split(run, ps);
    if (run->pending && !p_split)
        rc = pr__srun_serial(run, ps, errstr, errstr_size);
    if (!rc)
        rc = pr__srun_tasks(run, p_split, have_r, have_r && !run->counting && run->n_work > 1, cut,
                            errstr, errstr_size);
    for (uint32_t k = 0; !rc && have_r && k < run->n_unit; k++) {
        pr__sunit *u = &run->unit[run->slot][k];
        if (u->rc)
            rc = pr_seterr(errstr, errstr_size, u->rc, "%s", u->err);
    }
    run->pending = have_r;
    run->slot = 1 - run->slot;
    /* Thread-seconds of the step on no stage: n_work threads for its wall
     * time, less what they did (the serial parts are done by one). */
    int64_t idle = (int64_t)run->n_work * (pr_mono_ns() - t_step) -
                   (run->decode_ns + run->engine_ns + run->write_ns - busy0);
    run->idle_ns += idle > 0 ? idle : 0;
    return rc;
}

/* A round of copied lines (round.off...): each unit a contiguous run of
 * them, decoded in this step (so the next round can reuse the buffer). */
static int pr__srun_round(pr__srun *run, char *errstr, size_t errstr_size)
{
    pr__sround *rd = &run->round;
    for (uint32_t k = 0; k < run->n_unit; k++) {
        pr__sunit *u = &run->unit[run->slot][k];
        size_t l0 = rd->n * k / run->n_unit, l1 = rd->n * (k + 1) / run->n_unit;
        u->text = rd->map ? rd->map : rd->buf;
        u->s_off = rd->off + l0;
        u->s_len = rd->llen + l0;
        u->s_no = rd->lineno + l0;
        u->n_src = l1 - l0;
        u->line_base = 0;
    }
    int rc = pr__srun_step(run, true, false, errstr, errstr_size);
    rd->n = 0;
    rd->len = 0;
    return rc;
}

/* ---------------------------------------------------------------- reading */

static bool pr__blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

static bool pr__starts_object(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    return i < n && s[i] == '{';
}

/* Add a line to the round (copied, or only its place when it lies in the
 * mapped input): 0 or PR_ENOMEM. */
static int pr__sround_add(pr__sround *rd, const char *line, size_t len, int64_t lineno)
{
    if (rd->map) {
        rd->off[rd->n] = (size_t)(line - rd->map);
        rd->llen[rd->n] = len;
        rd->lineno[rd->n++] = lineno;
        return 0;
    }
    if (rd->len + len > rd->cap) {
        size_t cap = rd->cap ? rd->cap : 1 << 20;
        while (cap < rd->len + len)
            cap *= 2;
        char *nb = realloc(rd->buf, cap);
        if (!nb)
            return PR_ENOMEM;
        rd->buf = nb;
        rd->cap = cap;
    }
    memcpy(rd->buf + rd->len, line, len);
    rd->off[rd->n] = rd->len;
    rd->llen[rd->n] = len;
    rd->lineno[rd->n++] = lineno;
    rd->len += len;
    return 0;
}

/* Lines before the first JSON object that may still be bad records of a
 * JSON lines file (rejected, like the same line further on); this many
 * without an object, or an input with none, is not JSON lines at all. */
#define PR__SNIFF_LINES 8

/* The input is not JSON lines (see PR__SNIFF_LINES). */
static int pr__not_json_lines(const pr__srun *run, int64_t lineno, char *errstr, size_t errstr_size)
{
    return pr_seterr(errstr, errstr_size, PR_EINVAL,
                     "%s: no JSON object in the first %" PRId64 " non-blank line(s), up to "
                     "line %" PRId64 ": source.format json reads JSON lines (one object per "
                     "line); varint-delimited Avro or Protobuf records need source.format avro "
                     "or protobuf, and Criteo TSV the Criteo layout (schema: { label, dense: N, "
                     "sparse: M })",
                     run->opts->input, run->lead, lineno);
}

/* One line of the input: counted, skipped when blank, else added to the
 * round (which runs when full). run->lead counts the non-blank lines before
 * the first object (-1 once one was seen). */
static int pr__srun_line(pr__srun *run, const char *line, size_t len, int64_t lineno, char *errstr,
                         size_t errstr_size)
{
    if (pr__blank(line, len))
        return 0;
    if (run->lead == 0 && len >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s:%" PRId64 ": starts with a UTF-8 byte order mark, which JSON "
                         "lines must not have (RFC 8259): remove it, e.g. "
                         "sed -i '1s/^\\xEF\\xBB\\xBF//' FILE",
                         run->opts->input, lineno);
    if (run->lead >= 0) {
        if (pr__starts_object(line, len))
            run->lead = -1;
        else if (++run->lead >= PR__SNIFF_LINES)
            return pr__not_json_lines(run, lineno, errstr, errstr_size);
    }
    if (pr__sround_add(&run->round, line, len, lineno))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory");
    return run->round.n == run->round.max ? pr__srun_round(run, errstr, errstr_size) : 0;
}

/* One pass over varint-delimited records (formats avro and protobuf: each
 * record an unsigned LEB128 length, then the message bytes as on Kafka;
 * protobuf's writeDelimitedTo), read by offline_delim.c's reader, the one
 * `--fit` uses too. */
static int pr__srun_pass_delimited(pr__srun *run, FILE *f, char *errstr, size_t errstr_size)
{
    pr__delim d;
    size_t len;
    int rc = pr__delim_start(&d, f, run->opts->input,
                             run->opts->source && run->opts->source->format == PR_MSG_AVRO, errstr,
                             errstr_size);
    while (!rc && (rc = pr__delim_next(&d, &len, errstr, errstr_size)) == 1) {
        rc = 0;
        if (!run->counting) {
            run->res->lines++;
            run->res->bytes += len;
        }
        if (pr__sround_add(&run->round, d.rec, len, d.recno))
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory");
        else if (run->round.n == run->round.max)
            rc = pr__srun_round(run, errstr, errstr_size);
    }
    pr__delim_free(&d);
    return rc;
}

/* The offset just past the first newline at or after `at` (or size). */
static size_t pr__after_newline(const char *map, size_t at, size_t size)
{
    if (at >= size)
        return size;
    const char *nl = memchr(map + at, '\n', size - at);
    return nl ? (size_t)(nl - map) + 1 : size;
}

/* The first non-blank line must open a JSON object (the checks
 * pr__srun_line makes); and the average line length of the first 64 KiB,
 * to size the rounds. 0 or PR_EINVAL. */
static int pr__srun_map_start(pr__srun *run, const char *map, size_t size, size_t *avg,
                              char *errstr, size_t errstr_size)
{
    int64_t lineno = 0;
    run->lead = 0;
    for (size_t p = 0; run->lead >= 0 && p < size;) {
        size_t q = pr__after_newline(map, p, size);
        size_t len = q - p - (map[q - 1] == '\n');
        int rc = pr__srun_line(run, map + p, len, ++lineno, errstr, errstr_size);
        if (rc)
            return rc;
        p = q;
    }
    if (run->lead > 0)
        return pr__not_json_lines(run, lineno, errstr, errstr_size);
    run->round.n = 0; /* pr__srun_line kept the lines: the rounds take them again */
    size_t sample = size < 65536 ? size : 65536, lines = 0;
    for (const char *p = map; (p = memchr(p, '\n', (size_t)(map + sample - p))); p++)
        lines++;
    *avg = sample / (lines ? lines : 1);
    if (*avg < 16)
        *avg = 16;
    return 0;
}

/* The round [pos, end) of the mapped input as one byte range per unit of
 * `slot`, cut at newlines (the units cut them into lines, in a phase). */
static void pr__srun_ranges(pr__srun *run, int slot, const char *map, size_t pos, size_t end)
{
    size_t cut = pos;
    for (uint32_t k = 0; k < run->n_unit; k++) {
        pr__sunit *u = &run->unit[slot][k];
        size_t at = pos + (end - pos) * (size_t)(k + 1) / run->n_unit;
        size_t next = k + 1 == run->n_unit ? end : pr__after_newline(map, at - 1, end);
        u->text = map;
        u->c0 = map + cut;
        u->c1 = map + (next > cut ? next : cut);
        cut = next > cut ? next : cut;
    }
}

/* After the units of `slot` cut their ranges: each its first line number
 * (the counts in input order), and the lines and bytes counted. */
static int pr__srun_bases(pr__srun *run, int slot, int64_t *lines_before, size_t bytes,
                          char *errstr, size_t errstr_size)
{
    for (uint32_t k = 0; k < run->n_unit; k++) {
        pr__sunit *u = &run->unit[slot][k];
        if (u->cut_rc)
            return pr_seterr(errstr, errstr_size, u->cut_rc, "offline: out of memory");
        u->line_base = *lines_before;
        *lines_before += u->m_lines;
        if (!run->counting)
            run->res->lines += (uint64_t)u->m_lines;
    }
    if (!run->counting)
        run->res->bytes += bytes;
    return 0;
}

/* One pass over JSON lines in a regular file, mapped, in rounds of about
 * threads x block_rows lines: the calling thread only cuts each round into
 * one byte range per unit at newlines; the units are cut into lines in the
 * step before the round's (beside that step's work; the first round in a
 * phase of its own), the counts give each its first line number, and the
 * round is decoded where it lies (no copy). 1 when the file cannot be
 * mapped (the caller reads it), else 0 or a negative PR_E* code. */
static int pr__srun_pass_mapped(pr__srun *run, char *errstr, size_t errstr_size)
{
    int fd = open(run->opts->input, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        if (fd >= 0)
            close(fd);
        return 1;
    }
    size_t size = (size_t)st.st_size, avg = 16;
    char *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 1;
    madvise(map, size, MADV_SEQUENTIAL);
    run->round.map = map;
    int rc = pr__srun_map_start(run, map, size, &avg, errstr, errstr_size);
    size_t round_bytes = (size_t)run->n_work * run->block_rows * avg;
    int64_t lines_before = 0;
    size_t pos = 0, end = pr__after_newline(map, round_bytes - 1, size);
    if (!rc) {
        int64_t t0 = pr_mono_ns();
        pr__srun_ranges(run, run->slot, map, 0, end);
        memset(run->task, 0, sizeof(run->task));
        pr__srun_task(run, PR__T_CUT, run->n_unit, run->slot);
        pr__srun_phase(run, pr__swork_main);
        int64_t busy0 = run->decode_ns;
        pr__srun_collect(run);
        int64_t idle = (int64_t)run->n_work * (pr_mono_ns() - t0) - (run->decode_ns - busy0);
        run->idle_ns += idle > 0 ? idle : 0;
        rc = pr__srun_bases(run, run->slot, &lines_before, end, errstr, errstr_size);
    }
    while (!rc && pos < size) {
        bool cut = end < size; /* the next round's ranges, cut in this step */
        size_t next_end = cut ? pr__after_newline(map, end + round_bytes - 1, size) : end;
        if (cut)
            pr__srun_ranges(run, 1 - run->slot, map, end, next_end);
        rc = pr__srun_step(run, true, cut, errstr, errstr_size);
        if (!rc && cut) /* the step made the next round's slot current */
            rc = pr__srun_bases(run, run->slot, &lines_before, next_end - end, errstr, errstr_size);
        pos = end;
        end = next_end;
    }
    /* the pending round's rest reads no line: its rejects are copies */
    run->round.map = NULL;
    munmap(map, size);
    return rc;
}

/* One pass over the input (JSON lines; "-" = stdin), but the last round's
 * rest. */
static int pr__srun_read(pr__srun *run, char *errstr, size_t errstr_size)
{
    const char *in = run->opts->input;
    bool std = strcmp(in, "-") == 0;
    bool delimited = run->opts->source && (run->opts->source->format == PR_MSG_AVRO ||
                                           run->opts->source->format == PR_MSG_PROTOBUF);
    if (!std && !delimited) {
        int rc = pr__srun_pass_mapped(run, errstr, errstr_size);
        if (rc <= 0)
            return rc;
    }
    FILE *f = std ? stdin : fopen(in, "r");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", in, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t lineno = 0;
    int rc = 0;
    run->lead = 0;
    if (delimited)
        rc = pr__srun_pass_delimited(run, f, errstr, errstr_size);
    while (!rc && !feof(f) && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n')
            len--;
        if (!run->counting) {
            run->res->lines++;
            run->res->bytes += (uint64_t)n;
        }
        rc = pr__srun_line(run, line, len, lineno, errstr, errstr_size);
    }
    if (!rc && run->lead > 0)
        rc = pr__not_json_lines(run, lineno, errstr, errstr_size);
    if (!rc && ferror(f))
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", in, strerror(errno));
    free(line);
    if (!std)
        fclose(f);
    return rc || !run->round.n ? rc : pr__srun_round(run, errstr, errstr_size);
}

/* One pass over the input: the rounds, then the last one's rest. */
static int pr__srun_pass(pr__srun *run, char *errstr, size_t errstr_size)
{
    int rc = pr__srun_read(run, errstr, errstr_size);
    if (!rc && run->pending)
        rc = pr__srun_step(run, false, false, errstr, errstr_size);
    run->pending = false;
    return rc;
}

static bool pr__spec_two_pass(const pr_pipeline_spec *spec)
{
    if (spec->count_mode != PR_COUNT_TWO_PASS)
        return false;
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].min_count > 1)
            return true;
    return false;
}

static int pr__mkdirs(const char *dir, char *errstr, size_t errstr_size)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: path too long", dir);
    for (char *p = tmp + 1;; p++)
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", tmp, strerror(errno));
            if (!(*p = c))
                return 0;
        }
}

/* The weighted features' weights files (sparse/<name>.weights.npy). */
static int pr__weigh_files(pr__srun *run, char *errstr, size_t errstr_size)
{
    uint8_t wtd[2 * PR_MAX_SPARSE] = {0};
    bool any = false;
    for (uint32_t i = 0; i < run->schema->n_features; i++) {
        int f = pr_feature_side_index(run->schema, i);
        if (f >= 0 && f < 2 * PR_MAX_SPARSE && pr_feature_weighted(&run->schema->features[i])) {
            wtd[f] = 1;
            any = true;
        }
    }
    return any ? pr_npy_jagged_weigh(run->jag, wtd, false, errstr, errstr_size) : 0;
}

/* Open the outputs: the layout, rejects.tsv, recycled.npy when evicting. */
static int pr__srun_open(pr__srun *run, const pr_pipeline_spec *spec, char *errstr,
                         size_t errstr_size)
{
    const char *dir = run->opts->output_dir;
    char path[4200];
    int rc = pr__mkdirs(dir, errstr, errstr_size);
    if (rc)
        return rc;
    unsigned fl = run->opts->buffered_io ? 0 : PR_NPY_DIRECT;
    if ((rc = pr_npy_jagged_open_flags(&run->jag, dir, run->n_labels, run->n_dense, run->n_feat,
                                       run->names, false, 0, fl, errstr, errstr_size)) ||
        (rc = pr__weigh_files(run, errstr, errstr_size)))
        return rc;
    run->positional = run->n_work > 1;
    if (run->positional && (rc = pr_npy_jagged_begin_positional(run->jag, errstr, errstr_size)))
        return rc;
    snprintf(path, sizeof(path), "%s/recycled.npy", dir);
    if (!pr_spec_has_eviction(spec))
        unlink(path);
    else if ((rc = pr_npy_open(&run->w_recycled, path, PR_NPY_I64, 4, errstr, errstr_size)))
        return rc;
    snprintf(path, sizeof(path), "%s/rejects.tsv", dir);
    if (!(run->rejects = fopen(path, "w")))
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    return 0;
}

/* Export worker: the job's tasks until none is left or one failed. */
static void *pr__swork_vexport(void *arg)
{
    pr__swork *w = arg;
    int64_t t0 = pr_mono_ns();
    w->rc = pr_vocab_export_job_work(w->run->vjob, w->err, sizeof(w->err));
    __atomic_fetch_add(&w->run->vocab_cpu_ns, pr_mono_ns() - t0, __ATOMIC_RELAXED);
    return NULL;
}

/* DIR/vocab/: one file per column, on the workers when the backend reads
 * concurrently (the export comes after the pass, so on one core it would be
 * serial time): largest column first, a large column in pieces
 * (pr_vocab_export_job); same bytes as pr_vocab_export. */
static int pr__srun_vocab(pr__srun *run, const char *dir, char *errstr, size_t errstr_size)
{
    if (!pr_spec_has_op(pr_engine_spec(run->eng), PR_OP_VOCAB))
        return pr_vocab_export(run->eng, dir, errstr, errstr_size); /* its message */
    int n = pr_engine_vocab_read_concurrent(run->eng) ? run->n_work : 1;
    int rc = pr_vocab_export_job_new(run->eng, dir, n, 0, &run->vjob, errstr, errstr_size);
    if (rc)
        return rc;
    if (n == 1) {
        pr__swork_vexport(&run->work[0]);
    } else {
        pr__srun_phase(run, pr__swork_vexport);
    }
    run->vocab_longest_ns = pr_vocab_export_job_longest_ns(run->vjob);
    pr_vocab_export_job_free(run->vjob);
    run->vjob = NULL;
    for (int k = 0; k < n; k++)
        if (run->work[k].rc)
            return pr_seterr(errstr, errstr_size, run->work[k].rc, "%s", run->work[k].err);
    return 0;
}

/* Close the outputs and export the vocabularies (on success), or drop them. */
static int pr__srun_close(pr__srun *run, int rc, char *errstr, size_t errstr_size)
{
    char path[4200];
    int64_t t_close = pr_mono_ns();
    if (!rc && run->jag && run->positional)
        pr_npy_jagged_set_rows(run->jag, run->rows_assigned, run->val_assigned);
    if (!rc && run->jag)
        rc = pr_npy_jagged_close(run->jag, false, errstr, errstr_size);
    else
        pr_npy_jagged_abort(run->jag);
    run->jag = NULL;
    if (!rc && run->w_recycled)
        rc = pr_npy_close(run->w_recycled, errstr, errstr_size);
    else
        pr_npy_abort(run->w_recycled);
    if (run->rejects && fclose(run->rejects) && !rc)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "rejects.tsv: %s", strerror(errno));
    run->close_ns += pr_mono_ns() - t_close;
    if (!rc) {
        int64_t t0 = pr_mono_ns();
        snprintf(path, sizeof(path), "%s/vocab", run->opts->output_dir);
        rc = pr__mkdirs(path, errstr, errstr_size);
        if (!rc)
            rc = pr__srun_vocab(run, path, errstr, errstr_size);
        run->vocab_ns += pr_mono_ns() - t0;
    }
    return rc;
}
/* Units per worker in a round (with several workers): enough that a
 * worker busy with a long column chain leaves its share of the decoding to
 * the others, few enough that blocks stay large (a unit's lines fill about
 * one block of block_rows / units rows, at least 64). */
#define PR__UNITS_PER_WORKER 4
/* Dense bytes of a default block: 8192 rows of 256 columns */
#define PR__BLOCK_DENSE_BYTES (8192u * 256u * 4u)

/* The workers (opts->threads, at most 64), each with its decoder, the two
 * slots' units and the round's line table. */
static int pr__srun_workers(pr__srun *run, char *errstr, size_t errstr_size)
{
    int n = run->opts->threads < 1 ? 1 : run->opts->threads > 64 ? 64 : run->opts->threads;
    run->block_rows = run->opts->block_rows ? run->opts->block_rows : PR_OFFLINE_BLOCK_ROWS;
    /* Wide rows (dense vectors): the default blocks hold at most
     * PR__BLOCK_DENSE_BYTES of dense values each, so that memory stays that
     * of ~256 columns per thread whatever the dims (a few blocks per worker) */
    uint64_t dense_row = 4ull * pr_feature_schema_dense_cols(run->schema);
    if (!run->opts->block_rows && dense_row * run->block_rows > PR__BLOCK_DENSE_BYTES) {
        uint64_t r = PR__BLOCK_DENSE_BYTES / dense_row / 64 * 64;
        run->block_rows = (uint32_t)(r < 64 ? 64 : r);
    }
    uint32_t per =
        run->block_rows / 64 < PR__UNITS_PER_WORKER ? run->block_rows / 64 : PR__UNITS_PER_WORKER;
    per = per && n > 1 ? per : 1; /* one worker: nothing to balance, whole blocks */
    run->unit_rows = (run->block_rows + per - 1) / per;
    run->n_unit = (uint32_t)n * per;
    pr__sround *rd = &run->round;
    rd->max = (size_t)n * run->block_rows;
    rd->off = calloc(rd->max, sizeof(*rd->off));
    rd->llen = calloc(rd->max, sizeof(*rd->llen));
    rd->lineno = calloc(rd->max, sizeof(*rd->lineno));
    run->unit[0] = calloc(run->n_unit, sizeof(*run->unit[0]));
    run->unit[1] = calloc(run->n_unit, sizeof(*run->unit[1]));
    if (!(run->work = calloc((size_t)n, sizeof(*run->work))) || !rd->off || !rd->llen ||
        !rd->lineno || !run->unit[0] || !run->unit[1])
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory");
    for (int s = 0; s < 2; s++)
        for (uint32_t k = 0; k < run->n_unit; k++) {
            run->unit[s][k].run = run;
            pr_mbuf_init(&run->unit[s][k].rej);
        }
    run->n_work = n;
    for (int k = 0; k < n; k++) {
        pr__swork *w = &run->work[k];
        w->run = run;
        if (!(w->dec = pr_json_decoder_new(run->schema, errstr, errstr_size)))
            return PR_EINVAL;
        int rc = run->opts->source
                     ? pr_json_decoder_for_source(w->dec, run->opts->source, errstr, errstr_size)
                     : 0;
        if (rc)
            return rc;
    }
    return 0;
}

static void pr__sunit_free(pr__sunit *u)
{
    for (uint32_t i = 0; i < u->n_blk; i++) {
        pr_block_free(u->blk[i]);
        pr_out_free(u->out[i]);
        pr_engine_split_free(u->sp[i]);
        free(u->place[i]);
    }
    free(u->blk);
    free(u->out);
    free(u->sp);
    free(u->place);
    free(u->m_off);
    free(u->m_len);
    free(u->m_no);
    pr_mbuf_fini(&u->rej);
}

static void pr__srun_workers_free(pr__srun *run)
{
    for (int k = 0; run->work && k < run->n_work; k++)
        pr_json_decoder_free(run->work[k].dec);
    for (int s = 0; s < 2; s++)
        for (uint32_t k = 0; run->unit[s] && k < run->n_unit; k++)
            pr__sunit_free(&run->unit[s][k]);
    free(run->unit[0]);
    free(run->unit[1]);
    free(run->work);
    free(run->col_ns);
    free(run->col_order);
    free(run->val_assigned);
    free(run->round.buf);
    free(run->round.off);
    free(run->round.llen);
    free(run->round.lineno);
}

static int pr__srun_setup(pr__srun *run, const pr_pipeline_spec *spec, const pr_engine_opts *eopts,
                          char *errstr, size_t errstr_size)
{
    const pr_feature_schema *schema = run->schema;
    const char *be = eopts && eopts->backend && eopts->backend[0] ? eopts->backend : "cpu";
    if (strcmp(be, "cpu") != 0 && strcmp(be, "auto") != 0)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "offline: a declared schema's vocabularies run on the cpu backend (list "
                         "features and id keys make jagged columns, which the %s kernel cannot "
                         "read); use engine.backend cpu",
                         be);
    if (!(run->eng = pr_engine_new(spec, eopts, errstr, errstr_size)))
        return PR_EINVAL;
    if (strcmp(pr_engine_backend_name(run->eng), "cpu") != 0)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "offline: engine.backend auto chose %s, but a declared schema's "
                         "vocabularies run on the cpu backend; use engine.backend cpu",
                         pr_engine_backend_name(run->eng));
    if (run->opts->vocab_seed) {
        int rc = pr_vocab_import(run->eng, run->opts->vocab_seed, errstr, errstr_size);
        if (rc)
            return rc;
    }
    if (run->opts->frozen) {
        int frc = pr_engine_vocab_serve(run->eng, run->opts->unseen, errstr, errstr_size);
        if (frc)
            return frc;
    }
    int rc = pr__srun_workers(run, errstr, errstr_size);
    if (rc)
        return rc;
    run->n_cols = pr_engine_spec(run->eng)->n_sparse;
    size_t nc = run->n_cols ? run->n_cols : 1;
    run->col_ns = calloc(nc, sizeof(*run->col_ns));
    run->col_order = calloc(nc, sizeof(*run->col_order));
    run->names = calloc(schema->n_features + 1, sizeof(*run->names));
    run->val_assigned = calloc(schema->n_features + 1, sizeof(*run->val_assigned));
    if (!run->col_ns || !run->col_order || !run->names || !run->val_assigned)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory for blocks");
    for (uint32_t c = 0; c < run->n_cols; c++)
        run->col_order[c] = c;
    for (uint32_t i = 0, fi = 0; i < schema->n_features; i++) {
        pr_feature_kind k = schema->features[i].kind;
        if (k == PR_FEAT_SPARSE || k == PR_FEAT_LIST)
            run->names[fi++] = schema->features[i].name;
        run->n_feat = (uint16_t)fi;
        run->n_labels += k == PR_FEAT_LABEL;
        run->n_dense += (uint16_t)pr_feature_dense_cols(&schema->features[i]);
    }
    run->res->sparse_width = pr_engine_sparse_width(run->eng);
    return 0;
}

int pr_offline_run_schema(const pr_feature_schema *schema, const pr_pipeline_spec *base,
                          const pr_engine_opts *eopts, const pr_offline_opts *opts,
                          pr_offline_result *res, char *errstr, size_t errstr_size)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(res, 0, sizeof(*res));
    pr_pipeline_spec spec;
    int rc = pr_feature_engine_spec(schema, base, &spec, errstr, errstr_size);
    if (rc)
        return rc;
    bool two_pass = pr__spec_two_pass(&spec);
    if (two_pass && strcmp(opts->input, "-") == 0)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "offline: count_mode two_pass reads the input twice; give a file, "
                         "not stdin, for a declared schema");
    pr__srun run = {.schema = schema, .opts = opts, .res = res};
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.cv, NULL);
    rc = pr__srun_setup(&run, &spec, eopts, errstr, errstr_size);
    if (!rc && two_pass) {
        run.counting = true;
        rc = pr__srun_pass(&run, errstr, errstr_size);
        run.counting = false;
        if (!rc)
            rc = pr_engine_count_done(run.eng);
    }
    if (!rc)
        rc = pr__srun_open(&run, &spec, errstr, errstr_size);
    if (!rc)
        rc = pr__srun_pass(&run, errstr, errstr_size);
    if (run.eng)
        rc = pr__srun_close(&run, rc, errstr, errstr_size);
    if (run.eng && !rc) {
        pr_engine_stats est;
        pr_engine_get_stats(run.eng, &est);
        res->unseen = run.opts->frozen ? est.undecided_oov : 0;
        res->n_vocab = pr_engine_spec(run.eng)->n_sparse;
        for (uint32_t c = 0; c < res->n_vocab; c++) {
            res->vocab_sizes[c] = pr_engine_vocab_size(run.eng, c);
            memcpy(res->vocab_names[c], pr_engine_spec(run.eng)->sparse[c].name, PR_NAME_MAX);
        }
    }
    pr_engine_free(run.eng);
    pr__srun_workers_free(&run);
    pthread_cond_destroy(&run.cv);
    pthread_mutex_destroy(&run.mu);
    free(run.names);
    res->decode_s = run.decode_ns / 1e9;
    res->engine_s = run.engine_ns / 1e9;
    res->write_s = run.write_ns / 1e9;
    res->idle_s = run.idle_ns / 1e9;
    res->vocab_s = run.vocab_ns / 1e9;
    res->vocab_thread_s = run.vocab_cpu_ns / 1e9;
    res->vocab_longest_s = run.vocab_longest_ns / 1e9;
    res->close_s = run.close_ns / 1e9;
    res->serial_engine_s = run.serial_eng_ns / 1e9;
    res->serial_write_s = run.serial_wr_ns / 1e9;
    res->chain_s = run.chain_ns / 1e9;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return rc;
}
