/*
 * cmd_infer.c — `piperec infer --input EVENTS.jsonl [--output FILE] ...`.
 *
 * Reads sample events (JSON lines, one object each, as `piperec process` and
 * a `source.format: json` topic take them; or, with --avro-schema, the
 * varint-delimited Avro records `piperec process` reads for `source.format:
 * avro`, each as the Avro reader sees it: config/config_infer_avro.c, and the
 * config is then format avro with that schema file; or, with
 * --descriptor-set and --message, the varint-delimited Protobuf messages it
 * reads for `source.format: protobuf`, each as the Protobuf reader sees it:
 * config/config_infer_pb.c, and the config is then format protobuf with that
 * descriptor set and message), and writes the
 * declared-schema config they suggest (config/config_infer.c): a team's
 * first config from its own events, every choice commented, instead of forty
 * lines written by hand. Without --input, --bootstrap and --topic read the
 * same messages straight from the topic (cli/infer_kafka.c: from the
 * beginning, no consumer group, nothing committed). The text is loaded back
 * through the config loader before it is written, so what this prints always
 * loads; a summary goes to stderr.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_cli.h"
#include "pr_config.h"

#define PR__INFER_ROWS_DEFAULT    100000
#define PR__INFER_TIMEOUT_DEFAULT 30 /* seconds, reading a topic */

static void pr__infer_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec infer (--input EVENTS.jsonl|- | --bootstrap HOST:PORT --topic T\n"
            "                      [--timeout S]) [--output FILE] [--rows N]\n"
            "                     [--avro-schema FILE.avsc | --descriptor-set FILE\n"
            "                      --message PKG.NAME] [--name NAME] [--topic T]\n"
            "                     [--bootstrap HOST:PORT] [--labels PATH[=V1|V2...],...]\n"
            "                     [--time PATH|none] [--ignore PATH,...]\n"
            "                     [--kafka-properties FILE]\n"
            "  --input FILE|- or --bootstrap ADDR --topic T (read the topic from its\n"
            "  beginning, no group, nothing committed; one message an event, JSON bare\n"
            "  or registry-framed; tombstones skipped; until N events, every partition\n"
            "  at its end, or --timeout S, default %d, passed). The config names the\n"
            "  topic and bootstrap given (with --input they only fill it in).\n"
            "  --kafka-properties FILE: KEY=VALUE lines (security.protocol, sasl.*,\n"
            "  ssl.*; ${env:NAME} and ${file:PATH} values resolved) for reading the\n"
            "  topic, copied into the config; a password, secret or token's raw\n"
            "  value is written as ${env:PIPEREC_KAFKA_<KEY>}, never copied.\n"
            "  Read sample events (one JSON object per line; the first N, default %d)\n"
            "  and write the config their fields suggest: the event time, the labels,\n"
            "  dense features with a transform fitted to the sample, ids and lists with\n"
            "  a vocabulary, each with a comment on what was seen; fields left out are\n"
            "  listed with the reason. Review it, then `piperec process --config FILE`\n"
            "  or `piperec run --config FILE`. --labels names the labels (else fields\n"
            "  such as label.*, click, purchase holding 0/1 are): PATH a number or\n"
            "  true/false; PATH=V1|V2 a label by value, 1 when the field (a list: one\n"
            "  of its elements) is V1 or V2, else 0 (in: [V1, V2]; event types:\n"
            "  --labels type=click,type=purchase|cart; the field is then no input);\n"
            "  --time the event time (else the first time-named field holding times),\n"
            "  --ignore fields to leave out (with everything under them).\n"
            "  --avro-schema: the input is Avro\n"
            "  records under this writer schema, each varint-length-prefixed, plain or\n"
            "  behind a schema-registry header (its id not looked up); a record that\n"
            "  does not decode is skipped, and the config reads format avro with this\n"
            "  schema_file (framing: registry when most records had the header).\n"
            "  --descriptor-set with --message: the input is\n"
            "  Protobuf messages PKG.NAME of this FileDescriptorSet (protoc\n"
            "  --descriptor_set_out=FILE --include_imports), each varint-length-prefixed\n"
            "  (`piperec gen --format protobuf`); a message that does not decode is\n"
            "  skipped, and the config reads format protobuf with this descriptor set.\n"
            "  From a topic, the same formats, one message each (no length prefix).\n",
            PR__INFER_TIMEOUT_DEFAULT, PR__INFER_ROWS_DEFAULT);
}

/* A line of only blanks (JSON whitespace). */
static bool pr__blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

/* The JSON lines of f into inf, at most rows; the exit code. */
static int pr__infer_read(FILE *f, const char *input, uint64_t rows, pr_infer *inf)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    uint64_t lineno = 0;
    int code = 0;
    while (pr_infer_events(inf) < rows && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (pr__blank(line, (size_t)n))
            continue;
        int rc = pr_infer_add_json(inf, line, (size_t)n);
        if (rc == PR_EBADREC && pr_infer_rejected(inf) <= 3)
            fprintf(stderr, "piperec infer: %s:%" PRIu64 ": %s; skipped\n", input, lineno,
                    pr_infer_last_error(inf));
        else if (rc && rc != PR_EBADREC) {
            fprintf(stderr, "piperec infer: %s\n", pr_strerror(rc));
            code = 1;
            break;
        }
    }
    if (!code && ferror(f)) {
        fprintf(stderr, "piperec infer: cannot read --input %s: %m\n", input);
        code = errno == EISDIR ? 2 : 1;
    }
    free(line);
    return code;
}

/* The config from what inf learnt, loaded back (what is printed must
 * load: a failure is a bug of the rules), written to output (NULL:
 * stdout), and the summary on stderr; the exit code. */
static int pr__infer_emit(const pr_infer *inf, const pr_infer_opts *o, const char *output)
{
    int code = 0;
    char err[512];
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    pr_infer_summary sum;
    if (!code) {
        int rc = pr_infer_write(inf, o, &mb, &sum, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "piperec infer: %s\n", rc == PR_EINVAL ? err : pr_strerror(rc));
            code = rc == PR_EINVAL ? 2 : 1;
        }
    }
    if (!code) {
        /* what is printed must load: a failure here is a bug of the rules */
        pr_config *cfg = NULL;
        char lerr[2048];
        if (pr_config_load_string(mb.buf, mb.len, "<inferred>", &cfg, lerr, sizeof(lerr))) {
            fprintf(stderr,
                    "piperec infer: the inferred config does not load (a bug; please report "
                    "it with the events):\n%s\n%s",
                    lerr, mb.buf);
            code = 1;
        }
        pr_config_free(cfg);
    }
    if (!code) {
        FILE *of = output ? fopen(output, "w") : stdout;
        if (!of || fwrite(mb.buf, 1, mb.len, of) != mb.len || (output && fclose(of))) {
            fprintf(stderr, "piperec infer: cannot write %s: %m\n", output ? output : "stdout");
            code = 1;
        } else {
            if (!output)
                fflush(stdout);
            fprintf(stderr,
                    "piperec infer: %" PRIu64 " events (%" PRIu64 " skipped): %s%zu labels, %zu "
                    "dense, %zu sparse (%zu lists), %zu fields not used%s%s\n",
                    pr_infer_events(inf), pr_infer_rejected(inf),
                    sum.event_time ? "event time, " : "no event time, ", sum.labels, sum.dense,
                    sum.sparse, sum.lists, sum.skipped, output ? " -> " : "", output ? output : "");
            if (sum.label_values_unseen[0])
                fprintf(stderr,
                        "piperec infer: warning: --labels values no event of the sample holds "
                        "(their labels are 0 there): %s\n",
                        sum.label_values_unseen);
        }
    }
    pr_mbuf_fini(&mb);
    return code;
}

#define PR__INFER_MAX_PROPS 64

/* --kafka-properties FILE: KEY=VALUE lines (blank ones and # comments
 * skipped; spaces around KEY and VALUE trimmed) into kv[], their text in
 * *text (the caller frees it); bootstrap.servers also into *bootstrap
 * unless --bootstrap gave one. The exit code (2 with a message naming the
 * file and line). */
static int pr__infer_props(const char *file, pr_kv *kv, size_t *n, char **text,
                           const char **bootstrap)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "piperec infer: cannot open --kafka-properties %s: %m\n", file);
        return 2;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    int c;
    while ((c = getc(f)) != EOF) {
        if (len + 2 > cap) {
            char *nb = realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!nb) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = nb;
        }
        buf[len++] = (char)c;
    }
    fclose(f);
    if (!buf && !(buf = calloc(1, 1)))
        return 1;
    buf[len] = 0;
    *text = buf;
    *n = 0;
    int lineno = 0;
    for (char *line = buf, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        lineno++;
        while (*line == ' ' || *line == '\t')
            line++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == ' ' || line[l - 1] == '\t' || line[l - 1] == '\r'))
            line[--l] = 0;
        if (!*line || *line == '#')
            continue;
        char *eq = strchr(line, '=');
        if (!eq || eq == line || *n == PR__INFER_MAX_PROPS) {
            fprintf(stderr, "piperec infer: --kafka-properties %s:%d: %s\n", file, lineno,
                    eq && eq != line ? "more than 64 properties" : "want KEY=VALUE");
            return 2;
        }
        char *k_end = eq;
        while (k_end > line && (k_end[-1] == ' ' || k_end[-1] == '\t'))
            k_end--;
        *k_end = 0;
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        kv[*n].key = line;
        kv[(*n)++].value = v;
        if (!strcmp(line, "bootstrap.servers") && !*bootstrap)
            *bootstrap = v;
    }
    return 0;
}

static int pr__infer_main(const char *input, const char *output, const char *rows_s,
                          const char *avsc, const char *desc, const char *msg,
                          const char *timeout_s, pr_infer_opts *opts);

int pr_cli_cmd_infer(int argc, char **argv)
{
    const char *input = NULL, *output = NULL, *rows_s = NULL, *avsc = NULL, *desc = NULL,
               *msg = NULL, *timeout_s = NULL, *props_file = NULL;
    pr_infer_opts o = {0};
    const pr_cli_opt opts[] = {
        {"--input", &input, NULL},         {"--output", &output, NULL},
        {"--rows", &rows_s, NULL},         {"--name", &o.name, NULL},
        {"--topic", &o.topic, NULL},       {"--bootstrap", &o.bootstrap, NULL},
        {"--labels", &o.labels, NULL},     {"--time", &o.time_path, NULL},
        {"--ignore", &o.ignore, NULL},     {"--avro-schema", &avsc, NULL},
        {"--descriptor-set", &desc, NULL}, {"--message", &msg, NULL},
        {"--timeout", &timeout_s, NULL},   {"--kafka-properties", &props_file, NULL},
    };
    int pr = pr_cli_parse_opts("infer", argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0]),
                               pr__infer_usage);
    if (pr)
        return pr == 1 ? 0 : 2;
    /* Two modes: a file (--topic and --bootstrap only fill the config in),
     * or the topic itself. */
    pr_kv props[PR__INFER_MAX_PROPS];
    char *props_text = NULL;
    if (props_file) {
        int pc = pr__infer_props(props_file, props, &o.n_kafka_props, &props_text, &o.bootstrap);
        if (pc) {
            free(props_text);
            return pc;
        }
        o.kafka_props = props;
    }
    int code = pr__infer_main(input, output, rows_s, avsc, desc, msg, timeout_s, &o);
    free(props_text);
    return code;
}

/* The command after its options: the modes, the reading, the config. */
static int pr__infer_main(const char *input, const char *output, const char *rows_s,
                          const char *avsc, const char *desc, const char *msg,
                          const char *timeout_s, pr_infer_opts *opts)
{
    pr_infer_opts o = *opts;
    bool from_topic = !input;
    if (from_topic && (!o.topic || !o.bootstrap)) {
        fprintf(stderr, "piperec infer: --input is required (FILE or -), or --bootstrap ADDR "
                        "and --topic T to read a topic\n");
        pr__infer_usage(stderr);
        return 2;
    }
    if (timeout_s && !from_topic) {
        fprintf(stderr, "piperec infer: --timeout goes with reading a topic (--bootstrap and "
                        "--topic without --input)\n");
        return 2;
    }
    int timeout = PR__INFER_TIMEOUT_DEFAULT;
    if (timeout_s) {
        char *end;
        long v = strtol(timeout_s, &end, 10);
        if (!*timeout_s || *end || v < 1 || v > 86400) {
            fprintf(stderr, "piperec infer: --timeout: want whole seconds 1..86400, got '%s'\n",
                    timeout_s);
            return 2;
        }
        timeout = (int)v;
    }
    if (!desc != !msg || (desc && avsc)) {
        fprintf(stderr, "piperec infer: %s\n",
                !desc != !msg ? "--descriptor-set and --message go together (the messages' "
                                "FileDescriptorSet and their message, PKG.NAME)"
                              : "--avro-schema and --descriptor-set/--message exclude each "
                                "other (the input is Avro records or Protobuf messages)");
        pr__infer_usage(stderr);
        return 2;
    }
    uint64_t rows = PR__INFER_ROWS_DEFAULT;
    if (rows_s) {
        char *end;
        unsigned long long v = strtoull(rows_s, &end, 10);
        if (!*rows_s || *end || v == 0 || rows_s[0] == '-') {
            fprintf(stderr, "piperec infer: --rows: want a whole number >= 1, got '%s'\n", rows_s);
            return 2;
        }
        rows = v;
    }
    if (o.time_path && !strcmp(o.time_path, "none"))
        o.time_path = "";
    char origin[1024];
    if (from_topic) {
        snprintf(origin, sizeof(origin), "topic %s at %s", o.topic, o.bootstrap);
        input = origin; /* how messages below name where the events came from */
    }
    o.origin = from_topic || strcmp(input, "-") ? input : "stdin";
    o.avro_schema_file = avsc;
    o.pb_descriptor_set = desc;
    o.pb_message = msg;
    bool binary = avsc || desc;

    FILE *f = from_topic ? NULL : strcmp(input, "-") ? fopen(input, binary ? "rb" : "r") : stdin;
    if (!f && !from_topic) {
        fprintf(stderr, "piperec infer: cannot open --input %s: %m\n", input);
        return 2;
    }
    pr_infer *inf = NULL;
    char err[512];
    int code = pr_infer_new(&inf)     ? 1
               : from_topic || binary ? 0
                                      : pr__infer_read(f, input, rows, inf);
    if (inf && from_topic) {
        code = pr_cli_infer_kafka(o.bootstrap, o.topic, timeout, rows, inf, &o, err, sizeof(err));
        if (code)
            fprintf(stderr, "piperec infer: %s\n", err);
    } else if (inf && binary) {
        int rc = avsc ? pr_infer_add_avro_records(inf, avsc, f, rows, err, sizeof(err))
                      : pr_infer_add_pb_messages(inf, desc, msg, f, rows, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "piperec infer: %s%s%s\n", rc == PR_EIO ? input : "",
                    rc == PR_EIO ? ": " : "", err);
            code = rc == PR_EINVAL ? 2 : 1;
        }
    }
    if (f && f != stdin)
        fclose(f);
    if (!code && avsc && !pr_infer_events(inf) && pr_infer_rejected(inf))
        fprintf(stderr,
                "piperec infer: no record of %s decodes under %s, plain or behind a "
                "schema-registry header%s: another writer schema?\n",
                input, avsc, from_topic ? "" : " (each varint-length-prefixed)");
    if (!code && desc && !pr_infer_events(inf) && pr_infer_rejected(inf))
        fprintf(stderr,
                "piperec infer: no message of %s decodes as %s of %s; infer reads messages%s, "
                "plain or with registry framing that names this message\n",
                input, msg, desc,
                from_topic ? "" : " each varint-length-prefixed (`piperec gen --format protobuf`)");

    if (!code)
        code = pr__infer_emit(inf, &o, output);
    pr_infer_free(inf);
    return code;
}
