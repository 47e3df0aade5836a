#!/bin/sh
# tls_clients.sh — the clients over TLS + token against a real trainer sink
# (bt_serve.c with BT_TLS_* / BT_TOKEN_FILE): the Python client with the
# right CA and token gets all 10 batches (acked exactly once, checked by
# bt_serve); a missing or wrong token is refused with UNAUTHENTICATED; the
# wrong CA and plain text to the TLS port fail cleanly. Then `piperec
# consume` over mutual TLS with --tls-ca/--tls-cert/--tls-key/--token-file,
# and without a client certificate (refused). Certificates: openssl CLI.
set -eu
command -v openssl >/dev/null || { echo "openssl CLI missing (tools/install-deps.sh)"; exit 1; }
D="$PR_TMP/tls"
mkdir -p "$D"
(
    cd "$D"
    exec >/dev/null 2>&1
    for n in ca rogue; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $n.key \
            -out $n.crt -days 2 -subj /CN=$n
    done
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
        -out server.csr -subj /CN=piperec
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
        -days 2 -extfile server.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client.key \
        -out client.csr -subj /CN=trainer-1
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2
)
printf '# trainers\ntok-123\n' > "$D/token"
export BT_TLS_CERT="$D/server.crt" BT_TLS_KEY="$D/server.key" BT_TOKEN_FILE="$D/token"
export PYTHONPATH="$PR_SOURCE_DIR/clients/python" TLS_DIR="$D"

cat > "$PR_TMP/tls_client.py" <<'PY'
import os, ssl, sys
import piperec_client as pc

addr = "127.0.0.1:%s" % os.environ["BT_PORT"]
d = os.environ["TLS_DIR"]
ca = os.path.join(d, "ca.crt")

def refused(code, **kw):
    try:
        pc.TrainerClient(addr, "bt", timeout=5, **kw)
    except pc.ServerError as e:
        assert e.code == code, e
        return
    sys.exit("expected %s" % code)

refused("UNAUTHENTICATED", ca_file=ca)                      # no token
refused("UNAUTHENTICATED", ca_file=ca, token="tok-999")     # wrong token
refused("UNAVAILABLE", token="tok-123")                     # plain text to the TLS port
try:
    pc.TrainerClient(addr, "bt", timeout=5, ca_file=os.path.join(d, "rogue.crt"), token="tok-123")
    sys.exit("a server cert from another CA must fail")
except ssl.SSLCertVerificationError:
    pass
with pc.TrainerClient(addr, "bt", credits=4, ca_file=ca, token_file=os.path.join(d, "token")) as c:
    assert isinstance(c.sock, ssl.SSLSocket) and c.sock.version() in ("TLSv1.2", "TLSv1.3")
    seqs = [b.sequence for b in c.batches(count=10, timeout=5)]
    assert seqs == list(range(1, 11)), seqs
    b = None
print("python client over TLS + token OK")
PY
"$BT_SERVE" trainer 10 /usr/bin/python3 "$PR_TMP/tls_client.py"

# piperec consume over mutual TLS.
export BT_TLS_CA="$D/ca.crt"
"$BT_SERVE" trainer 5 sh -c '"$0" consume --connect 127.0.0.1:$BT_PORT --pipeline bt --count 5 \
    --tls-ca "$1/ca.crt" --tls-cert "$1/client.crt" --tls-key "$1/client.key" \
    --token-file "$1/token" --connect-timeout-ms 0 > "$1/consume.out"' "$PIPEREC" "$D"
grep -q "count reached: 5 batches" "$D/consume.out"
# Without a client certificate: refused, a clear message, exit 1 (and no retry loop).
cat > "$D/nocert.sh" <<'SH'
set +e
"$1" consume --connect 127.0.0.1:$BT_PORT --pipeline bt --count 1 --tls-ca "$2/ca.crt" \
    --token-file "$2/token" > "$2/nocert.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] || { echo "consume without a client cert: exit $rc"; cat "$2/nocert.out"; exit 1; }
grep -qi "certificate" "$2/nocert.out" || { cat "$2/nocert.out"; exit 1; }
! grep -q "retrying" "$2/nocert.out" # a refusal is final, not retried for 30 s
# bt_serve wants its batches acked: a real client with a certificate takes them.
"$1" consume --connect 127.0.0.1:$BT_PORT --pipeline bt --count 1 --quiet --tls-ca "$2/ca.crt" \
    --tls-cert "$2/client.crt" --tls-key "$2/client.key" --token-file "$2/token" >/dev/null
SH
"$BT_SERVE" trainer 1 sh "$D/nocert.sh" "$PIPEREC" "$D"
cat "$D/nocert.out"
echo "tls clients OK"
