/*
 * decode_fmt.c — the per-format decode table (contract: decode_par.h,
 * pr__dfmt; issue 21). The decode pool and the polling threads' runs decode
 * off the pipeline thread through this one table, so a format decodes there
 * exactly when it has an entry here and its configuration allows it.
 *
 * Why a table: each format differs in three things only (the per-thread
 * decoder state, the scratch block's layout, the call that decodes one
 * message); the pool and the runs need nothing else. Per-thread state:
 * JSON, Avro and the user's Protobuf decode through a pr_json_decoder of
 * their own (Avro: with its own reader and writer-schema cache; Protobuf:
 * its own descriptor and reader, loaded from the same files), so no thread
 * shares a decoder. Criteo TSV and the Event / EventBatch formats keep no
 * state (their arena is unused). Avro with a schema registry has an entry
 * of its own: its decoders have no registry client, only the writer schemas
 * that the pipeline thread's reader fetched and published (avro_reader.c),
 * so a message with a schema id not fetched yet does not decode there and
 * goes to the pipeline thread, which fetches it (the registry's counters,
 * the wait on a registry that is down, the rejects stay where they were).
 */
#include <stdlib.h>

#include "decode_par.h"

/* ---------------------------------------------------------------- state */

/* json, avro, protobuf: a decoder for the declared schema with the
 * format's reader (pr_json_decoder_for_source; nothing for json). */
static void *pr__dec_json_new(const pr__dsrc *src, char *errstr, size_t errstr_size)
{
    pr_json_decoder *d = pr_json_decoder_new(src->schema, errstr, errstr_size);
    if (d && src->fmt != PR_MSG_JSON &&
        pr_json_decoder_for_source(d, src->source, errstr, errstr_size)) {
        pr_json_decoder_free(d);
        return NULL;
    }
    return d;
}

/* avro with a schema registry: the reader of the published writer schemas. */
static void *pr__dec_avro_reg_new(const pr__dsrc *src, char *errstr, size_t errstr_size)
{
    pr_json_decoder *d = pr_json_decoder_new(src->schema, errstr, errstr_size);
    if (d && pr__avro_reader_offload(d, src->source, errstr, errstr_size)) {
        pr_json_decoder_free(d);
        return NULL;
    }
    return d;
}

static void pr__dec_json_free(void *dec)
{
    pr_json_decoder_free(dec);
}

/* ---------------------------------------------------------------- scratch */

static pr_block *pr__scratch_rows(const pr__dsrc *src, uint32_t cap)
{
    return pr_block_new(src->spec->n_dense, src->spec->n_sparse, cap, true);
}

static pr_block *pr__scratch_jagged(const pr__dsrc *src, uint32_t cap)
{
    return pr_feature_block_new(src->schema, cap, true);
}

/* ---------------------------------------------------------------- decode */

static int pr__dec_criteo(void *dec, pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len)
{
    (void)dec;
    uint32_t next = 0;
    return pr_decode_criteo_message(ctx, b, buf, len, &next);
}

static int pr__dec_event(void *dec, pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len)
{
    (void)dec;
    uint32_t next = 0;
    return pr_decode_protobuf_event(ctx, b, buf, len, &next, NULL);
}

static int pr__dec_batch(void *dec, pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len)
{
    (void)dec;
    uint32_t next = 0;
    return pr_decode_protobuf_event_batch(ctx, b, buf, len, &next, NULL);
}

static int pr__dec_record(void *dec, pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len)
{
    uint32_t next = 0;
    ctx->json = dec;
    return pr_decode_json_message(ctx, b, buf, len, &next);
}

/* ---------------------------------------------------------------- table */

/* A slot / run of a few hundred Criteo lines or Events, fewer records of
 * the slower record formats: ~60-100 us of decoding each. */
static const pr__dfmt pr__dfmts[PR_MSG__COUNT] = {
    [PR_MSG_CRITEO_TSV] = {.slot_recs = 256,
                           .scratch_new = pr__scratch_rows,
                           .decode = pr__dec_criteo},
    [PR_MSG_PROTOBUF_EVENT] = {.slot_recs = 256,
                               .scratch_new = pr__scratch_rows,
                               .decode = pr__dec_event},
    [PR_MSG_PROTOBUF_EVENT_BATCH] = {.slot_recs = 256,
                                     .scratch_new = pr__scratch_rows,
                                     .decode = pr__dec_batch},
    [PR_MSG_JSON] = {.slot_recs = 64,
                     .needs_schema = true,
                     .dec_new = pr__dec_json_new,
                     .dec_free = pr__dec_json_free,
                     .scratch_new = pr__scratch_jagged,
                     .decode = pr__dec_record},
    [PR_MSG_AVRO] = {.slot_recs = 64,
                     .needs_schema = true,
                     .needs_source = true,
                     .dec_new = pr__dec_json_new,
                     .dec_free = pr__dec_json_free,
                     .scratch_new = pr__scratch_jagged,
                     .decode = pr__dec_record},
    [PR_MSG_PROTOBUF] = {.slot_recs = 64,
                         .needs_schema = true,
                         .needs_source = true,
                         .dec_new = pr__dec_json_new,
                         .dec_free = pr__dec_json_free,
                         .scratch_new = pr__scratch_jagged,
                         .decode = pr__dec_record},
};

/* Avro with a schema registry (pr__dfmt_of picks it). */
static const pr__dfmt pr__dfmt_avro_reg = {.slot_recs = 64,
                                           .needs_schema = true,
                                           .needs_source = true,
                                           .dec_new = pr__dec_avro_reg_new,
                                           .dec_free = pr__dec_json_free,
                                           .scratch_new = pr__scratch_jagged,
                                           .decode = pr__dec_record};

const pr__dfmt *pr__dfmt_of(const pr__dsrc *src)
{
    if (!src || !src->spec || (unsigned)src->fmt >= PR_MSG__COUNT)
        return NULL;
    const pr__dfmt *ft = &pr__dfmts[src->fmt];
    if (!ft->decode || (ft->needs_schema && !src->schema) ||
        (ft->needs_source && (!src->source || src->source->format != src->fmt)))
        return NULL;
    /* Writer schemas by id: fetched on the pipeline thread, published. */
    if (src->fmt == PR_MSG_AVRO && src->source->schema_registry.enabled)
        return &pr__dfmt_avro_reg;
    return ft;
}

void *pr__dfmt_dec_new(const pr__dfmt *ft, const pr__dsrc *src, char *errstr, size_t errstr_size)
{
    static char stateless; /* a non-NULL "decoder" for the formats without state */
    return ft->dec_new ? ft->dec_new(src, errstr, errstr_size) : &stateless;
}

void pr__dfmt_dec_free(const pr__dfmt *ft, void *dec)
{
    if (ft && ft->dec_free && dec)
        ft->dec_free(dec);
}
