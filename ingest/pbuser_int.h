/*
 * pbuser_int.h — internals shared by the user-Protobuf files of ingest/
 * (pbuser_desc.c: the descriptor set; pbuser_decode.c: the table-driven
 * reader; pbuser_encode.c: JSON -> wire for `piperec produce` and tests).
 *
 * A loaded FileDescriptorSet is flattened into index-addressed tables: every
 * message and enum of every file gets an index, every field resolves its
 * type name to one, so the decoder never looks a name up while reading
 * records. Names point into the unpacked FileDescriptorSet, which the
 * pr_pbuser_desc keeps for its lifetime.
 */
#ifndef PR_PBUSER_INT_H
#define PR_PBUSER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "pr_ingest.h"

/* FieldDescriptorProto.Type values (descriptor.proto's numbering). */
enum {
    PR__PBT_DOUBLE = 1,
    PR__PBT_FLOAT = 2,
    PR__PBT_INT64 = 3,
    PR__PBT_UINT64 = 4,
    PR__PBT_INT32 = 5,
    PR__PBT_FIXED64 = 6,
    PR__PBT_FIXED32 = 7,
    PR__PBT_BOOL = 8,
    PR__PBT_STRING = 9,
    PR__PBT_GROUP = 10,
    PR__PBT_MESSAGE = 11,
    PR__PBT_BYTES = 12,
    PR__PBT_UINT32 = 13,
    PR__PBT_ENUM = 14,
    PR__PBT_SFIXED32 = 15,
    PR__PBT_SFIXED64 = 16,
    PR__PBT_SINT32 = 17,
    PR__PBT_SINT64 = 18,
    PR__PBT__COUNT
};

/* Wire types. */
enum {
    PR__WT_VARINT = 0,
    PR__WT_I64 = 1,
    PR__WT_LEN = 2,
    PR__WT_SGROUP = 3,
    PR__WT_EGROUP = 4,
    PR__WT_I32 = 5
};

#define PR__PB_MAX_FIELD 536870911u /* 2^29 - 1 */
#define PR__PB_MAX_DEPTH 100        /* nesting bound, as protobuf's parsers */

typedef struct pr__pbfield {
    const char *name;
    const char *json_name; /* lowerCamelCase, or the name */
    uint32_t number;
    uint8_t type; /* PR__PBT_* */
    bool repeated;
    bool explicit_presence; /* absent is missing (else: absent is the type's default) */
    int32_t oneof;          /* real oneof index in its message, -1 none */
    int32_t msg;            /* PR__PBT_MESSAGE / GROUP: message index, else -1 */
    int32_t enm;            /* PR__PBT_ENUM: enum index, else -1 */
} pr__pbfield;

typedef struct pr__pbmsg {
    char *full; /* "shop.Click" (no leading dot) */
    uint32_t file;
    bool map_entry;
    uint32_t n_fields;
    pr__pbfield *fields;
    uint32_t n_nested;
    int32_t *nested; /* message indexes of nested_type, in order */
    int32_t parent;  /* enclosing message, -1 for a file's top-level message */
    uint32_t pos;    /* index among the parent's nested types (or the file's messages) */
    uint8_t wkt;     /* pr_pb_wkt: a Timestamp or Duration (its fields checked), read whole */
} pr__pbmsg;

typedef struct pr__pbenum {
    char *full;
    uint32_t n;
    const int32_t *num; /* [n] */
    const char **name;  /* [n] */
    const char *zero;   /* name of the value numbered 0 (proto3 default), or NULL */
} pr__pbenum;

struct pr_pbuser_desc {
    Google__Protobuf__FileDescriptorSet *fds;
    uint32_t n_msgs, n_enums;
    pr__pbmsg *msgs;
    pr__pbenum *enums;
    int32_t root;         /* the configured message */
    uint32_t root_n_path; /* registry message-index path of the root */
    int32_t root_path[PR__PB_MAX_DEPTH];
};

/* Field of message m named `name` (or its json_name), NULL when none. */
const pr__pbfield *pr__pb_field_by_name(const pr_pbuser_desc *d, int32_t m, const char *name,
                                        size_t len);
/* Field of message m numbered `num`, NULL when none. */
const pr__pbfield *pr__pb_field_by_number(const pr_pbuser_desc *d, int32_t m, uint32_t num);
/* "a string", "an int64", "a message shop.User" ... for messages. */
const char *pr__pb_type_name(uint8_t type);
/* True when a repeated field of this type may be packed (scalars, enums). */
static inline bool pr__pb_packable(uint8_t t)
{
    return t != PR__PBT_STRING && t != PR__PBT_BYTES && t != PR__PBT_MESSAGE && t != PR__PBT_GROUP;
}
/* The wire type a non-packed value of type t has. */
int pr__pb_wire_type(uint8_t t);

/* One step of a resolved path: the field, and for a map field the key. */
typedef struct pr__pbstep {
    const pr__pbfield *f;
    const char *key; /* map key segment (points into the path), else NULL */
    uint32_t key_len;
} pr__pbstep;

/* The reader frees d with itself. */
void pr__pb_reader_own(pr_pbuser_reader *r, pr_pbuser_desc *d);

/* Resolve dotted `path` from the root message into steps (at most
 * PR__PB_MAX_DEPTH); a map field takes the next segment as its key and then
 * continues in its value (the entry's field 2). The last step is a value
 * (scalar, enum, string, bytes; repeated or not), or a well-known message
 * read whole (pr__pbmsg.wkt). A path may go through one
 * repeated message (a list of messages: the path maps over its elements);
 * nothing repeated after it (one list level per path).
 * With `map` (a path read by a map's keys, PR_JSON_KEYS / PR_JSON_VALUES)
 * the path ends at a map field itself, its last step without a key: the
 * map's entries are the list, so no repeated message on the way. */
int pr__pb_resolve(const pr_pbuser_desc *d, const char *path, bool map, pr__pbstep *steps,
                   uint32_t *n_steps, char *errstr, size_t errstr_size);

#endif
