#!/bin/sh
# fakecloud.sh DIR start NAME [PORT] | stop ID | list OWNER | delete ID | power_off ID | power_on ID
#
# A cloud CLI for tests: every server is a real demo-backend process on its
# own loopback address (127.0.X.Y) and the provider's port, recorded as
# DIR/servers/ID.json. Without PORT (a provider with none) the server serves
# on the port in DIR/own-port, and its address says so (IP:PORT). DIR/backend names the demo-backend binary. Files in
# DIR make a command misbehave: DIR/fail-CMD holds a mode (fail, garbage,
# noaddr, huge, hang, tempfail, dup, down), DIR/boot the seconds a server
# stays "provisioning", DIR/resume the seconds a server powered on again
# does, DIR/calls logs every call. power_off kills a server's process and
# lists it "stopped"; power_on starts it again on the same address.
set -eu
dir=$1 cmd=$2
shift 2
mkdir -p "$dir/servers"
echo "$cmd $*" >>"$dir/calls"

mode=$(cat "$dir/fail-$cmd" 2>/dev/null || true)
case $mode in
fail) echo "fakecloud: $cmd refused: quota exceeded for project test" >&2; exit 3 ;;
garbage) echo "fakecloud: the API's gateway answered 502" >&2; echo "<html>502 Bad Gateway</html>"; exit 0 ;;
noaddr) [ "$cmd" = start ] && { echo "fakecloud: server has no public IP yet" >&2; echo '{"id": "srv-noaddr"}'; exit 0; } ;;
huge) echo "fakecloud: dumping" >&2; head -c 2000000 /dev/zero | tr '\0' 'x'; exit 0 ;;
hang) echo "fakecloud: waiting for the API" >&2; exec sleep 600 ;;
tempfail)
	# Refuse twice, then work.
	n=$(cat "$dir/tempfail-count" 2>/dev/null || echo 0)
	echo $((n + 1)) >"$dir/tempfail-count"
	if [ "$n" -lt 2 ]; then echo "fakecloud: RequestLimitExceeded" >&2; exit 75; fi ;;
down)
	# An outage: "try again later" until DIR/api-up appears.
	if [ ! -e "$dir/api-up" ]; then echo "fakecloud: 503 Service Unavailable" >&2; exit 75; fi ;;
esac

now=$(date +%s.%N) # boots are timed to the nanosecond, not in whole seconds
# dup: the first start creates its server but says "later" (a create that
# timed out at the API's edge), so the retry makes a second one.
if [ "$mode" = dup ] && [ "$cmd" = start ] && [ ! -e "$dir/dup-done" ]; then
	: >"$dir/dup-done"
	"$0" "$dir" start "$@" >/dev/null
	echo "fakecloud: gateway timeout" >&2
	exit 75
fi
case $cmd in
start)
	name=$1 port=${2:-}
	exec 9>"$dir/lock"
	flock 9
	n=$(($(cat "$dir/seq" 2>/dev/null || echo 0) + 1))
	echo $n >"$dir/seq"
	id="srv-$n"
	ip="127.0.$((n / 200 + 100)).$((n % 200 + 2))"
	addr=$ip
	if [ -z "$port" ]; then
		port=$(cat "$dir/own-port")
		addr=$ip:$port
	fi
	setsid "$(cat "$dir/backend")" --listen "$ip:$port" --name "$name" >"$dir/$id.log" 2>&1 </dev/null 9>&- &
	pid=$!
	jq -n --arg id "$id" --arg name "$name" --arg ip "$addr" --arg listen "$ip:$port" --argjson pid "$pid" --argjson created "$now" \
		--argjson tags "${SHOAL_TAGS:-{\}}" \
		'{id: $id, name: $name, address: $ip, listen: $listen, pid: $pid, created: $created, tags: $tags}' >"$dir/$id.tmp"
	mv "$dir/$id.tmp" "$dir/servers/$id.json" # whole, for a list running now
	jq -c '{id, address}' "$dir/servers/$id.json"
	;;
stop | delete)
	f="$dir/servers/$1.json"
	[ -f "$f" ] || exit 0 # already gone
	pid=$(jq .pid "$f")
	[ "$pid" -gt 0 ] && kill "$pid" 2>/dev/null || true
	rm -f "$f"
	;;
power_off | power_on)
	f="$dir/servers/$1.json"
	[ -f "$f" ] || { echo "fakecloud: no server $1" >&2; exit 4; }
	exec 9>"$dir/lock"
	flock 9
	pid=$(jq .pid "$f")
	[ "$pid" -gt 0 ] && kill "$pid" 2>/dev/null || true
	if [ "$cmd" = power_off ]; then
		jq '.stopped = true | .pid = 0' "$f" >"$f.tmp"
	else
		setsid "$(cat "$dir/backend")" --listen "$(jq -r .listen "$f")" --name "$(jq -r .name "$f")" >>"$dir/$1.log" 2>&1 </dev/null 9>&- &
		jq --argjson pid $! --argjson now "$now" '.stopped = false | .pid = $pid | .resumed = $now' "$f" >"$f.tmp"
	fi
	mv "$f.tmp" "$f"
	;;
list)
	owner=$1 boot=$(cat "$dir/boot" 2>/dev/null || echo 0) resume=$(cat "$dir/resume" 2>/dev/null || echo 0)
	# A server deleted meanwhile is skipped, not an error.
	cat "$dir"/servers/*.json 2>/dev/null | jq -s --arg owner "$owner" --argjson now "$now" --argjson boot "$boot" --argjson resume "$resume" \
		'[.[] | select(.tags["shoal-owner"] == $owner)
		      | {id, name, address, tags, state: (if .stopped then "stopped"
		          elif $now < .created + $boot or $now < (.resumed // 0) + $resume then "provisioning" else "running" end)}]'
	;;
*) echo "fakecloud: unknown command $cmd" >&2; exit 2 ;;
esac
