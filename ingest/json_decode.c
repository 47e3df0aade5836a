/*
 * json_decode.c — JSON events through a declared feature schema (issue 20):
 * the pr_json_decoder (contract in pr_ingest.h). Not executed yet: this
 * commit wires the format; the decoder body lands once the engine's side
 * tables exist.
 */
#include "pr_ingest.h"

int pr_json_decode_message(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                           uint32_t *next_rec)
{
    (void)ctx;
    (void)b;
    (void)buf;
    (void)len;
    (void)next_rec;
    return PR_ENOTSUP;
}
