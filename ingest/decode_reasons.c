/* decode_reasons.c — names of the decoder reject reasons (metric labels, rejects.tsv). */
#include "pr_ingest.h"

static const char *const pr_decode_reason_names[PR_DEC__COUNT] = {
    [PR_DEC_OK] = "ok",
    [PR_DEC_FIELD_COUNT] = "field_count",
    [PR_DEC_BAD_LABEL] = "bad_label",
    [PR_DEC_BAD_DENSE] = "bad_dense",
    [PR_DEC_BAD_HEX] = "bad_hex",
    [PR_DEC_LONG_HEX] = "long_hex",
    [PR_DEC_BAD_PROTOBUF] = "bad_protobuf",
    [PR_DEC_BAD_SHAPE] = "bad_shape",
    [PR_DEC_EMPTY] = "empty",
};

const char *pr_decode_reason_name(int reason)
{
    if (reason < 0 || reason >= PR_DEC__COUNT)
        return "unknown";
    return pr_decode_reason_names[reason];
}
