#!/usr/bin/env bash
# bench/run.sh: the `make bench` report. Run from anywhere; it works from the
# repository root.
#
# It loads the demo page (GET /) three ways, in alternating rounds so that drift
# in the machine's speed hits all three alike, and reports the median of each:
#   (a) direct     one demo-backend, no proxy;
#   (b) haproxy    a minimal hand-written haproxy.cfg over two static demo-backends;
#   (c) shoal      shoal's own HAProxy over the two instances of a shoal group.
# (c)/(b) is the cost of shoal's HAProxy configuration; the goal is >= 0.97.
# The machine's speed drifts between rounds, so (b) and (c) are measured back to
# back in every round, in alternating order, and the ratio reported is the
# median of the per-round ratios.
# Then it scales the group to 5 and samples shoal's own idle CPU and RSS.
#
# Everything listens on 127.0.0.1 only, and every process started here is
# stopped on exit, Ctrl-C included.
#
# Environment:
#   BENCH_ROUNDS=7       rounds per target
#   BENCH_SECONDS=6      seconds per round
#   BENCH_CONNS=32       connections (wrk -t1 -cN)
#   BENCH_IDLE_SECONDS=20  how long to sample shoal's idle CPU
#   BENCH_NBTHREAD=      nbthread for both HAProxies; empty: HAProxy's default,
#                        which is what shoal uses unless told otherwise
#   BENCH_SHOAL=bin/shoal  the shoal binary to measure
#   BENCH_TOOL=wrk       wrk, or loadgen (bin/loadgen, also the fallback without wrk)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

ROUNDS=${BENCH_ROUNDS:-7}
SECONDS_PER_ROUND=${BENCH_SECONDS:-6}
CONNS=${BENCH_CONNS:-32}
IDLE_SECONDS=${BENCH_IDLE_SECONDS:-20}
NBTHREAD=${BENCH_NBTHREAD:-}
RATIO_GOAL=0.97
TARGETS=(direct haproxy shoal)

declare -A LABEL=(
	[direct]="(a) demo-backend, direct"
	[haproxy]="(b) minimal haproxy.cfg, 2 servers"
	[shoal]="(c) shoal's HAProxy, 2 instances"
)
declare -A URL STATUS

log() { printf 'bench: %s\n' "$*" >&2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shoal-bench.XXXXXX")
PIDS=()      # processes to stop on exit, in start order
SHOAL_PID=   # stopped first and with more patience: it drains its instances

# alive PID: true while PID runs (a zombie has already exited).
alive() {
	local s
	s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $s != Z* ]]
}

# descendants PID: every process below PID.
descendants() {
	local c
	for c in $(pgrep -P "$1" || true); do
		echo "$c"
		descendants "$c"
	done
}

# any_alive PID...: true while any of the PIDs runs.
any_alive() {
	local p
	for p; do
		alive "$p" && return 0
	done
	return 1
}

# stop SECONDS PID...: SIGTERM, then SIGKILL whatever is left after SECONDS.
stop() {
	local grace=$1 i
	shift
	[[ $# -gt 0 ]] || return 0
	kill -TERM "$@" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		any_alive "$@" || return 0
		sleep 0.1
	done
	kill -KILL "$@" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [[ -n $SHOAL_PID ]]; then
		# Collected first: if shoal dies without stopping its HAProxy and
		# instances, they are killed here rather than left behind.
		local kids
		mapfile -t kids < <(descendants "$SHOAL_PID")
		stop 20 "$SHOAL_PID"
		stop 5 "${kids[@]}"
	fi
	stop 5 "${PIDS[@]}"
	wait 2>/dev/null || true
	case $rc in
	0 | 130 | 143) rm -rf "$WORK" ;; # done, or interrupted on purpose
	*) log "failed (exit $rc); logs kept in $WORK" ;;
	esac
	exit "$rc"
}
trap cleanup EXIT
trap 'log "line $LINENO failed: $BASH_COMMAND"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port sets PORT to a TCP port on 127.0.0.1 that nothing listens on and
# that no earlier call returned. (A global, not output: a $(...) subshell would
# lose USED_PORTS.)
USED_PORTS=" "
free_port() {
	while :; do
		PORT=$((20000 + RANDOM % 40000))
		[[ $USED_PORTS == *" $PORT "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
			USED_PORTS+="$PORT "
			return
		fi
	done
}

# start NAME CMD...: runs CMD in the background, logging to $WORK/NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$WORK/$name.log" 2>&1 &
	PIDS+=($!)
}

# wait_http URL PID SECONDS: waits until URL answers 200, failing if PID exits.
wait_http() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		curl -fs -o /dev/null --max-time 1 "$1" && return 0
		alive "$2" || return 1
		sleep 0.1
	done
	return 1
}

# ensure_pkg CMD: installs Debian package CMD if the command is missing and we are root.
ensure_pkg() {
	command -v "$1" >/dev/null && return 0
	[[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || return 1
	log "installing $1 with apt-get"
	{ apt-get install -y -q "$1" || { apt-get update -q && apt-get install -y -q "$1"; }; } >"$WORK/apt-$1.log" 2>&1
	command -v "$1" >/dev/null
}

# to_ms VALUE: wrk's "789.00us", "8.25ms", "1.02s" or "1.5m" in milliseconds.
to_ms() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); print v / 1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); print v + 0 }
		else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000 }
		else if (v ~ /m$/) { sub(/m$/, "", v); print v * 60000 }
		else print "null"
	}'
}

# measure URL SECONDS: prints "rps p50_ms p99_ms errors" for one round.
measure() {
	local url=$1 secs=$2 out=$WORK/round.out
	if [[ $TOOL == wrk ]]; then
		wrk -t1 -c"$CONNS" -d"${secs}s" --latency "$url" >"$out" 2>&1 || true
		local rps p50 p99 errors
		rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
		p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$out")")
		p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$out")")
		errors=$(awk '
			/Non-2xx or 3xx responses:/ { n += $NF }
			/Socket errors:/ { gsub(/[^0-9]+/, " "); for (i = 1; i <= NF; i++) n += $i }
			END { print n + 0 }' "$out")
		echo "${rps:-0} ${p50:-null} ${p99:-null} $errors"
	else
		"$ROOT/bin/loadgen" -url "$url" -c "$CONNS" -d "${secs}s" -json >"$out" 2>&1 || true
		jq -r '"\(.rps) \(.p50_ms) \(.p99_ms) \(.failures)"' "$out"
	fi
}

# median: the median of the numbers on stdin, or null if there are none.
median() {
	sort -g | awk '{ a[NR] = $1 } END {
		if (NR == 0) print "null"
		else if (NR % 2) print a[(NR + 1) / 2]
		else print (a[NR / 2] + a[NR / 2 + 1]) / 2
	}'
}

# in_service: how many of group web's instances shoal reports as in-service.
in_service() {
	local json
	json=$("$SHOAL" status -c "$SHOAL_CFG" -o json 2>/dev/null) || { echo 0; return; }
	jq -r '[.groups[]? | select(.name == "web") | .instances[]? | select(.state == "in-service")] | length' \
		<<<"$json" 2>/dev/null || echo 0
}

# wait_in_service N SECONDS: waits until N instances are in service.
wait_in_service() {
	local i
	for ((i = 0; i < $2 * 2; i++)); do
		[[ $(in_service) -ge $1 ]] && return 0
		alive "$SHOAL_PID" || return 1
		sleep 0.5
	done
	return 1
}

# cpu_ticks PID: utime + stime of PID, in clock ticks.
cpu_ticks() {
	local stat
	stat=$(<"/proc/$1/stat")
	# Fields after the ")" that ends the command name start at field 3.
	local -a f
	read -ra f <<<"${stat##*) }"
	echo $((f[11] + f[12]))
}

# --- build and tools ----------------------------------------------------------

# Other work on the machine skews everything; the report shows how busy it was.
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

log "building bin/demo-backend and bin/loadgen"
go build -o bin/demo-backend ./cmd/demo-backend
go build -o bin/loadgen ./cmd/loadgen

if [[ ${BENCH_TOOL:-wrk} == wrk ]] && ensure_pkg wrk; then
	TOOL=wrk
	TOOL_DESC="wrk -t1 -c$CONNS -d${SECONDS_PER_ROUND}s --latency ($({ wrk -v 2>&1 || true; } | awk 'NR == 1 { print $1, $2 }'))"
else
	TOOL=loadgen
	TOOL_DESC="bin/loadgen -c $CONNS -d ${SECONDS_PER_ROUND}s"
fi
HAPROXY=$(command -v haproxy || true)
if [[ -z $HAPROXY ]] && ensure_pkg haproxy; then
	HAPROXY=$(command -v haproxy)
fi

# --- (a) direct, and the two static backends of (b) ----------------------------

BACKEND_PORTS=()
for name in bench-a bench-b; do
	free_port
	port=$PORT
	start "$name" "$ROOT/bin/demo-backend" --listen "127.0.0.1:$port" --name "$name"
	wait_http "http://127.0.0.1:$port/healthz" "${PIDS[-1]}" 10 || {
		log "demo-backend $name did not start:"
		cat "$WORK/$name.log" >&2
		exit 1
	}
	BACKEND_PORTS+=("$port")
done
URL[direct]="http://127.0.0.1:${BACKEND_PORTS[0]}/"
STATUS[direct]=ok
PAGE_BYTES=$(curl -fs "${URL[direct]}" | wc -c)

# --- (b) minimal haproxy.cfg --------------------------------------------------

if [[ -z $HAPROXY ]]; then
	STATUS[haproxy]="haproxy not installed"
else
	free_port
	port=$PORT
	{
		echo "global"
		if [[ -n $NBTHREAD ]]; then
			echo "    nbthread $NBTHREAD"
		fi
		cat <<-EOF
			defaults
			    mode http
			    timeout connect 5s
			    timeout client 30s
			    timeout server 30s

			frontend fe
			    bind 127.0.0.1:$port
			    default_backend be

			backend be
			    balance roundrobin
			    server s1 127.0.0.1:${BACKEND_PORTS[0]}
			    server s2 127.0.0.1:${BACKEND_PORTS[1]}
		EOF
	} >"$WORK/haproxy.cfg"
	"$HAPROXY" -c -q -f "$WORK/haproxy.cfg"
	start haproxy "$HAPROXY" -db -f "$WORK/haproxy.cfg"
	URL[haproxy]="http://127.0.0.1:$port/"
	if wait_http "${URL[haproxy]}" "${PIDS[-1]}" 10; then
		STATUS[haproxy]=ok
	else
		STATUS[haproxy]="haproxy did not start: $(tail -n 3 "$WORK/haproxy.log" | tr '\n' ' ')"
	fi
fi

# --- (c) shoal ----------------------------------------------------------------

SHOAL=$(realpath -m "${BENCH_SHOAL:-bin/shoal}")
SHOAL_CFG=$WORK/shoal.yaml
if [[ ! -x $SHOAL ]]; then
	STATUS[shoal]="shoal not built (no ${BENCH_SHOAL:-bin/shoal})"
elif [[ -z $HAPROXY ]]; then
	STATUS[shoal]="haproxy not installed"
else
	free_port
	port=$PORT
	{
		cat <<-EOF
			listen: 127.0.0.1:$port
			state_dir: $WORK/state
		EOF
		if [[ -n $NBTHREAD ]]; then
			printf 'haproxy:\n  global: ["nbthread %s"]\n' "$NBTHREAD"
		fi
		cat <<-EOF
			groups:
			  - name: web
			    min_size: 2
			    max_size: 5
			    cooldown: {up: 1s, down: 1s} # so the manual scale to 5 is not held back
			    health:
			      path: /healthz
			    template:
			      command: ["$ROOT/bin/demo-backend", "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
		EOF
	} >"$SHOAL_CFG"
	log "starting shoal"
	"$SHOAL" serve -c "$SHOAL_CFG" >"$WORK/shoal.log" 2>&1 &
	SHOAL_PID=$!
	URL[shoal]="http://127.0.0.1:$port/"
	if wait_in_service 2 60 && wait_http "${URL[shoal]}" "$SHOAL_PID" 10; then
		STATUS[shoal]=ok
	else
		STATUS[shoal]="shoal did not get 2 instances in service within 60s: $(tail -n 3 "$WORK/shoal.log" | tr '\n' ' ')"
	fi
fi

# --- load rounds --------------------------------------------------------------

for t in "${TARGETS[@]}"; do
	if [[ ${STATUS[$t]} == ok ]]; then
		log "warming up $t"
		measure "${URL[$t]}" 1 >/dev/null
	fi
done
for ((r = 1; r <= ROUNDS; r++)); do
	order=("${TARGETS[@]}")
	if ((r % 2 == 0)); then
		order=(shoal haproxy direct)
	fi
	for t in "${order[@]}"; do
		[[ ${STATUS[$t]} == ok ]] || continue
		sample=$(measure "${URL[$t]}" "$SECONDS_PER_ROUND")
		log "round $r/$ROUNDS $t: $sample (req/s p50_ms p99_ms errors)"
		echo "$sample" >>"$WORK/samples.$t"
	done
done

# --- shoal idle with 5 instances ---------------------------------------------

IDLE_STATUS="not measured: ${STATUS[shoal]}"
IDLE_CPU=null
IDLE_RSS_KIB=null
if [[ ${STATUS[shoal]} == ok ]]; then
	log "scaling web to 5"
	if ! timeout 180 "$SHOAL" scale web --size 5 --sync -c "$SHOAL_CFG" >"$WORK/scale.log" 2>&1; then
		IDLE_STATUS="shoal scale failed: $(tail -n 3 "$WORK/scale.log" | tr '\n' ' ')"
	elif ! wait_in_service 5 60; then
		IDLE_STATUS="5 instances not in service within 60s"
	else
		sleep 2 # let the scale-up's own work settle
		log "sampling shoal's idle CPU for ${IDLE_SECONDS}s"
		hz=$(getconf CLK_TCK)
		t0=$(cpu_ticks "$SHOAL_PID")
		sleep "$IDLE_SECONDS"
		t1=$(cpu_ticks "$SHOAL_PID")
		IDLE_CPU=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v s="$IDLE_SECONDS" 'BEGIN { printf "%.2f", 100 * d / hz / s }')
		IDLE_RSS_KIB=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SHOAL_PID/status")
		IDLE_STATUS=ok
	fi
fi

# --- report -------------------------------------------------------------------

declare -A RPS P50 P99 ERRORS ROUNDS_RPS
for t in "${TARGETS[@]}"; do
	f=$WORK/samples.$t
	[[ -s $f ]] || { RPS[$t]=null P50[$t]=null P99[$t]=null ERRORS[$t]=null ROUNDS_RPS[$t]=""; continue; }
	RPS[$t]=$(cut -d' ' -f1 "$f" | median)
	P50[$t]=$(cut -d' ' -f2 "$f" | median)
	P99[$t]=$(cut -d' ' -f3 "$f" | median)
	ERRORS[$t]=$(awk '{ n += $4 } END { print n + 0 }' "$f")
	ROUNDS_RPS[$t]=$(awk '{ printf "%s%.0f", (NR > 1 ? ", " : ""), $1 }' "$f")
done

RATIO=null
RATIO_OF_MEDIANS=null
ROUND_RATIOS=""
VERDICT="n/a"
if [[ ${RPS[shoal]} != null && ${RPS[haproxy]} != null ]]; then
	# Paired: round r of (c) against round r of (b), measured back to back.
	ratios=$(paste -d' ' <(cut -d' ' -f1 "$WORK/samples.shoal") <(cut -d' ' -f1 "$WORK/samples.haproxy") |
		awk '{ printf "%.3f\n", $1 / $2 }')
	RATIO=$(median <<<"$ratios")
	RATIO=$(awk -v r="$RATIO" 'BEGIN { printf "%.3f", r }')
	ROUND_RATIOS=$(paste -sd, <<<"$ratios" | sed 's/,/, /g')
	RATIO_OF_MEDIANS=$(awk -v c="${RPS[shoal]}" -v b="${RPS[haproxy]}" 'BEGIN { printf "%.3f", c / b }')
	VERDICT=$(awk -v r="$RATIO" -v g="$RATIO_GOAL" 'BEGIN { print (r >= g ? "PASS" : "FAIL") }')
fi

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
STAMP=$(date -u +%Y%m%d-%H%M%S)
DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
NPROC=$(nproc)
HAPROXY_VERSION=$([[ -n $HAPROXY ]] && "$HAPROXY" -v | head -1 || echo "not installed")
KERNEL=$(uname -sr)
GO_VERSION=$(go env GOVERSION)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
mkdir -p bench/results
OUT=bench/results/$STAMP

fmt_num() { [[ $1 == null ]] && echo "-" || awk -v v="$1" -v f="$2" 'BEGIN { printf f, v }'; }

{
	echo "# shoal bench $DATE"
	echo
	echo "- machine: $NPROC CPUs, $KERNEL, $HAPROXY_VERSION, $GO_VERSION, commit $COMMIT"
	echo "- load: $TOOL_DESC, GET / ($PAGE_BYTES-byte page), $ROUNDS rounds per target in alternating order, medians shown"
	echo "- HAProxy nbthread: ${NBTHREAD:-default (not set)}"
	echo "- load average (1/5/15 min): $LOAD_BEFORE before, $LOAD_AFTER after"
	echo
	echo "| target | req/s | p50 | p99 | errors | req/s per round |"
	echo "|---|---:|---:|---:|---:|---|"
	for t in "${TARGETS[@]}"; do
		if [[ ${STATUS[$t]} == ok ]]; then
			printf '| %s | %s | %s ms | %s ms | %s | %s |\n' "${LABEL[$t]}" \
				"$(fmt_num "${RPS[$t]}" %.0f)" "$(fmt_num "${P50[$t]}" %.2f)" "$(fmt_num "${P99[$t]}" %.2f)" \
				"${ERRORS[$t]}" "${ROUNDS_RPS[$t]}"
		else
			printf '| %s | %s | | | | |\n' "${LABEL[$t]}" "${STATUS[$t]}"
		fi
	done
	echo
	if [[ $RATIO == null ]]; then
		echo "**(c)/(b) req/s: n/a** (needs both (b) and (c))"
	else
		echo "**(c)/(b) req/s: $RATIO** (goal >= $RATIO_GOAL) **$VERDICT** — median of the per-round ratios ($ROUND_RATIOS); ratio of the medians: $RATIO_OF_MEDIANS"
	fi
	echo
	if [[ $IDLE_STATUS == ok ]]; then
		echo "shoal idle with 5 instances: $IDLE_CPU% of one core over ${IDLE_SECONDS}s, RSS $(awk -v k="$IDLE_RSS_KIB" 'BEGIN { printf "%.1f", k / 1024 }') MiB"
	else
		echo "shoal idle with 5 instances: $IDLE_STATUS"
	fi
} >"$OUT.md.tmp"

# target_json T: one target's results as JSON.
target_json() {
	local t=$1 rounds="[]"
	if [[ -s $WORK/samples.$1 ]]; then
		rounds=$(jq -Rn '[inputs | split(" ") | map(tonumber? // null)
			| {rps: .[0], p50_ms: .[1], p99_ms: .[2], errors: .[3]}]' <"$WORK/samples.$t")
	fi
	jq -n --arg lbl "${LABEL[$t]}" --arg status "${STATUS[$t]}" \
		--argjson rps "${RPS[$t]}" --argjson p50 "${P50[$t]}" --argjson p99 "${P99[$t]}" \
		--argjson errors "${ERRORS[$t]}" --argjson rounds "$rounds" \
		'{label: $lbl, status: $status, rps: $rps, p50_ms: $p50, p99_ms: $p99, errors: $errors, rounds: $rounds}'
}

jq -n \
	--arg date "$DATE" --argjson nproc "$NPROC" --arg haproxy "$HAPROXY_VERSION" --arg kernel "$KERNEL" \
	--arg go "$GO_VERSION" --arg commit "$COMMIT" --arg load_before "$LOAD_BEFORE" --arg load_after "$LOAD_AFTER" --arg tool "$TOOL_DESC" --argjson page_bytes "$PAGE_BYTES" \
	--argjson rounds "$ROUNDS" --argjson seconds "$SECONDS_PER_ROUND" --argjson conns "$CONNS" \
	--arg nbthread "$NBTHREAD" \
	--argjson direct "$(target_json direct)" --argjson haproxy_t "$(target_json haproxy)" \
	--argjson shoal "$(target_json shoal)" \
	--argjson ratio "$RATIO" --argjson ratio_of_medians "$RATIO_OF_MEDIANS" --argjson goal "$RATIO_GOAL" --arg verdict "$VERDICT" \
	--arg idle_status "$IDLE_STATUS" --argjson idle_cpu "$IDLE_CPU" --argjson idle_rss "$IDLE_RSS_KIB" \
	--argjson idle_seconds "$IDLE_SECONDS" \
	'{
		date: $date,
		machine: {nproc: $nproc, haproxy: $haproxy, kernel: $kernel, go: $go, commit: $commit,
			loadavg_before: $load_before, loadavg_after: $load_after},
		load: {tool: $tool, path: "/", page_bytes: $page_bytes, rounds: $rounds, seconds: $seconds,
			connections: $conns, nbthread: (if $nbthread == "" then null else ($nbthread | tonumber) end)},
		targets: {direct: $direct, haproxy: $haproxy_t, shoal: $shoal},
		ratio_shoal_haproxy: $ratio, ratio_of_medians: $ratio_of_medians, ratio_goal: $goal, verdict: $verdict,
		shoal_idle: {status: $idle_status, instances: 5, seconds: $idle_seconds,
			cpu_percent_of_one_core: $idle_cpu, rss_kib: $idle_rss}
	}' >"$OUT.json.tmp"

# Renamed only now so that a failed run leaves no half-written report.
mv "$OUT.json.tmp" "$OUT.json"
mv "$OUT.md.tmp" "$OUT.md"

cat "$OUT.md"
log "wrote $OUT.md and $OUT.json"
