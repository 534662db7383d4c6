#!/bin/sh
# Certificates and client settings for deploy/docker-compose.sasl-ssl.yml (and any Strata cluster on SASL_SSL):
#
#   deploy/security/make-certs.sh OUT_DIR
#
# writes into OUT_DIR, only the files that are missing (a second run does nothing):
#   ca.key               the demo CA's private key (0600; only needed to issue more certificates)
#   ca.pem               the CA certificate: the truststore of brokers and clients (ssl.truststore.type=PEM)
#   broker.keystore.pem  the brokers' private key followed by its certificate chain (ssl.keystore.type=PEM,
#                        ssl.keystore.location); the certificate's SANs: $BROKER_HOSTS and 127.0.0.1
#   admin.properties     client settings of $ADMIN_USER (SASL_SSL, PLAIN), when ADMIN_PASSWORD is set
#   client.properties    client settings of $CLIENT_USER (SASL_SSL, SCRAM-SHA-512), when CLIENT_PASSWORD is set
#
# Settings, from the environment (secrets are only ever written to the files above, never printed):
#   SSL_KEY_PASSWORD   encrypt the broker key with it (PKCS#8, AES-256; the brokers' ssl.key.password); unset: plain key
#   ADMIN_USER         default admin;  ADMIN_PASSWORD: its PLAIN password (in the brokers' JAAS config)
#   CLIENT_USER        default alice;  CLIENT_PASSWORD: its SCRAM password (created with `strata configs`)
#   BROKER_HOSTS       DNS names in the broker certificate, default "localhost broker-1 broker-2 broker-3"
#   CERT_DAYS          validity in days, default 825 (the CA: 3650)
#   CERTS_OWNER        uid:gid to give the broker and client files to when run as root (a container's volume)
#   CERTS_PATH         the directory as the properties files should name it (default: OUT_DIR's absolute path)
set -eu

[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
command -v openssl >/dev/null 2>&1 || { echo "make-certs: openssl not found" >&2; exit 1; }

mkdir -p "$1"
out=$(cd "$1" && pwd)
path=${CERTS_PATH:-$out}
days=${CERT_DAYS:-825}
hosts=${BROKER_HOSTS:-localhost broker-1 broker-2 broker-3}
admin_user=${ADMIN_USER:-admin}
client_user=${CLIENT_USER:-alice}
umask 077

for secret in "${ADMIN_PASSWORD:-}" "${CLIENT_PASSWORD:-}"; do
    case $secret in
        *\"*|*\\*) echo "make-certs: passwords may not contain \" or \\ (they go into a JAAS config)" >&2; exit 2 ;;
    esac
done

wanted="ca.pem broker.keystore.pem"
[ -z "${ADMIN_PASSWORD:-}" ] || wanted="$wanted admin.properties"
[ -z "${CLIENT_PASSWORD:-}" ] || wanted="$wanted client.properties"
missing=
for f in $wanted; do
    [ -e "$out/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
    echo "make-certs: $out already has $wanted; nothing to do"
    exit 0
fi

work=$(mktemp -d "$out/.make-certs.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

if [ ! -e "$out/ca.pem" ]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
        -subj "/O=Strata demo/CN=Strata demo CA" -keyout "$work/ca.key" -out "$work/ca.pem" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    chmod 644 "$work/ca.pem"
    mv "$work/ca.key" "$out/ca.key"
    mv "$work/ca.pem" "$out/ca.pem"
    echo "make-certs: wrote $out/ca.pem (truststore) and $out/ca.key"
fi

if [ ! -e "$out/broker.keystore.pem" ]; then
    [ -e "$out/ca.key" ] || { echo "make-certs: $out/ca.pem exists without ca.key: cannot sign" >&2; exit 1; }
    san="IP:127.0.0.1"
    for h in $hosts; do
        san="$san,DNS:$h"
    done
    cat > "$work/ext.cnf" <<CNF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san
CNF
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/broker.key"
    openssl req -new -key "$work/broker.key" -subj "/O=Strata demo/CN=broker" -out "$work/broker.csr"
    openssl x509 -req -sha256 -days "$days" -in "$work/broker.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -extfile "$work/ext.cnf" -out "$work/broker.crt"
    if [ -n "${SSL_KEY_PASSWORD:-}" ]; then     # Kafka's PEM keystores take encrypted PKCS#8 keys
        openssl pkcs8 -topk8 -v2 aes-256-cbc -in "$work/broker.key" -passout env:SSL_KEY_PASSWORD \
            -out "$work/broker.key.enc"
        mv "$work/broker.key.enc" "$work/broker.key"
    fi
    cat "$work/broker.key" "$work/broker.crt" "$out/ca.pem" > "$work/broker.keystore.pem"
    mv "$work/broker.keystore.pem" "$out/broker.keystore.pem"
    echo "make-certs: wrote $out/broker.keystore.pem (SANs $san)"
fi

properties() {     # file mechanism login-module user password
    if [ ! -e "$out/$1" ]; then
        {
            echo "# $4 over SASL_SSL with $2 (deploy/security/make-certs.sh); use with --command-config"
            echo "security.protocol=SASL_SSL"
            echo "sasl.mechanism=$2"
            printf '%s\n' "sasl.jaas.config=$3 required username=\"$4\" password=\"$5\";"
            echo "ssl.truststore.type=PEM"
            echo "ssl.truststore.location=$path/ca.pem"
        } > "$work/$1"
        mv "$work/$1" "$out/$1"
        echo "make-certs: wrote $out/$1 (user $4)"
    fi
}
[ -z "${ADMIN_PASSWORD:-}" ] || \
    properties admin.properties PLAIN org.apache.kafka.common.security.plain.PlainLoginModule "$admin_user" \
        "$ADMIN_PASSWORD"
[ -z "${CLIENT_PASSWORD:-}" ] || \
    properties client.properties SCRAM-SHA-512 org.apache.kafka.common.security.scram.ScramLoginModule \
        "$client_user" "$CLIENT_PASSWORD"

if [ -n "${CERTS_OWNER:-}" ] && [ "$(id -u)" = 0 ]; then
    # the brokers and the tools read these; ca.key stays root's
    for f in broker.keystore.pem admin.properties client.properties; do
        [ ! -e "$out/$f" ] || chown "$CERTS_OWNER" "$out/$f"
    done
fi
