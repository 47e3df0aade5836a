/*
 * test_decode_runs.c — a polling thread's decoded runs (ingest/decode_par.c,
 * pr__druns; issue 21), without Kafka: Criteo messages of 1-3 lines, bad
 * lines among them, decoded into a few small runs, handed to the pool as
 * decoded messages and merged into a block, must give exactly the block and
 * the rejects (reason, record number, bytes, in order) that decoding each
 * message serially gives. Also: every run held gives PR_EAGAIN and nothing
 * decoded, a released run is used again (lowest first), a message larger
 * than a run is left to the other way. A larger stream through runs of 256
 * rows and 4 decode threads merges polls of thousands of rows, whose column
 * copies the pool defers and shares with its helpers
 * (pr__dpool_copies_run): the same block again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decode_par.h"
#include "pr_ingest.h"

#define MAX_MSG 1200
#define MAX_REJ 256

typedef struct rej_log {
    int n;
    int reason[MAX_REJ];
    int64_t recno[MAX_REJ];
    size_t len[MAX_REJ];
    char rec[MAX_REJ][256];
} rej_log;

static void rej_put(rej_log *l, int reason, const char *rec, size_t len, int64_t recno)
{
    assert_true(l->n < MAX_REJ);
    l->reason[l->n] = reason;
    l->recno[l->n] = recno;
    l->len[l->n] = len;
    memcpy(l->rec[l->n], rec, len < 256 ? len : 256);
    l->n++;
}

static void on_rej(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                   int64_t recno)
{
    (void)detail;
    rej_put(opaque, reason, rec, len, recno);
}

/* n messages of 1-3 lines of the sample, every 7th with a bad line. */
typedef struct msgs {
    int n;
    rd_kafka_message_t m[MAX_MSG];
    char *buf[MAX_MSG];
    int nrec[MAX_MSG];
} msgs;

static void msgs_make(msgs *ms, int n_msg)
{
    assert_true(n_msg <= MAX_MSG);
    ms->n = n_msg;
    FILE *f = fopen(PR_TEST_DATA "/criteo_sample_100.tsv", "r");
    assert_non_null(f);
    char *lines[100];
    size_t n = 0, cap = 0;
    char *line = NULL;
    while (n < 100 && getline(&line, &cap, f) > 0)
        lines[n++] = strdup(line);
    free(line);
    fclose(f);
    assert_int_equal(n, 100);
    for (int i = 0, l = 0; i < n_msg; i++) {
        int k = 1 + i % 3;
        size_t len = 0;
        ms->buf[i] = malloc(8192);
        for (int j = 0; j < k; j++) {
            const char *s = (i % 7 == 3 && j == k - 1) ? "1\tnot-a-number\n" : lines[l++ % 100];
            memcpy(ms->buf[i] + len, s, strlen(s));
            len += strlen(s);
            if (ms->buf[i][len - 1] != '\n') /* the file's last line */
                ms->buf[i][len++] = '\n';
        }
        ms->m[i] = (rd_kafka_message_t){
            .payload = ms->buf[i], .len = len, .offset = 1000 + i, .partition = i % 4};
        ms->nrec[i] = pr_message_record_count(PR_MSG_CRITEO_TSV, ms->buf[i], len, NULL);
        assert_int_equal(ms->nrec[i], k);
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
}

static void msgs_free(msgs *ms)
{
    for (int i = 0; i < ms->n; i++)
        free(ms->buf[i]);
    free(ms);
}

static int32_t key_of(const rd_kafka_message_t *m)
{
    return PR_PART_KEY(0, m->partition);
}

static void blocks_equal(const pr_block *a, const pr_block *b)
{
    assert_int_equal(a->rows, b->rows);
    uint32_t n = a->rows;
    assert_memory_equal(a->labels, b->labels, n * sizeof(*a->labels));
    for (uint32_t c = 0; c < a->n_dense; c++) {
        assert_memory_equal(a->dense + (size_t)c * a->cap, b->dense + (size_t)c * b->cap,
                            n * sizeof(double));
        for (uint32_t r = 0; r < n; r++)
            assert_int_equal(pr_bit_test(a->dense_missing + c * pr_bitmap_words(a->cap), r),
                             pr_bit_test(b->dense_missing + c * pr_bitmap_words(b->cap), r));
    }
    assert_memory_equal(a->sparse_enc, b->sparse_enc, a->n_sparse);
    for (uint32_t c = 0; c < a->n_sparse; c++) {
        if (a->sparse_enc[c] == PR_SPARSE_HEX)
            assert_memory_equal(pr_block_hex((pr_block *)a, c, 0),
                                pr_block_hex((pr_block *)b, c, 0), (size_t)n * PR_HEX_SLOT);
        else
            assert_memory_equal(a->sparse_u64 + (size_t)c * a->scap,
                                b->sparse_u64 + (size_t)c * b->scap, n * sizeof(uint64_t));
        for (uint32_t r = 0; r < n; r++)
            assert_int_equal(pr_bit_test(a->sparse_missing + c * pr_bitmap_words(a->scap), r),
                             pr_bit_test(b->sparse_missing + c * pr_bitmap_words(b->scap), r));
    }
    assert_memory_equal(a->partition, b->partition, n * sizeof(*a->partition));
    assert_memory_equal(a->offset, b->offset, n * sizeof(*a->offset));
    assert_memory_equal(a->event_time_ms, b->event_time_ms, n * sizeof(*a->event_time_ms));
}

/* Decoded runs (n_runs of run_rows rows), merged through a pool of
 * `threads` decoders into a block of `cap` rows in order, equal the serial
 * decode of n_msg messages. Returns the rows whose column copies the pool
 * deferred to pr__dpool_copies_run. */
static uint64_t runs_equal_serial(int n_msg, unsigned n_runs, uint32_t run_rows, unsigned threads,
                                  uint32_t cap, int *eagain, int *reused_first)
{
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    msgs *ms = calloc(1, sizeof(*ms));
    assert_non_null(ms);
    msgs_make(ms, n_msg);

    pr_block *ref = pr_block_new(spec.n_dense, spec.n_sparse, cap, true);
    static rej_log want, got;
    memset(&want, 0, sizeof(want));
    memset(&got, 0, sizeof(got));
    for (int i = 0; i < n_msg; i++) {
        pr_decode_ctx ctx = {.spec = &spec,
                             .on_reject = on_rej,
                             .opaque = &want,
                             .partition = key_of(&ms->m[i]),
                             .offset = ms->m[i].offset,
                             .default_event_time_ms = 5000 + i,
                             .parse_hex = pr_decode_want_parse_hex(&spec)};
        uint32_t next = 0;
        assert_true(pr_decode_message(PR_MSG_CRITEO_TSV, &ctx, ref, ms->m[i].payload, ms->m[i].len,
                                      &next, NULL) >= 0);
    }
    assert_true(want.n > 0);

    char es[256];
    const pr__dsrc src = {.fmt = PR_MSG_CRITEO_TSV, .spec = &spec};
    pr__druns *d = pr__druns_new(&src, n_runs, run_rows);
    assert_non_null(d);
    pr__dpool *dp = pr__dpool_new(threads, &src, cap, es, sizeof(es));
    assert_non_null(dp);
    pr_block *out = pr_block_new(spec.n_dense, spec.n_sparse, cap, true);
    pr__drun *first = NULL;
    *eagain = *reused_first = 0;
    uint64_t deferred = 0;
    for (int i = 0; i < n_msg;) {
        /* A polling thread's turn: decode until every run is held. */
        pr__dpool_begin(dp);
        int i0 = i;
        for (; i < n_msg; i++) {
            pr__ddec dec;
            int rc = pr__druns_decode(d, &ms->m[i], ms->nrec[i], key_of(&ms->m[i]), 5000 + i, &dec);
            if (rc == PR_EAGAIN) {
                assert_null(dec.run);
                (*eagain)++;
                break;
            }
            assert_int_equal(rc, 1);
            if (!first)
                first = dec.run;
            else if (i > i0 && dec.run == first && i0 > 0)
                (*reused_first)++;
            assert_true(pr__dpool_add_decoded(dp, &ms->m[i], ms->m[i].offset, key_of(&ms->m[i]), 0,
                                              5000 + i, ms->nrec[i], &dec));
        }
        assert_true(i > i0); /* the runs of the last turn were all released */
        pr__druns_seal(d);
        /* The consumer thread's poll: merge in order, replay the rejects,
         * run the deferred copies, release the runs. */
        pr__dpool_finish(dp);
        uint32_t before = out->rows;
        for (size_t k = 0; k < pr__dpool_count(dp); k++) {
            pr__dmsg *dm = pr__dpool_msg(dp, k);
            assert_int_equal(dm->state, PR__DM_DECODED);
            assert_non_null(dm->run);
            assert_int_equal(pr__dpool_merge(dp, out, dm, dm->nrows), 0);
            for (uint32_t r = 0; r < dm->nrej; r++) {
                pr__drej rj;
                pr__dpool_reject(dp, dm, r, &rj);
                rej_put(&got, rj.reason, rj.rec, rj.len, rj.recno);
            }
        }
        deferred += pr__dpool_copies_pending(dp);
        pr__dpool_copies_run(dp);
        assert_int_equal(pr__dpool_copies_pending(dp), 0);
        assert_true(out->rows > before);
        for (size_t k = 0; k < pr__dpool_count(dp); k++)
            pr__ddec_release(&(pr__ddec){.run = pr__dpool_msg(dp, k)->run});
    }
    blocks_equal(ref, out);
    assert_int_equal(got.n, want.n);
    for (int k = 0; k < want.n; k++) {
        assert_int_equal(got.reason[k], want.reason[k]);
        assert_int_equal(got.recno[k], want.recno[k]);
        assert_int_equal(got.len[k], want.len[k]);
        assert_memory_equal(got.rec[k], want.rec[k], want.len[k] < 256 ? want.len[k] : 256);
    }
    pr_block_free(out);
    pr_block_free(ref);
    pr__dpool_free(dp);
    pr__druns_free(d);
    msgs_free(ms);
    return deferred;
}

/* 3 runs of 16 rows: the decode keeps finding every run held, so runs are
 * handed over, released and used again many times. */
static void test_runs_equal_serial(void **state)
{
    (void)state;
    int eagain, reused_first;
    runs_equal_serial(120, 3, 16, 2, 512, &eagain, &reused_first);
    assert_true(eagain > 0);
    assert_true(reused_first > 0); /* lowest free run first */
}

/* ~2,400 rows in runs of 256 with 4 decode threads: polls merge more rows
 * than PR__COPY_MIN_ROWS, so their column copies are deferred and shared. */
static void test_runs_merge_copies_shared(void **state)
{
    (void)state;
    int eagain, reused_first;
    setenv("PIPEREC_MERGE_COPY", "1", 1);
    uint64_t deferred = runs_equal_serial(1200, 6, 256, 4, 4096, &eagain, &reused_first);
    assert_true(deferred >= 1024);
    setenv("PIPEREC_MERGE_COPY", "0", 1); /* the baseline: every copy in the merge */
    assert_int_equal(runs_equal_serial(1200, 6, 256, 4, 4096, &eagain, &reused_first), 0);
    unsetenv("PIPEREC_MERGE_COPY");
}

/* Not for the runs: a message larger than a run, an empty one, another
 * format (no runs at all). */
static void test_runs_refuse(void **state)
{
    (void)state;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    assert_null(pr__druns_new(&(pr__dsrc){.fmt = PR_MSG_JSON, .spec = &spec}, 3, 16));
    pr__druns *d = pr__druns_new(&(pr__dsrc){.fmt = PR_MSG_CRITEO_TSV, .spec = &spec}, 3, 2);
    assert_non_null(d);
    msgs *ms = calloc(1, sizeof(*ms));
    assert_non_null(ms);
    msgs_make(ms, 3);
    pr__ddec dec;
    assert_int_equal(pr__druns_decode(d, &ms->m[2], ms->nrec[2], 0, 1, &dec), 0); /* 3 lines */
    assert_null(dec.run);
    assert_int_equal(pr__druns_decode(d, &ms->m[0], 0, 0, 1, &dec), 0);
    assert_int_equal(pr__druns_decode(d, &ms->m[1], ms->nrec[1], 0, 1, &dec), 1); /* 2 lines */
    assert_non_null(dec.run);
    pr__ddec_release(&dec);
    assert_null(dec.run);
    pr__druns_free(d);
    msgs_free(ms);
}

/* The decode table (decode_fmt.c): which configurations decode off the
 * pipeline thread. Criteo and the Event formats always; the record formats
 * need a declared schema, Avro and Protobuf their source config too, and
 * Avro with a schema registry has an entry of its own (its decoders read
 * the writer schemas the pipeline thread fetched: issue 21). */
static void test_dfmt_table(void **state)
{
    (void)state;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_feature_schema fs;
    memset(&fs, 0, sizeof(fs));
    pr_source_cfg avro, pb;
    memset(&avro, 0, sizeof(avro));
    memset(&pb, 0, sizeof(pb));
    avro.format = PR_MSG_AVRO;
    pb.format = PR_MSG_PROTOBUF;
    static const pr_msg_format always[] = {PR_MSG_CRITEO_TSV, PR_MSG_PROTOBUF_EVENT,
                                           PR_MSG_PROTOBUF_EVENT_BATCH};
    for (size_t i = 0; i < sizeof(always) / sizeof(always[0]); i++) {
        const pr__dfmt *ft = pr__dfmt_of(&(pr__dsrc){.fmt = always[i], .spec = &spec});
        assert_non_null(ft);
        assert_non_null(ft->decode);
        assert_non_null(ft->scratch_new);
        assert_true(ft->slot_recs > 0);
        char e[64];
        void *dec =
            pr__dfmt_dec_new(ft, &(pr__dsrc){.fmt = always[i], .spec = &spec}, e, sizeof(e));
        assert_non_null(dec); /* stateless: not NULL */
        pr__dfmt_dec_free(ft, dec);
    }
    assert_null(pr__dfmt_of(&(pr__dsrc){.fmt = PR_MSG_JSON, .spec = &spec}));
    assert_non_null(pr__dfmt_of(&(pr__dsrc){.fmt = PR_MSG_JSON, .spec = &spec, .schema = &fs}));
    assert_null(pr__dfmt_of(&(pr__dsrc){.fmt = PR_MSG_AVRO, .spec = &spec, .schema = &fs}));
    assert_non_null(pr__dfmt_of(
        &(pr__dsrc){.fmt = PR_MSG_AVRO, .spec = &spec, .schema = &fs, .source = &avro}));
    assert_null(pr__dfmt_of(
        &(pr__dsrc){.fmt = PR_MSG_PROTOBUF, .spec = &spec, .schema = &fs, .source = &avro}));
    assert_non_null(pr__dfmt_of(
        &(pr__dsrc){.fmt = PR_MSG_PROTOBUF, .spec = &spec, .schema = &fs, .source = &pb}));
    const pr__dfmt *plain =
        pr__dfmt_of(&(pr__dsrc){.fmt = PR_MSG_AVRO, .spec = &spec, .schema = &fs, .source = &avro});
    avro.schema_registry.enabled = true;
    const pr__dfmt *reg =
        pr__dfmt_of(&(pr__dsrc){.fmt = PR_MSG_AVRO, .spec = &spec, .schema = &fs, .source = &avro});
    assert_non_null(reg);
    assert_ptr_not_equal(reg, plain);
    assert_ptr_not_equal(reg->dec_new, plain->dec_new);
    assert_null(pr__dfmt_of(&(pr__dsrc){.fmt = PR_MSG__COUNT, .spec = &spec}));
    assert_null(pr__dfmt_of(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_equal_serial),
        cmocka_unit_test(test_runs_merge_copies_shared),
        cmocka_unit_test(test_runs_refuse),
        cmocka_unit_test(test_dfmt_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
