package ssh

// The shell scripts run on hosts. Each is a constant run as
// `sh -c SCRIPT sh ARGS...` (see script): what varies is in the arguments,
// never in the text, so no name, path or template output is ever parsed by
// the remote shell.

// Exit statuses of launchScript and hookScript that name what is missing.
const (
	exitNoDir     = 65
	exitNoCommand = 66
	exitGone      = 67
)

// pollScript prints the stat line of every process: one read per host per
// interval, whatever the number of instances (exit detection and usage).
const pollScript = `cd /proc && cat [0-9]*/stat 2>/dev/null; exit 0`

// listenScript prints the TCP sockets of the host's network namespace
// (state 0A is LISTEN).
const listenScript = `cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; exit 0`

// prepare makes the log directory ($1) absolute, cds to the working
// directory ($2) and checks that the command ($3) is there.
const prepare = `mkdir -p "$1" && logdir=$(cd "$1" && pwd) || exit 1
cd "$2" 2>/dev/null || { echo "working directory $2 not found" >&2; exit 65; }
command -v "$3" >/dev/null 2>&1 || { echo "command $3 not found" >&2; exit 66; }
`

// launchScript starts an instance: $1 log directory, $2 working directory,
// $3 argv[0], $4 instance name, then env words (KEY=VALUE) and argv for
// env(1). The instance gets a session (and process group) of its
// own, stdin /dev/null and its output appended to its log; the script waits
// until it leads its session and prints its pid and start time (field 22
// of its stat).
const launchScript = prepare + `log=$logdir/$4.log
shift 4
setsid env -- "$@" </dev/null >>"$log" 2>&1 &
pid=$!
i=0
while :; do
	read -r s </proc/$pid/stat || { echo "instance exited at once" >&2; exit 1; }
	s=${s##*) }
	set -- $s
	# Until setsid has run, the child is in this shell's group: signals
	# to its group would miss it.
	[ "$3" = "$pid" ] || [ "$1" = Z ] || [ $i -ge 200 ] || { i=$((i+1)); sleep 0.01; continue; }
	break
done
[ "$3" = "$pid" ] || { echo "instance did not get a session of its own" >&2; exit 1; }
echo "$pid ${20}"
`

// hookScript runs a hook in the foreground: $1 log directory, $2 working
// directory, $3 argv[0], $4 instance name, $5 timeout in seconds, $6 hook
// name, then env words and argv. timeout(1) kills the hook's process group
// when it overruns.
const hookScript = prepare + `log=$logdir/$4.log
t=$5 hook=$6
shift 6
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) shoal: $hook: running (timeout ${t}s)" >>"$log"
timeout -k 1 "$t" env -- "$@" </dev/null >>"$log" 2>&1
rc=$?
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) shoal: $hook: exit status $rc" >>"$log"
exit $rc
`

// stopScript stops the process group led by $1 if $1 still has start time
// $2: SIGTERM (and SIGCONT, for a stopped process), SIGKILL after $3 tenths
// of a second, and waits until no process of the group is left. Exit 67:
// the leader was already gone (or the pid is another process now).
const stopScript = `pid=$1 start=$2 grace=$3
leader() {
	read -r s </proc/$pid/stat 2>/dev/null || return 1
	s=${s##*) }
	set -- $s
	[ "$1" != Z ] && [ "$1" != X ] && [ "${20}" = "$start" ]
}
group() {
	cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$pid" '{ sub(/.*\) /, ""); if ($3 == g && $1 != "Z" && $1 != "X") f = 1 } END { exit !f }'
}
leader || exit 67
kill -TERM -$pid 2>/dev/null
kill -CONT -$pid 2>/dev/null
i=0
while leader || group; do
	if [ $i -ge $grace ]; then kill -KILL -$pid 2>/dev/null; fi
	sleep 0.1
	i=$((i+1))
done
`

// markedScript lists the processes carrying SHOAL_OWNER=$1 and
// SHOAL_HOST=$2 (the running hooks, SHOAL_HOOK, left out): per process a
// line "SHOAL_INSTANCE-value<TAB>SHOAL_POOL-value<TAB>stat line". grep
// reads the environments of all processes in one go.
const markedScript = `cd /proc || exit 1
files=$(grep -lzxF -e "SHOAL_OWNER=$1" [0-9]*/environ 2>/dev/null)
[ -n "$files" ] || exit 0
for f in $(grep -lzxF -e "SHOAL_HOST=$2" $files 2>/dev/null); do
	grep -qz '^SHOAL_HOOK=' $f 2>/dev/null && continue
	name=$(grep -zaE '^SHOAL_INSTANCE=' $f 2>/dev/null | tr -d '\0')
	pool=$(grep -zaE '^SHOAL_POOL=' $f 2>/dev/null | tr -d '\0')
	read -r s <${f%/environ}/stat 2>/dev/null || continue
	printf '%s\t%s\t%s\n' "${name#SHOAL_INSTANCE=}" "${pool#SHOAL_POOL=}" "$s"
done
exit 0
`

// verifyScript prints the marker variables of pid $1 if it still has start
// time $2; exit 67 if it has not.
const verifyScript = `pid=$1 start=$2
read -r s </proc/$pid/stat 2>/dev/null || exit 67
s=${s##*) }
set -- $s
{ [ "$1" != Z ] && [ "$1" != X ] && [ "${20}" = "$start" ]; } || exit 67
tr '\0' '\n' </proc/$pid/environ | grep -E '^SHOAL_(OWNER|HOST|INSTANCE|HOOK)='
exit 0
`

// rotateScript rotates and expires the logs in $1: NAME.log over $2 bytes is
// copied to NAME.log.1 (older ones shifted, $3 kept) and truncated; files
// of instances not in $5 (names, one a line) untouched for more than $4
// minutes are deleted.
const rotateScript = `dir=$1 max=$2 keep=$3 ret=$4 live=$5
cd "$dir" 2>/dev/null || exit 0
nl='
'
for f in *.log *.log.[0-9]*; do
	[ -f "$f" ] || continue
	name=${f%%.log*}
	case "$nl$live$nl" in
	*"$nl$name$nl"*) ;;
	*) if [ -n "$(find "$f" -maxdepth 0 -mmin +"$ret" 2>/dev/null)" ]; then rm -f -- "$f"; continue; fi ;;
	esac
	case "$f" in
	*.log) ;;
	*) n=${f##*.log.}; [ "$n" -gt "$keep" ] 2>/dev/null && rm -f -- "$f"; continue ;;
	esac
	size=$(wc -c <"$f")
	[ "$size" -gt "$max" ] || continue
	i=$((keep - 1))
	while [ $i -ge 1 ]; do
		[ -f "$f.$i" ] && mv -f -- "$f.$i" "$f.$((i + 1))"
		i=$((i - 1))
	done
	[ "$keep" -gt 0 ] && cp -- "$f" "$f.1"
	: >"$f"
done
exit 0
`
