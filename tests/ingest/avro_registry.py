#!/usr/bin/python3
"""avro_registry.py — a tiny Confluent-compatible schema registry for tests
(issue 23): GET /schemas/ids/{id} answers {"schema": "<DIR/{id}.avsc>"} (404
{"error_code": 40403} when the file is absent), GET /subjects lists the ids,
GET /subjects/{s}/versions/latest answers the highest id. Files are read at
each request, so a test adds a schema by writing a file; it takes the registry
"down" by stopping this process and "up" by starting it again on the same
port. With --token T every request must carry "Authorization: Bearer T"
(or, with --basic USER:PASSWORD too, that basic auth instead).

--delay-ms D answers every request D ms late (a slow registry).

usage: avro_registry.py --dir DIR [--port P] [--port-file F] [--token T] [--basic U:P]
                        [--delay-ms D]
"""
import argparse
import http.server
import json
import os
import re
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--token")
    ap.add_argument("--basic")
    ap.add_argument("--delay-ms", type=int, default=0, help="answer this late (a slow registry)")
    args = ap.parse_args()
    import base64
    allowed = set()
    if args.token:
        allowed.add("Bearer " + args.token)
    if args.basic:
        allowed.add("Basic " + base64.b64encode(args.basic.encode()).decode())

    def ids():
        return sorted(int(f[:-5]) for f in os.listdir(args.dir) if re.fullmatch(r"\d+\.avsc", f))

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000.0)
            if allowed and self.headers.get("Authorization") not in allowed:
                return self.answer(401, {"error_code": 40101, "message": "unauthorized"})
            m = re.fullmatch(r"/schemas/ids/(\d+)", self.path)
            if m:
                path = os.path.join(args.dir, m.group(1) + ".avsc")
                if not os.path.exists(path):
                    return self.answer(404, {"error_code": 40403, "message": "Schema not found"})
                with open(path) as f:
                    return self.answer(200, {"schema": f.read()})
            if self.path == "/subjects":
                return self.answer(200, ["clicks-value"])
            if re.fullmatch(r"/subjects/[^/]+/versions/latest", self.path):
                i = ids()
                if not i:
                    return self.answer(404, {"error_code": 40401, "message": "Subject not found"})
                with open(os.path.join(args.dir, "%d.avsc" % i[-1])) as f:
                    return self.answer(200, {"id": i[-1], "version": len(i), "schema": f.read()})
            self.answer(404, {"error_code": 404, "message": "not found"})

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % srv.server_address[1])
        os.rename(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
