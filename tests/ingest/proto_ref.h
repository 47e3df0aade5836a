/*
 * proto_ref.h — the reference protobuf decoders (test code, proto_ref.c):
 * piperec.v1.Event / EventBatch through protobuf-c's unpack, with the
 * contract of pr_decode_protobuf_event[_batch] (pr_ingest.h), which are
 * tested against them: same rows, same reject decisions. A rejected event of
 * a batch reaches the reject callback as its own bytes from the fast
 * decoder, re-encoded from the reference. `arena` is accepted for the same
 * signature and unused (protobuf-c allocates with malloc).
 */
#ifndef PR_TEST_PROTO_REF_H
#define PR_TEST_PROTO_REF_H

#include "pr_ingest.h"

int pr_decode_protobuf_event_ref(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                                 uint32_t *next_rec, pr_arena *arena);
int pr_decode_protobuf_event_batch_ref(const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                                       size_t len, uint32_t *next_rec, pr_arena *arena);

#endif
