/*
 * test_record_writer.c — the shared record-writer contract of issue 23
 * (pr_json_row_* in json_extract.c, pr_json_decoder_set_reader in
 * json_decode.c): a row written value by value through the row writer
 * decodes to the same block row as the same event in JSON text.
 *
 * The "other format" here is a replay reader: it extracts the JSON event
 * with its own extractor over the decoder's paths (pr_json_decoder_paths) and
 * writes every value back through pr_json_row_put / _put_str / _null, as an
 * Avro or Protobuf reader would from its own bytes. The generated
 * clickstream through examples/clickstream.yaml must give byte-identical
 * blocks both ways. Also: the writer's own rules (type, scalar vs list,
 * max_list, abort leaves nothing, null), a reader's reject reason and
 * PR_EAGAIN passing through pr_decode_message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_config.h"
#include "pr_gen.h"
#include "pr_ingest.h"

/* ---------------------------------------------------------------- replay reader */

typedef struct replay {
    pr_json_extractor *x;
    pr_json_block *src;
    int force; /* > 0: return this reason; < 0: this error */
} replay;

static int replay_read(void *rd, pr_json_block *jb, const void *buf, size_t len,
                       pr_json_reject *rej)
{
    replay *r = rd;
    if (r->force) {
        snprintf(rej->detail, sizeof(rej->detail), "forced");
        return r->force;
    }
    pr_json_block_reset(r->src);
    int rc = pr_json_extract(r->x, r->src, buf, len, rej);
    if (rc > 0)
        return pr_decode_reason_of_json(rc);
    if (rc < 0)
        return rc;
    if (pr_json_row_begin(jb))
        return PR_EFULL;
    for (uint32_t c = 0; c < r->src->n_cols; c++) {
        const pr_json_col *col = &r->src->cols[c];
        if (col->present[0] == PR_JSON_NULL) {
            rc = pr_json_row_null(jb, c);
        } else {
            for (uint32_t k = 0; !rc && k < col->count[0]; k++) {
                const pr_json_any *a = &col->any[k];
                rc = a->type == PR_JSON_STRING
                         ? pr_json_row_put_str(jb, c, r->src->arena + a->s.off, a->s.len)
                         : pr_json_row_put(jb, c, a);
            }
        }
        if (rc) {
            pr_json_row_abort(jb);
            return rc > 0 ? pr_decode_reason_of_json(rc) : rc;
        }
    }
    pr_json_row_end(jb);
    return 0;
}

static void replay_init(replay *r, const pr_json_decoder *d)
{
    const pr_json_path *paths;
    size_t n = pr_json_decoder_paths(d, &paths);
    char err[256];
    memset(r, 0, sizeof(*r));
    r->x = pr_json_extractor_new(paths, n, 0, err, sizeof(err));
    if (!r->x)
        fail_msg("%s", err);
    r->src = pr_json_block_new(r->x, 1);
    assert_non_null(r->src);
}

static void replay_free(replay *r)
{
    pr_json_block_free(r->src);
    pr_json_extractor_free(r->x);
}

/* ---------------------------------------------------------------- helpers */

typedef struct rej_log {
    int n, last;
} rej_log;

static void on_rej(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                   int64_t recno)
{
    (void)detail;
    (void)rec;
    (void)len;
    (void)recno;
    rej_log *l = opaque;
    l->n++;
    l->last = reason;
}

static void blocks_equal(pr_block *a, pr_block *b)
{
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->n_sparse, b->n_sparse);
    pr_fside *sa = a->side, *sb = b->side;
    uint32_t rows = a->rows;
    assert_memory_equal(sa->labels, sb->labels, (size_t)rows * sa->n_labels * sizeof(float));
    assert_memory_equal(sa->dense, sb->dense, (size_t)rows * sa->n_dense * sizeof(float));
    for (uint16_t f = 0; f < sa->n_feat; f++) {
        assert_memory_equal(pr_fside_lengths(sa, f), pr_fside_lengths(sb, f),
                            rows * sizeof(int32_t));
        assert_int_equal(sa->n_values[f], sb->n_values[f]);
        if (sa->n_values[f])
            assert_memory_equal(sa->values[f], sb->values[f], sa->n_values[f] * sizeof(int64_t));
    }
    size_t words = pr_bitmap_words(a->scap);
    for (uint32_t c = 0; c < a->n_sparse; c++) {
        assert_int_equal(a->col_rows[c], b->col_rows[c]);
        assert_memory_equal(a->sparse_u64 + (size_t)c * a->scap,
                            b->sparse_u64 + (size_t)c * b->scap, a->col_rows[c] * sizeof(uint64_t));
        for (uint32_t e = 0; e < a->col_rows[c]; e++)
            assert_int_equal(pr_bit_test(a->sparse_missing + c * words, e),
                             pr_bit_test(b->sparse_missing + c * words, e));
    }
    assert_memory_equal(a->event_time_ms, b->event_time_ms, rows * sizeof(int64_t));
    assert_memory_equal(a->offset, b->offset, rows * sizeof(int64_t));
    assert_memory_equal(a->partition, b->partition, rows * sizeof(int32_t));
}

/* ---------------------------------------------------------------- tests */

/* The generated clickstream, once as JSON text and once replayed through the
 * row writer: the same blocks, no reject either way. */
static void test_same_rows_as_json(void **state)
{
    (void)state;
    char err[512];
    pr_config *cfg = NULL;
    if (pr_config_load_file(PR_SOURCE_DIR "/examples/clickstream.yaml", &cfg, err, sizeof(err)))
        fail_msg("%s", err);
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    pr_json_decoder *dj = pr_json_decoder_new(fs, err, sizeof(err));
    pr_json_decoder *dr = pr_json_decoder_new(fs, err, sizeof(err));
    assert_non_null(dj);
    assert_non_null(dr);
    replay r;
    replay_init(&r, dr);
    pr_json_decoder_set_reader(dr, replay_read, &r);
    rej_log rl = {0};
    pr_decode_ctx cj = {.json = dj, .on_reject = on_rej, .opaque = &rl, .partition = 2};
    pr_decode_ctx cr = cj;
    cr.json = dr;
    pr_block *bj = pr_feature_block_new(fs, 256, true);
    pr_block *br = pr_feature_block_new(fs, 256, true);
    enum { N = 3000 };
    char ev[PR_GEN_JSON_LINE_MAX];
    uint32_t nj = 0, nr = 0;
    for (uint64_t row = 0; row < N; row++) {
        size_t len = pr_gen_json_event(11, row, ev, sizeof(ev));
        assert_true(len > 0);
        cj.offset = cr.offset = (int64_t)row;
        uint32_t next = 0;
        int a = pr_decode_message(PR_MSG_JSON, &cj, bj, ev, len, &next, NULL);
        int b = pr_decode_message(PR_MSG_AVRO, &cr, br, ev, len, &next, NULL);
        assert_int_equal(a, b);
        if (a == PR_EFULL) {
            blocks_equal(bj, br);
            nj += bj->rows;
            nr += br->rows;
            pr_block_reset(bj);
            pr_block_reset(br);
            row--; /* again, in the fresh blocks */
            continue;
        }
        assert_int_equal(a, 1);
    }
    blocks_equal(bj, br);
    nj += bj->rows;
    nr += br->rows;
    assert_int_equal(nj, N);
    assert_int_equal(nr, N);
    assert_int_equal(rl.n, 0);
    pr_block_free(bj);
    pr_block_free(br);
    replay_free(&r);
    pr_json_decoder_free(dj);
    pr_json_decoder_free(dr);
    pr_config_free(cfg);
}

/* The writer's rules on typed and ANY columns. */
static void test_writer_rules(void **state)
{
    (void)state;
    const pr_json_path paths[] = {
        {.path = "a", .type = PR_JSON_ANY, .shape = PR_JSON_SCALAR},
        {.path = "l", .type = PR_JSON_ANY, .shape = PR_JSON_LIST, .max_list = 2},
        {.path = "k", .type = PR_JSON_KEY, .shape = PR_JSON_SCALAR},
        {.path = "d", .type = PR_JSON_DOUBLE, .shape = PR_JSON_SCALAR},
    };
    char err[256];
    pr_json_extractor *x = pr_json_extractor_new(paths, 4, 0, err, sizeof(err));
    assert_non_null(x);
    pr_json_block *b = pr_json_block_new(x, 2);
    pr_json_any i7 = {.type = PR_JSON_INT64, .i = -7}, t = {.type = PR_JSON_BOOL, .i = 1};

    /* a row, aborted: nothing kept */
    assert_int_equal(pr_json_row_begin(b), 0);
    assert_int_equal(pr_json_row_put_str(b, 0, "xyz", 3), 0);
    assert_int_equal(pr_json_row_put(b, 1, &i7), 0);
    pr_json_row_abort(b);
    assert_int_equal(b->rows, 0);
    assert_int_equal(b->arena_len, 0);
    assert_int_equal(b->cols[0].n_values, 0);
    assert_int_equal(b->cols[1].n_values, 0);

    /* the rules */
    assert_int_equal(pr_json_row_begin(b), 0);
    assert_int_equal(pr_json_row_put(b, 0, &t), 0);
    assert_int_equal(pr_json_row_put(b, 0, &t), PR_JSON_WRONG_TYPE); /* a list on a scalar */
    assert_int_equal(pr_json_row_put(b, 1, &i7), 0);
    assert_int_equal(pr_json_row_put_str(b, 1, "q", 1), 0);
    assert_int_equal(pr_json_row_put(b, 1, &i7), PR_JSON_LIST_TOO_LONG);
    assert_int_equal(pr_json_row_put(b, 2, &i7), 0); /* a key: "-7" */
    assert_int_equal(pr_json_row_put_str(b, 3, "1", 1), PR_JSON_WRONG_TYPE);
    assert_int_equal(pr_json_row_put(b, 3, &t), PR_JSON_WRONG_TYPE);
    assert_int_equal(pr_json_row_null(b, 3), 0);
    assert_int_equal(pr_json_row_put(b, 9, &t), PR_EINVAL);
    pr_json_row_end(b);
    assert_int_equal(b->rows, 1);
    assert_int_equal(b->cols[0].present[0], PR_JSON_PRESENT);
    assert_int_equal(b->cols[0].any[0].type, PR_JSON_BOOL);
    assert_int_equal(b->cols[1].count[0], 2);
    assert_int_equal(b->cols[1].any[1].type, PR_JSON_STRING);
    assert_memory_equal(b->arena + b->cols[1].any[1].s.off, "q", 1);
    assert_int_equal(b->cols[2].str[0].len, 2);
    assert_memory_equal(b->arena + b->cols[2].str[0].off, "-7", 2);
    assert_int_equal(b->cols[3].present[0], PR_JSON_NULL);

    /* the next row: what was not written is absent; the block fills */
    assert_int_equal(pr_json_row_begin(b), 0);
    assert_int_equal(pr_json_row_put(b, 3, &i7), 0);
    pr_json_row_end(b);
    assert_int_equal(b->cols[0].present[1], PR_JSON_ABSENT);
    assert_true(b->cols[3].f64[0] == -7.0);
    assert_int_equal(pr_json_row_begin(b), PR_EFULL);
    pr_json_block_free(b);
    pr_json_extractor_free(x);
}

/* A reader's reason rejects the record (by that pr_decode_reason); its
 * PR_EAGAIN comes back from pr_decode_message with nothing consumed. */
static void test_reader_reasons(void **state)
{
    (void)state;
    char err[512];
    pr_config *cfg = NULL;
    if (pr_config_load_file(PR_SOURCE_DIR "/examples/clickstream.yaml", &cfg, err, sizeof(err)))
        fail_msg("%s", err);
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    pr_json_decoder *d = pr_json_decoder_new(fs, err, sizeof(err));
    replay r;
    replay_init(&r, d);
    pr_json_decoder_set_reader(d, replay_read, &r);
    rej_log rl = {0};
    pr_decode_ctx ctx = {.json = d, .on_reject = on_rej, .opaque = &rl};
    pr_block *b = pr_feature_block_new(fs, 64, true);
    char ev[PR_GEN_JSON_LINE_MAX];
    size_t len = pr_gen_json_event(3, 0, ev, sizeof(ev));
    uint32_t next = 0;
    r.force = PR_DEC_UNKNOWN_SCHEMA_ID;
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &ctx, b, ev, len, &next, NULL), 0);
    assert_int_equal(rl.n, 1);
    assert_int_equal(rl.last, PR_DEC_UNKNOWN_SCHEMA_ID);
    assert_string_equal(pr_decode_reason_name(PR_DEC_UNKNOWN_SCHEMA_ID), "unknown_schema_id");
    r.force = PR_EAGAIN;
    assert_int_equal(pr_decode_message(PR_MSG_PROTOBUF, &ctx, b, ev, len, &next, NULL), PR_EAGAIN);
    assert_int_equal(rl.n, 1);
    assert_int_equal(b->rows, 0);
    r.force = 0;
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &ctx, b, ev, len, &next, NULL), 1);
    /* no reader again: JSON text */
    pr_json_decoder_set_reader(d, NULL, NULL);
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &ctx, b, ev, len, &next, NULL), 1);
    assert_int_equal(b->rows, 2);
    assert_string_equal(pr_msg_format_name(PR_MSG_AVRO), "avro");
    assert_int_equal(pr_msg_format_from_name("protobuf"), PR_MSG_PROTOBUF);
    pr_block_free(b);
    replay_free(&r);
    pr_json_decoder_free(d);
    pr_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_rows_as_json),
        cmocka_unit_test(test_writer_rules),
        cmocka_unit_test(test_reader_reasons),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
